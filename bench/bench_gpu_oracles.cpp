// The GPU oracle set at real sizes (docs/gpu.md): cuda.reference64 and one contract baseline
// (cuda.emulated.bf16), forward and backward, against the Eigen reference on the CPU.
//   build/gpu/bench/bench_gpu_oracles [--reps N] [--eigen-heads N] [--quick]
// For each case: the GPU calls' wall time (median of --reps warm calls; the first call of the
// process also pays for the CUDA context) split into upload / kernels / download; the Eigen
// reference's time on --eigen-heads heads of the same case (scaled to all heads: one core,
// heads independent); and the largest relative difference of the GPU reference from Eigen
// on those heads.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "harness/inputs.h"
#include "oracles/gpu_oracles.h"
#include "oracles/error_terms.h"
#include "oracles/reference.h"

namespace {

using namespace attnfuzz;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

Case real_case(int64_t heads, int64_t seq, bool causal) {
  Case c;
  c.seed = 1;
  c.dtype = DType::bf16;
  c.shape = {1, heads, heads, seq, seq, 128, 128};
  if (causal) c.mask = MaskExpr::causal_mask(Align::top_left);
  c.d_lse = ValueDist{};
  return c;
}

double rel_diff(const Tensor& a, const Tensor& b) {
  double worst = 0, ref = 0;
  for (size_t i = 0; i < b.numel(); ++i) {
    if (!std::isfinite(b.data[i])) continue;
    worst = std::max(worst, std::fabs(a.data[i] - b.data[i]));
    ref = std::max(ref, std::fabs(b.data[i]));
  }
  return worst / std::max(ref, 1e-300);
}

struct Sample {
  double wall = 0;
  gpu::Timing t;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

void report(const char* what, const std::vector<Sample>& s) {
  std::vector<double> wall, host, up, comp, down, rel;
  for (const auto& x : s) {
    wall.push_back(x.wall), host.push_back(x.t.host_ms), up.push_back(x.t.upload_ms), comp.push_back(x.t.compute_ms);
    down.push_back(x.t.download_ms), rel.push_back(x.t.release_ms);
  }
  std::printf("  %-26s wall %8.2f ms (host %6.2f, upload %6.2f, kernels %7.2f, download %6.2f, free %6.2f) first call %8.2f ms\n", what,
              median(wall), median(host), median(up), median(comp), median(down), median(rel), s.empty() ? 0 : s.front().wall);
}

void bench_case(int64_t heads, int64_t seq, bool causal, int reps, int64_t eigen_heads) {
  std::printf("B=1 H=%lld S=%lld D=128 bf16 %s, random dLSE\n", static_cast<long long>(heads), static_cast<long long>(seq),
              causal ? "causal" : "no mask");
  auto t0 = Clock::now();
  const Case c = real_case(heads, seq, causal);
  const Inputs in = generate_inputs(c);
  const Problem p = full_problem(c, in);
  std::printf("  inputs and dense mask on the host            %9.2f ms\n", ms_since(t0));

  CudaReference64Backend ref64;
  std::vector<Sample> fwd, bwd;
  Forward f;
  for (int r = 0; r < reps + 1; ++r) {
    t0 = Clock::now();
    f = ref64.forward(p);
    fwd.push_back({ms_since(t0), ref64.last_timing()});
    t0 = Clock::now();
    const Gradients g = ref64.backward(p, f, in.d_out, in.d_lse);
    bwd.push_back({ms_since(t0), ref64.last_timing()});
  }
  report("cuda.reference64 forward", fwd);
  report("cuda.reference64 backward", bwd);

  CudaEmulatedBackend emu(Contract::bf16, false);
  std::vector<double> ew;
  for (int r = 0; r < std::max(1, reps / 2); ++r) {
    t0 = Clock::now();
    const Forward ef = emu.forward(p);
    const Gradients eg = emu.backward(p, ef, in.d_out, in.d_lse);
    ew.push_back(ms_since(t0));
  }
  std::printf("  %-34s wall %9.2f ms (forward + backward)\n", "cuda.emulated.bf16", median(ew));

  std::vector<Sample> terms;
  for (int r = 0; r < reps + 1; ++r) {
    Sample x;
    t0 = Clock::now();
    const ErrorTerms e = cuda_error_terms(p, f, in.d_out, in.d_lse, &x.t);
    x.wall = ms_since(t0);
    terms.push_back(x);
  }
  report("cuda error terms", terms);

  if (eigen_heads <= 0) return;
  const Case sub = real_case(eigen_heads, seq, causal);
  const Inputs sin = generate_inputs(sub);
  const Problem sp = full_problem(sub, sin);
  t0 = Clock::now();
  const Forward ef = reference_forward(sp);
  const Gradients eg = reference_backward(sp, ef, sin.d_out, sin.d_lse);
  const double eigen_ms = ms_since(t0);
  const Forward gf = ref64.forward(sp);
  const Gradients gg = ref64.backward(sp, gf, sin.d_out, sin.d_lse);
  std::printf("  Eigen reference forward + backward, %lld head(s) %9.2f ms  -> %.1f s for all %lld heads\n",
              static_cast<long long>(eigen_heads), eigen_ms,
              eigen_ms * static_cast<double>(heads) / static_cast<double>(eigen_heads) / 1000.0, static_cast<long long>(heads));
  std::printf("  cuda.reference64 vs Eigen (max |diff| / max |ref|): O %.2e  LSE %.2e  dQ %.2e  dK %.2e  dV %.2e\n", rel_diff(gf.o, ef.o),
              rel_diff(gf.lse, ef.lse), rel_diff(gg.dq, eg.dq), rel_diff(gg.dk, eg.dk), rel_diff(gg.dv, eg.dv));
  if (seq > 2048) return;  // the CPU terms take minutes a head there
  t0 = Clock::now();
  const ErrorTerms cpu_terms = reference_error_terms(sp, ef, sin.d_out, sin.d_lse);
  const double cpu_terms_ms = ms_since(t0);
  const ErrorTerms gpu_terms = cuda_error_terms(sp, ef, sin.d_out, sin.d_lse);
  double worst = 0;
  for (TensorId o : kOutputs)
    for (auto part : {&TermTensors::operand, &TermTensors::score, &TermTensors::stored})
      if (!(o == TensorId::O && part == &TermTensors::score)) worst = std::max(worst, rel_diff(gpu_terms[o].*part, cpu_terms[o].*part));
  std::printf(
      "  error terms on the CPU (oracles/error_terms.cpp), %lld head(s) %9.2f ms -> %.1f s for all heads; GPU vs CPU max rel. %.2e\n",
      static_cast<long long>(eigen_heads), cpu_terms_ms,
      cpu_terms_ms * static_cast<double>(heads) / static_cast<double>(eigen_heads) / 1000.0, worst);
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 5;
  int64_t eigen_heads = 1;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc)
      reps = std::atoi(argv[++i]);
    else if (a == "--eigen-heads" && i + 1 < argc)
      eigen_heads = std::atoll(argv[++i]);
    else if (a == "--quick")
      quick = true;
    else {
      std::fprintf(stderr, "usage: %s [--reps N] [--eigen-heads N] [--quick]\n", argv[0]);
      return 2;
    }
  }
  std::string why;
  if (!cuda_kernels_available(&why)) {
    std::printf("SKIPPED: %s\n", why.c_str());
    return 0;
  }
  std::printf("device: %s\n", gpu::device_description().c_str());
  if (quick) {
    bench_case(2, 256, true, 2, 1);
    return 0;
  }
  bench_case(8, 1088, true, reps, eigen_heads);
  bench_case(16, 4096, true, reps, eigen_heads);
  bench_case(16, 4096, false, reps, 0);
  return 0;
}
