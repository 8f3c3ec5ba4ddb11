// Where the time of one `attnfuzz run` goes (docs/gpu.md, "Speed"): the case through
// run_differential in this process, as `run` judges it, with every oracle and backend call
// timed through a wrapper. The rest of the session's wall time is host work: the inputs (timed
// alone beside the session), the Problems and masks of every call, the error model's sigma, the
// verdicts and fingerprints, the GPU health checks.
//   build/gpu/bench/bench_gpu_run CASE.json --backends torch.flash,cudnn [--oracle-device cpu|cuda]
//                                 [--reps N] [--no-determinism-check] [--null-calls] [--sample FILE]
// --null-calls: every oracle and backend call answers zeros of the right shapes at once (the
// backends keep their declarations: contract, LSE, dLSE), so what is timed is the host work
// around the calls alone, on any machine (the verdicts then judge zeros: the figure is a cost,
// not a result).
// --sample FILE: the main thread's stack every millisecond of the warm reps (bench/wall_sampler.h),
// for bench/symbolize_samples.py.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "bench/comma_list.h"
#include "bench/timed_backend.h"
#include "bench/wall_sampler.h"
#include "harness/case_json.h"
#include "harness/differential.h"
#include "harness/inputs.h"
#include "backends/registry.h"

namespace {

using namespace attnfuzz;
using bench::Clock;
using bench::ledger;
using bench::ms_since;
using bench::Timed;

// The answer of --null-calls: zeros shaped as the problem's outputs.
class NullCalls final : public Backend {
 public:
  explicit NullCalls(std::shared_ptr<Backend> declared) : declared_(std::move(declared)) {}
  std::string name() const override { return declared_->name(); }
  Device device() const override { return declared_->device(); }
  std::optional<Contract> contract(DType d) const override { return declared_->contract(d); }
  bool masked_rows_zero() const override { return declared_->masked_rows_zero(); }
  bool returns_lse() const override { return declared_->returns_lse(); }
  bool backward_takes_dlse() const override { return declared_->backward_takes_dlse(); }
  std::vector<TensorId> nondeterministic_outputs() const override { return declared_->nondeterministic_outputs(); }
  Forward forward(const Problem& p) override {
    const Shape& s = p.shape;
    return Forward{Tensor({s.batch, s.heads_q, s.seq_q, s.head_dim_v}), Tensor({s.batch, s.heads_q, s.seq_q})};
  }
  Gradients backward(const Problem& p, const Forward&, const Tensor&, const Tensor&) override {
    const Shape& s = p.shape;
    return Gradients{Tensor({s.batch, s.heads_q, s.seq_q, s.head_dim_qk}), Tensor({s.batch, s.heads_kv, s.seq_kv, s.head_dim_qk}),
                     Tensor({s.batch, s.heads_kv, s.seq_kv, s.head_dim_v})};
  }

