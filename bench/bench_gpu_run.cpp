// Where the time of one `attnfuzz run` goes (docs/gpu.md, "Speed"): the case through
// run_differential in this process, as `run` judges it, with every oracle and backend call
// timed through a wrapper. The rest of the session's wall time is host work: the inputs and the
// dense mask, the error model's sigma, the verdicts and fingerprints, the GPU health checks.
//   build/gpu/bench/bench_gpu_run CASE.json --backends torch.flash,cudnn [--oracle-device cpu|cuda]
//                                 [--reps N] [--no-determinism-check]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "bench/timed_backend.h"
#include "harness/case_json.h"
#include "harness/differential.h"
#include "harness/inputs.h"
#include "oracles/registry.h"

namespace {

using namespace attnfuzz;
using bench::Clock;
using bench::ledger;
using bench::ms_since;
using bench::Timed;

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, ',');)
    if (!x.empty()) out.push_back(x);
  return out;
}

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& x : v) out += (out.empty() ? "" : ",") + x;
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string case_path, device = "cuda";
  std::vector<std::string> names;
  int reps = 5;
  bool determinism = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--backends" && i + 1 < argc)
      names = split(argv[++i]);
    else if (a == "--oracle-device" && i + 1 < argc)
      device = argv[++i];
    else if (a == "--reps" && i + 1 < argc)
      reps = std::atoi(argv[++i]);
    else if (a == "--no-determinism-check")
      determinism = false;
    else if (case_path.empty() && a[0] != '-')
      case_path = a;
    else {
      std::fprintf(stderr, "usage: %s CASE.json --backends A,B [--oracle-device cpu|cuda] [--reps N] [--no-determinism-check]\n", argv[0]);
      return 2;
    }
  }
  if (case_path.empty() || names.empty() || !oracle_device_from_string(device)) {
    std::fprintf(stderr, "%s: a case, --backends and --oracle-device cpu|cuda are needed\n", argv[0]);
    return 2;
  }
  const Case c = load_case_file(case_path);
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
  OracleSet base;
  try {
    base = make_oracles(*oracle_device_from_string(device));
  } catch (const std::exception& e) {
    std::printf("SKIPPED: %s\n", e.what());
    return 0;
  }
  Timed reference(std::shared_ptr<Backend>(base.reference, [](Backend*) {}), "reference");
  OracleSet timed;
  timed.reference = &reference;
  timed.emulate = [&base](Contract k, bool reversed) -> std::unique_ptr<Backend> {
    return std::make_unique<Timed>(std::shared_ptr<Backend>(base.emulate(k, reversed)), "baselines");
  };
  timed.error_terms = [&base](const Problem& p, const Forward& f, const Tensor& d_out, const Tensor& d_lse) {
    const auto t0 = Clock::now();
    ErrorTerms e = base.error_terms(p, f, d_out, d_lse);
    ledger()["error terms"] += ms_since(t0);
    return e;
  };
  DiffOptions opt;
  opt.check_determinism = determinism;
  opt.gpu_health = gpu_health;
  std::printf("case %s, backends %s, oracles %s, determinism check %s\n", case_path.c_str(), join(names).c_str(), device.c_str(),
              determinism ? "on" : "off");
  for (int r = 0; r < reps + 1; ++r) {
    ledger().clear();
    auto t0 = Clock::now();
    const Inputs in = generate_inputs(c);
    const Problem p = full_problem(c, in);
    const double inputs_ms = ms_since(t0);  // what the session repeats before its first call
    if (p.q.numel() == 0) return 1;
    t0 = Clock::now();
    const DiffReport rep = run_differential(c, backends, timed, opt);
    const double total = ms_since(t0);
    double accounted = inputs_ms;
    for (const auto& [k, v] : ledger()) accounted += v;
    std::printf(
        "%s total %8.1f ms: inputs+mask %6.1f, reference %6.1f, error terms %6.1f, baselines %6.1f, backends %6.1f, "
        "other host work %6.1f; %zu finding(s)\n",
        r == 0 ? "first" : "warm ", total, inputs_ms, ledger()["reference"], ledger()["error terms"], ledger()["baselines"],
        ledger()["backends"], total - accounted, rep.findings.size());
  }
  return 0;
}
