// The Python bridge's cost per backend call (docs/python-backends.md, "Speed"): the same
// no-op kernel in process (bench/noop_plugin.c, a plugin) and through the bridge
// (bench/noop_adapter.py, py:noop_adapter:NoOp), forward and backward, at a toy size and a
// large one, and toy calls that never repeat a problem (the worker's caches missing). Both
// paths convert each tensor once each way (float64 <-> the case dtype at its layout); the
// bridge adds the request, the worker's views and its one copy of each result.
//   build/cpu/bench/bench_python_bridge
#include <benchmark/benchmark.h>
#include <dirent.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "harness/inputs.h"
#include "backends/registry.h"

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

// CPU seconds (user + system) used so far by this process's children: the Python workers.
// /proc/PID/stat counts in clock ticks (10 ms): read over a whole benchmark run, not per call.
double children_cpu_seconds() {
  double ticks = 0;
  DIR* proc = ::opendir("/proc");
  if (!proc) return 0;
  while (const dirent* e = ::readdir(proc)) {
    char path[300];
    std::snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
    FILE* f = std::fopen(path, "r");
    if (!f) continue;
    int ppid = 0;
    unsigned long utime = 0, stime = 0;
    // pid (comm) state ppid ... field 14 utime, 15 stime; comm has no spaces here (python3, attnfuzz).
    if (std::fscanf(f, "%*d %*s %*c %d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ppid, &utime, &stime) == 3 && ppid == ::getpid())
      ticks += static_cast<double>(utime + stime);
    std::fclose(f);
  }
  ::closedir(proc);
  return ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// Reports the workers' CPU time per call beside the bench's own: the bridge's whole CPU cost,
// which a loaded machine stretches less than the wall time (waits for a core are not in it).
struct WorkerCpu {
  benchmark::State& st;
  double start = children_cpu_seconds();
  explicit WorkerCpu(benchmark::State& s) : st(s) {}
  ~WorkerCpu() {
    st.counters["worker_cpu_ms"] = benchmark::Counter((children_cpu_seconds() - start) * 1e3, benchmark::Counter::kAvgIterations);
  }
};

// The build's paths, or the environment's (ATTNFUZZ_NOOP_PLUGIN, ATTNFUZZ_BENCH_DIR) where the
// binary runs elsewhere (the GPU machine, a quiet one).
std::string path_from_env(const char* name, const char* built) {
  const char* v = std::getenv(name);
  return v && *v ? v : built;
}

void set_pythonpath() { ::setenv("PYTHONPATH", path_from_env("ATTNFUZZ_BENCH_DIR", ATTNFUZZ_BENCH_DIR).c_str(), 1); }

Backend& backend(bool python) {
  static std::unique_ptr<Backend> plugin = make_backend("plugin:" + path_from_env("ATTNFUZZ_NOOP_PLUGIN", ATTNFUZZ_NOOP_PLUGIN));
  static std::unique_ptr<Backend> bridge = [] {
    set_pythonpath();
    return make_backend("py:noop_adapter:NoOp");
  }();
  return python ? *bridge : *plugin;
}

void BM_Forward(benchmark::State& st) {
  const Case c = bench_case(st.range(1) != 0);
  const Inputs in = generate_inputs(c);
  const Problem p = full_problem(c, in);
  Backend& b = backend(st.range(0) != 0);
  WorkerCpu cpu(st);
  for (auto _ : st) benchmark::DoNotOptimize(b.forward(p));
}

void BM_Backward(benchmark::State& st) {
  const Case c = bench_case(st.range(1) != 0);
  const Inputs in = generate_inputs(c);
  const Problem p = full_problem(c, in);
  Backend& b = backend(st.range(0) != 0);
  const Forward f = b.forward(p);
  WorkerCpu cpu(st);
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
  WorkerCpu cpu(st);
  for (auto _ : st) benchmark::DoNotOptimize(b.forward(toys.problems[i++ % toys.problems.size()]));
}

void BM_BackwardDistinct(benchmark::State& st) {
  static const DistinctToys toys;
  Backend& b = backend(st.range(0) != 0);
  std::vector<Forward> fwd;
  for (const auto& p : toys.problems) fwd.push_back(b.forward(p));
  size_t i = 0;
  WorkerCpu cpu(st);
  for (auto _ : st) {
    const size_t k = i++ % toys.problems.size();
    benchmark::DoNotOptimize(b.backward(toys.problems[k], fwd[k], toys.inputs[k].d_out, toys.inputs[k].d_lse));
  }
}

// The floor of a bridge call: one small request and its reply (supports), no tensor. NoOp has
// no supports() of its own, so the bridge never asks it; NoOpSupports has one.
void BM_SupportsRoundTrip(benchmark::State& st) {
  static std::unique_ptr<Backend> checking = [] {
    set_pythonpath();
    return make_backend("py:noop_adapter:NoOpSupports");
  }();
  const Case c = bench_case(false);
  const Inputs in = generate_inputs(c);
  const Problem p = full_problem(c, in);
  WorkerCpu cpu(st);
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
