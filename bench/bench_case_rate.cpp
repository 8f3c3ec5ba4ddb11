// The case rate of a campaign's judging, in one process (docs/gpu.md, "Speed"): the case stream
// of `attnfuzz campaign --seed S --tier T` judged as a campaign worker judges it (every tensor
// fingerprinted, determinism on every 4th case, the oracle set chosen per case), with
// every oracle and backend call timed, the worker's reply encoded, and a digest of every verdict
// number. The digest is the check that a speed change judged nothing differently: the same
// seed, cases and backends must print the same digest before and after.
//   build/cpu/bench/bench_case_rate --tier toy --cases 2000 --seed 7 --backends torch.math
//                                   [--oracle-device auto|cpu|cuda] [--no-determinism-check]
//                                   [--aimed [--edge-share F]]   (the aimed mix, docs/fuzzing.md)
//                                   [--sample FILE]   (stacks for bench/symbolize_samples.py)
//                                   [--breaking-share P]   (the share of values that break kernels)
//                                   [--bias-share P]       (the share of cases with a score bias)
// Prints cases/s and judged cases/s (a case some backend ran), and with --aimed, per backend,
// the share of the cases aimed inside its envelope that it ran.
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "bench/comma_list.h"
#include "bench/timed_backend.h"
#include "bench/wall_sampler.h"
#include "campaign/coverage.h"
#include "campaign/repro.h"
#include "campaign/worker_protocol.h"
#include "generators/envelope_cases.h"
#include "generators/random_case.h"
#include "harness/differential.h"
#include "backends/provenance.h"
#include "backends/registry.h"

