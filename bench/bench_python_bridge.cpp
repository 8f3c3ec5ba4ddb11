// The Python bridge's cost per backend call (docs/python-backends.md, "Speed"): the same
// no-op kernel in process (bench/noop_plugin.c, a plugin) and through the bridge
// (bench/noop_adapter.py, py:noop_adapter:NoOp), forward and backward, at a toy size and a
// large one, and toy calls that never repeat a problem (the worker's caches missing). Both
// paths convert each tensor once each way (float64 <-> the case dtype at its layout); the
// bridge adds the request, the worker's views and its one copy of each result.
//   build/cpu/bench/bench_python_bridge
#include <benchmark/benchmark.h>
#include <stdlib.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "harness/inputs.h"
#include "oracles/registry.h"

namespace {

using namespace attnfuzz;

Case bench_case(bool large) {
  Case c;
  c.seed = 1;
  c.dtype = large ? DType::bf16 : DType::f32;
  c.shape = large ? Shape{1, 8, 8, 2048, 2048, 128, 128} : Shape{1, 1, 1, 16, 16, 16, 16};
  c.mask = MaskExpr::causal_mask(Align::top_left);
  c.d_lse = ValueDist{};
  return c;
}

Backend& backend(bool python) {
  static std::unique_ptr<Backend> plugin = make_backend(std::string("plugin:") + ATTNFUZZ_NOOP_PLUGIN);
  static std::unique_ptr<Backend> bridge = [] {
    ::setenv("PYTHONPATH", ATTNFUZZ_BENCH_DIR, 1);
    return make_backend("py:noop_adapter:NoOp");
  }();
  return python ? *bridge : *plugin;
}

void BM_Forward(benchmark::State& st) {
  const Case c = bench_case(st.range(1) != 0);
  const Inputs in = generate_inputs(c);
  const Problem p = full_problem(c, in);
  Backend& b = backend(st.range(0) != 0);
  for (auto _ : st) benchmark::DoNotOptimize(b.forward(p));
}

void BM_Backward(benchmark::State& st) {
  const Case c = bench_case(st.range(1) != 0);
  const Inputs in = generate_inputs(c);
  const Problem p = full_problem(c, in);
  Backend& b = backend(st.range(0) != 0);
  const Forward f = b.forward(p);
  for (auto _ : st) benchmark::DoNotOptimize(b.backward(p, f, in.d_out, in.d_lse));
}

// Toy calls that never repeat a problem within 32 calls: the worker's caches of parsed
// problems and tensor tables (16 each) never hit, so every call parses its request afresh.
struct DistinctToys {
  std::vector<Case> cases;
  std::vector<Inputs> inputs;
  std::vector<Problem> problems;
  DistinctToys() {
    for (int64_t s = 16; s < 48; ++s) {
      Case c = bench_case(false);
      c.shape.seq_q = c.shape.seq_kv = s;
      cases.push_back(c);
      inputs.push_back(generate_inputs(c));
    }
    for (size_t i = 0; i < cases.size(); ++i) problems.push_back(full_problem(cases[i], inputs[i]));
  }
};

void BM_ForwardDistinct(benchmark::State& st) {
  static const DistinctToys toys;
  Backend& b = backend(st.range(0) != 0);
  size_t i = 0;
  for (auto _ : st) benchmark::DoNotOptimize(b.forward(toys.problems[i++ % toys.problems.size()]));
}

void BM_BackwardDistinct(benchmark::State& st) {
  static const DistinctToys toys;
  Backend& b = backend(st.range(0) != 0);
  std::vector<Forward> fwd;
  for (const auto& p : toys.problems) fwd.push_back(b.forward(p));
  size_t i = 0;
  for (auto _ : st) {
    const size_t k = i++ % toys.problems.size();
    benchmark::DoNotOptimize(b.backward(toys.problems[k], fwd[k], toys.inputs[k].d_out, toys.inputs[k].d_lse));
  }
}

// The floor of a bridge call: one small request and its reply (supports), no tensor. NoOp has
// no supports() of its own, so the bridge never asks it; NoOpSupports has one.
void BM_SupportsRoundTrip(benchmark::State& st) {
  static std::unique_ptr<Backend> checking = [] {
    ::setenv("PYTHONPATH", ATTNFUZZ_BENCH_DIR, 1);
    return make_backend("py:noop_adapter:NoOpSupports");
  }();
  const Case c = bench_case(false);
  const Inputs in = generate_inputs(c);
  const Problem p = full_problem(c, in);
  for (auto _ : st) benchmark::DoNotOptimize(checking->unsupported_reason(p));
}

// With --benchmark_repetitions, the minimum too: on a loaded machine the median carries the
// waits for a core, the minimum is nearer what the bridge itself costs.
double minimum(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

}  // namespace

BENCHMARK(BM_SupportsRoundTrip)->Unit(benchmark::kMillisecond)->ComputeStatistics("min", minimum);
BENCHMARK(BM_Forward)->ArgsProduct({{0, 1}, {0, 1}})->ArgNames({"python", "large"})->Unit(benchmark::kMillisecond)->ComputeStatistics("min", minimum);
BENCHMARK(BM_Backward)->ArgsProduct({{0, 1}, {0, 1}})->ArgNames({"python", "large"})->Unit(benchmark::kMillisecond)->ComputeStatistics("min", minimum);
BENCHMARK(BM_ForwardDistinct)->ArgsProduct({{0, 1}})->ArgNames({"python"})->Unit(benchmark::kMillisecond)->ComputeStatistics("min", minimum);
BENCHMARK(BM_BackwardDistinct)->ArgsProduct({{0, 1}})->ArgNames({"python"})->Unit(benchmark::kMillisecond)->ComputeStatistics("min", minimum);
