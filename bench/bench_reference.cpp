// The float64 Eigen reference at B=1, H=1, S=1024, D=128: forward, and forward+backward.
//   build/cpu/bench/bench_reference
#include <benchmark/benchmark.h>

#include "harness/inputs.h"
#include "oracles/reference.h"

namespace {

attnfuzz::Case bench_case(bool causal) {
  attnfuzz::Case c;
  c.seed = 1;
  c.shape = {1, 1, 1, 1024, 1024, 128, 128};
  if (causal) c.mask = attnfuzz::MaskExpr::causal_mask(attnfuzz::Align::top_left);
  c.d_lse = attnfuzz::ValueDist{};
  return c;
}

void BM_ReferenceForward(benchmark::State& st) {
  const attnfuzz::Case c = bench_case(st.range(0) != 0);
  const attnfuzz::Inputs in = attnfuzz::generate_inputs(c);
  const attnfuzz::Problem p = attnfuzz::full_problem(c, in);
  for (auto _ : st) benchmark::DoNotOptimize(attnfuzz::reference_forward(p));
  st.SetItemsProcessed(st.iterations() * 1024 * 1024);
}

void BM_ReferenceForwardBackward(benchmark::State& st) {
  const attnfuzz::Case c = bench_case(st.range(0) != 0);
  const attnfuzz::Inputs in = attnfuzz::generate_inputs(c);
  const attnfuzz::Problem p = attnfuzz::full_problem(c, in);
  for (auto _ : st) {
    const attnfuzz::Forward f = attnfuzz::reference_forward(p);
    benchmark::DoNotOptimize(attnfuzz::reference_backward(p, f, in.d_out, in.d_lse));
  }
  st.SetItemsProcessed(st.iterations() * 1024 * 1024);
}

}  // namespace

BENCHMARK(BM_ReferenceForward)->Arg(0)->Arg(1)->ArgName("causal")->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ReferenceForwardBackward)->Arg(0)->Arg(1)->ArgName("causal")->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