 private:
  std::shared_ptr<Backend> declared_;
};

ErrorTerms null_error_terms(const Problem& p, const Forward& f) {
  const Shape& s = p.shape;
  ErrorTerms e;
  const std::array<std::vector<int64_t>, 5> shapes{f.o.shape, f.lse.shape, std::vector<int64_t>{s.batch, s.heads_q, s.seq_q, s.head_dim_qk},
                                                   std::vector<int64_t>{s.batch, s.heads_kv, s.seq_kv, s.head_dim_qk},
                                                   std::vector<int64_t>{s.batch, s.heads_kv, s.seq_kv, s.head_dim_v}};
  for (TensorId t : {TensorId::O, TensorId::LSE, TensorId::dQ, TensorId::dK, TensorId::dV}) {  // its cases ask no dBias
    TermTensors& tt = e[t];
    const auto& shape = shapes[output_index(t)];
    tt.operand = tt.stored = tt.score = Tensor(shape);
    tt.length = static_cast<double>(s.seq_kv);
    if (t == TensorId::dQ || t == TensorId::dK) tt.via_op = tt.via_st = tt.via_acc = tt.via_sc = Tensor(shape);
    if (shape.size() == 4) tt.operand_sources = tt.score_sources = Tensor({shape[0], shape[1], shape[2]}, 1.0);
  }
  return e;
}

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& x : v) out += (out.empty() ? "" : ",") + x;
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string case_path, device = "cuda", sample_path;
  std::vector<std::string> names;
  int reps = 5;
  uint64_t budget_mib = Limits{}.memory_budget_bytes >> 20;  // as `attnfuzz run`'s default
  bool determinism = true, null_calls = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--backends" && i + 1 < argc)
      names = bench::split_commas(argv[++i]);
    else if (a == "--oracle-device" && i + 1 < argc)
      device = argv[++i];
    else if (a == "--reps" && i + 1 < argc)
      reps = std::atoi(argv[++i]);
    else if (a == "--no-determinism-check")
      determinism = false;
    else if (a == "--null-calls")
      null_calls = true;
    else if (a == "--sample" && i + 1 < argc)
      sample_path = argv[++i];
    else if (a == "--memory-budget-mib" && i + 1 < argc)
      budget_mib = std::strtoull(argv[++i], nullptr, 10);
    else if (case_path.empty() && a[0] != '-')
      case_path = a;
    else {
      std::fprintf(stderr, "usage: %s CASE.json --backends A,B [--oracle-device cpu|cuda] [--reps N] [--no-determinism-check] [--null-calls] [--sample FILE] [--memory-budget-mib N]\n", argv[0]);
      return 2;
    }
  }
  if (case_path.empty() || names.empty() || !device_from_string(device)) {
    std::fprintf(stderr, "%s: a case, --backends and --oracle-device cpu|cuda are needed\n", argv[0]);
    return 2;
  }
  std::vector<std::unique_ptr<Backend>> owned;
  std::vector<Backend*> backends, untimed;
  try {
    for (const auto& n : names) {
      std::shared_ptr<Backend> be(make_backend(n));
      untimed.push_back(be.get());
      if (null_calls) be = std::make_shared<NullCalls>(be);
      owned.push_back(std::make_unique<Timed>(be, "backends"));
      backends.push_back(owned.back().get());
    }
  } catch (const std::exception& e) {
    std::printf("SKIPPED: %s\n", e.what());
    return 0;
  }
  // The host-memory budget as `attnfuzz run` checks it: with the oracle set this run uses (a
  // real-size case judged by the GPU set holds no Sq x Skv buffer on the host).
  const Case c = load_case_file(case_path, Limits{budget_mib << 20, host_work(untimed, *device_from_string(device))});
  OracleSet base;
  try {
    base = make_oracles(*device_from_string(device));
  } catch (const std::exception& e) {
    std::printf("SKIPPED: %s\n", e.what());
    return 0;
  }
  std::shared_ptr<Backend> ref_be(base.reference, [](Backend*) {});
  if (null_calls) ref_be = std::make_shared<NullCalls>(ref_be);
  Timed reference(ref_be, "reference");
  OracleSet timed;
  timed.reference = &reference;
  timed.emulate = [&base, null_calls](Contract k, bool reversed) -> std::unique_ptr<Backend> {
    std::shared_ptr<Backend> be(base.emulate(k, reversed));
    if (null_calls) be = std::make_shared<NullCalls>(be);
    return std::make_unique<Timed>(be, "baselines");
  };
  timed.error_terms = [&base, null_calls](const Problem& p, const Forward& f, const Tensor& d_out, const Tensor& d_lse) {
    bench::RoleTimer t("error terms");
    return null_calls ? null_error_terms(p, f) : base.error_terms(p, f, d_out, d_lse);
  };
  if (base.verdict_reducer)
    timed.verdict_reducer = [&base] { return std::make_unique<bench::TimedReducer>(base.verdict_reducer()); };
  if (base.output_model)
    timed.output_model = [&base](TensorId t, const TermTensors& terms, const Tensor& ref, const RoundingUnits& u) {
      bench::RoleTimer r("error model");
      return base.output_model(t, terms, ref, u);
    };
  DiffOptions opt;
  opt.check_determinism = determinism;
  opt.gpu_health = gpu_health;
  std::printf("case %s, backends %s, oracles %s, determinism check %s%s\n", case_path.c_str(), join(names).c_str(), device.c_str(),
              determinism ? "on" : "off", null_calls ? ", null calls (host work alone)" : "");
  bench::WallSampler sampler;
  for (int r = 0; r < reps + 1; ++r) {
    if (r == 1 && !sample_path.empty()) sampler.start(1000);
    ledger().clear();
    auto t0 = Clock::now();
    const Inputs in = generate_inputs(c);
    const double inputs_ms = ms_since(t0);  // what the session repeats before its first call
    if (in.q.numel() == 0) return 1;
    t0 = Clock::now();
    const std::clock_t cpu0 = std::clock();
    const DiffReport rep = run_differential(c, backends, timed, opt);
    const double total = ms_since(t0), cpu = 1e3 * static_cast<double>(std::clock() - cpu0) / CLOCKS_PER_SEC;
    double accounted = inputs_ms;
    for (const auto& [k, v] : ledger()) accounted += v;
    std::printf(
        "%s total %8.1f ms (process CPU %8.1f): inputs %6.1f, reference %6.1f, error terms %6.1f, baselines %6.1f, backends %6.1f, "
        "error model on the device %6.1f, verdict sums on the device %6.1f, other host work %6.1f; %zu finding(s)\n",
        r == 0 ? "first" : "warm ", total, cpu, inputs_ms, ledger()["reference"], ledger()["error terms"], ledger()["baselines"],
        ledger()["backends"], ledger()["error model"], ledger()["verdict sums"], total - accounted, rep.findings.size());
  }
  if (!sample_path.empty()) {
    sampler.stop();
    sampler.write(sample_path);
  }
  return 0;
}