namespace {

using namespace attnfuzz;
using bench::Clock;
using bench::cpu_ledger;
using bench::ledger;
using bench::ms_since;
using bench::RoleTimer;
using bench::thread_cpu_ms;
using bench::Timed;

// FNV-1a over the bytes of everything a verdict reports.
struct Digest {
  uint64_t h = 0xcbf29ce484222325ull;
  void bytes(const void* p, size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 0x100000001b3ull;
  }
  void add(double x) { bytes(&x, sizeof x); }
  void add(uint64_t x) { bytes(&x, sizeof x); }
  void add(const std::string& s) {
    add(static_cast<uint64_t>(s.size()));
    bytes(s.data(), s.size());
  }
  void add(const ErrorStats& e) {
    for (double x : {e.max_abs, e.rel_fro, e.mean_abs, e.rms, e.ref_max_abs, e.ref_rms}) add(x);
    add(static_cast<uint64_t>(e.nonfinite_mismatch));
    add(static_cast<uint64_t>(e.count));
  }
  void add(const DiffReport& r) {
    add(r.input_checksum);
    for (const BackendRun& run : r.runs) {
      for (const auto* s : {&run.backend, &run.version, &run.composition}) add(*s);
      add(std::string(to_string(run.composition_class)));
      for (const auto* s : {&run.contract, &run.skip_reason}) add(*s);
      add(static_cast<uint64_t>(run.skipped));
      add(static_cast<uint64_t>(run.backend_calls));
      for (const auto& n : run.notes) add(n);
      for (const TensorVerdict& t : run.tensors) {
        add(std::string(name_of(t.tensor)));
        add(t.err);
        add(t.baseline);
        for (double x : {t.bound_rms, t.bound_max, t.kappa, t.model_rms, t.tensor_ratio, t.worst.ratio, t.worst.limit, t.worst.n, t.worst.dof})
          add(x);
        add(std::string(t.worst.granularity_name()));
        add(t.worst.where);
        std::map<std::string, double> margin_by_name;  // the digest's order: by name
        for (const auto& [g, v] : t.margin) margin_by_name[std::string(to_string(g))] = v;
        for (const auto& [k, v] : margin_by_name) {
          add(k);
          add(v);
        }
        add(t.print.name());
        add(static_cast<uint64_t>(t.compared) * 2 + static_cast<uint64_t>(t.pass));
      }
    }
    for (const Finding& f : r.findings) {
      add(f.signature.to_string());
      add(f.detail);
      for (const auto& [k, v] : metrics_by_name(f)) {  // the digest's order: by name
        add(k);
        add(v);
      }
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  std::string tier = "toy", backends_arg, device = "auto", sample_path;
  uint64_t cases = 1000, seed = 7;
  bool determinism = true, aimed = false;
  double edge_share = kDefaultEdgeShare;
  std::optional<double> breaking_share, bias_share;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--tier" && has_value)
      tier = argv[++i];
    else if (a == "--cases" && has_value)
      cases = std::stoull(argv[++i]);
    else if (a == "--seed" && has_value)
      seed = std::stoull(argv[++i]);
    else if (a == "--backends" && has_value)
      backends_arg = argv[++i];
    else if (a == "--oracle-device" && has_value)
      device = argv[++i];
    else if (a == "--no-determinism-check")
      determinism = false;
    else if (a == "--aimed")
      aimed = true;
    else if (a == "--edge-share" && has_value)
      edge_share = std::stod(argv[++i]);
    else if (a == "--sample" && has_value)  // the main thread's stacks (bench/wall_sampler.h)
      sample_path = argv[++i];
    else if (a == "--breaking-share" && has_value)  // 0: the stream as it was before those values existed
      breaking_share = std::stod(argv[++i]);
    else if (a == "--bias-share" && has_value)  // 0: the stream as it was before the bias existed
      bias_share = std::stod(argv[++i]);
    else {
      std::fprintf(stderr,
                   "usage: bench_case_rate [--tier toy|small|real] [--cases N] [--seed S] --backends a,b [--oracle-device auto|cpu|cuda] "
                   "[--no-determinism-check] [--aimed [--edge-share F]] [--sample FILE] [--breaking-share P] [--bias-share P]\n");
      return 2;
    }
  }
  const auto t = domain::tier_from_name(tier);
  if (!t || backends_arg.empty()) {
    std::fprintf(stderr, "bench_case_rate: --backends and a known --tier are needed\n");
    return 2;
  }
  set_oracle_device_override(device);
  set_backend_threads(1);  // as a campaign worker runs
  CaseMix mix;
  mix.gen = RandomCaseOptions::for_tier(*t);
  if (breaking_share) mix.gen.p_breaking_values = *breaking_share;
  if (bias_share) mix.gen.p_bias = *bias_share;
  mix.edge_share = edge_share;
  const std::vector<std::string> names = bench::split_commas(backends_arg);
  std::vector<std::unique_ptr<Backend>> owned;
  std::vector<Backend*> backends;
  try {
    for (const auto& n : names) {
      owned.push_back(std::make_unique<Timed>(std::shared_ptr<Backend>(make_backend(n)), "backends"));
      backends.push_back(owned.back().get());
    }
  } catch (const std::exception& e) {
    std::printf("SKIPPED: %s\n", e.what());
    return 0;
  }
  if (aimed)
    for (const Backend* b : backends) mix.targets.push_back({b->name(), b->envelope(), b->on_gpu()});
  Coverage coverage;
  Digest digest;
  size_t findings = 0, gpu_set = 0;
  bench::WallSampler sampler;
  if (!sample_path.empty()) sampler.start(1000);
  const auto start = Clock::now();
  const double cpu_start = thread_cpu_ms();
  for (uint64_t k = 0; k < cases; ++k) {
    std::optional<RoleTimer> generating(std::in_place, "generate");
    const AimedCase drawn = aimed_campaign_case(seed, k, mix);
    const Case& c = drawn.c;
    generating.reset();
    std::optional<RoleTimer> judging(std::in_place, "judge");
    Device chosen = Device::cpu;
    const OracleSet base = oracles_for(backends, c, &chosen);
    gpu_set += chosen == Device::cuda;
    Timed reference(std::shared_ptr<Backend>(base.reference, [](Backend*) {}), "reference");
    OracleSet timed;
    timed.reference = &reference;
    timed.emulate = [&base](Contract kc, bool reversed) -> std::unique_ptr<Backend> {
      return std::make_unique<Timed>(std::shared_ptr<Backend>(base.emulate(kc, reversed)), "baselines");
    };
    if (base.error_terms)
      timed.error_terms = [&base](const Problem& p, const Forward& f, const Tensor& d_out, const Tensor& d_lse) {
        RoleTimer t("error terms");
        return base.error_terms(p, f, d_out, d_lse);
      };
    if (base.verdict_reducer)
      timed.verdict_reducer = [&base] { return std::make_unique<bench::TimedReducer>(base.verdict_reducer()); };
    if (base.output_model)
      timed.output_model = [&base](TensorId t, const TermTensors& terms, const Tensor& ref, const RoundingUnits& u) {
        RoleTimer r("error model");
        return base.output_model(t, terms, ref, u);
      };
    DiffOptions opt;  // as serve_worker sets it (campaign/worker_protocol.cpp)
    opt.check_determinism = determinism && k % 4 == 0;
    opt.gpu_health = gpu_health;
    const DiffReport r = run_differential(c, backends, timed, opt);
    judging.reset();
    {
      RoleTimer t("reply");
      WorkerReply reply;
      for (const auto& f : r.findings) reply.findings.push_back(reproducer_of(c, names, f, r, environment()));
      reply.runs = run_outcomes(r);
      const std::string body = encode(reply);
    }
    Coverage case_coverage;
    case_coverage.add_case(run_outcomes(r));
    case_coverage.add_aim(drawn);
    coverage.add(case_coverage);
    digest.add(r);
    findings += r.findings.size();
    // A campaign replaces a worker whose CUDA context a backend broke (DiffReport::gpu_error);
    // this one process cannot, and every later case would only count the broken context.
    if (r.gpu_error) {
      cases = k + 1;
      std::printf("stopped after case %llu: a GPU error left this process's CUDA context unusable (a campaign restarts its "
                  "worker here); the rates below are over the cases before it\n",
                  static_cast<unsigned long long>(k));
      break;
    }
  }
  const double total = ms_since(start), cpu = thread_cpu_ms() - cpu_start;
  if (!sample_path.empty()) {
    sampler.stop();
    sampler.write(sample_path);
  }
  const double n = static_cast<double>(cases);
  std::printf("%llu %s cases (seed %llu, %s; GPU oracle set on %zu): %.1f cases/s, %.3f ms a case (CPU %.3f); %zu finding(s); digest %016llx\n",
              static_cast<unsigned long long>(cases), tier.c_str(), static_cast<unsigned long long>(seed), backends_arg.c_str(), gpu_set,
              1000.0 * n / total, total / n, cpu / n, findings, static_cast<unsigned long long>(digest.h));
  std::printf("judged %llu of %llu cases: %.1f judged cases/s\n", static_cast<unsigned long long>(coverage.judged_cases()),
              static_cast<unsigned long long>(cases), 1000.0 * static_cast<double>(coverage.judged_cases()) / total);
  for (const auto& [b, a] : coverage.aims())
    std::printf("aimed %s: %llu inside, %llu ran (%.0f%%); %llu just outside, %llu ran\n", b.c_str(),
                static_cast<unsigned long long>(a.inside), static_cast<unsigned long long>(a.inside_ran),
                a.inside ? 100.0 * static_cast<double>(a.inside_ran) / static_cast<double>(a.inside) : 0.0,
                static_cast<unsigned long long>(a.edge), static_cast<unsigned long long>(a.edge_ran));
  // The judging's own work: its time less the oracle and backend calls inside it.
  for (auto* l : {&ledger(), &cpu_ledger()}) {
    auto& m = *l;
    const double own =
        m["judge"] - m["reference"] - m["error terms"] - m["baselines"] - m["backends"] - m["error model"] - m["verdict sums"];
    std::printf(
        "per case, %s ms: generate %.3f, reference %.3f, error terms %.3f, baselines %.3f, backends %.3f, error model on the device "
        "%.3f, verdict sums on the device %.3f, other judging %.3f, reply %.3f\n",
        l == &ledger() ? "wall" : "CPU", m["generate"] / n, m["reference"] / n, m["error terms"] / n, m["baselines"] / n, m["backends"] / n,
        m["error model"] / n, m["verdict sums"] / n, own / n, m["reply"] / n);
  }
  return 0;
}
