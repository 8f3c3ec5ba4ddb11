// bench_calibrate_rule: the false-alarm side of the verdict (docs/verdicts.md). Runs random
// cases through correct backends in process and reports, per granularity of the rule
// (element, row, tile, head, tensor), the largest ratio / limit seen (the margin a correct
// backend leaves: below 1 passes), and every finding (a false alarm, or a real deviation
// to triage).
//
//   build/cpu/bench/bench_calibrate_rule --cases 2000 --seed 1 --max-seq 64 --max-dim 128
//       --backends torch.math,torch.sdpa.math,torch.sdpa.cpu_flash,plugin:build/cpu/mutants/libattnfuzz_mutant_ok.so
//   --breaking-share P: the share of cases carrying values that break kernels (default 0)
#include <cstdio>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "generators/random_case.h"
#include "harness/case_json.h"
#include "harness/differential.h"
#include "backends/registry.h"

int main(int argc, char** argv) {
  using namespace attnfuzz;
  uint64_t cases = 500, seed = 1;
  RandomCaseOptions rc;
  std::string backends_arg;
  bool verbose = false;
  for (int i = 1; i < argc; ++i) {
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(std::string(argv[i]) + " needs a value");
      return argv[++i];
    };
    const std::string a = argv[i];
    if (a == "--cases")
      cases = std::stoull(next());
    else if (a == "--seed")
      seed = std::stoull(next());
    else if (a == "--max-seq")
      rc.max_seq = std::stoll(next());
    else if (a == "--max-dim")
      rc.max_dim = std::stoll(next());
    else if (a == "--backends")
      backends_arg = next();
    else if (a == "--dtype")
      rc.dtypes = {dtype_from_string(next())};
    else if (a == "--breaking-share")  // the share of cases with values that break kernels (docs/fuzzing.md)
      rc.p_breaking_values = std::stod(next());
    else if (a == "--bias-share")  // the share of cases with a score bias (docs/fuzzing.md)
      rc.p_bias = std::stod(next());
    else if (a == "--verbose")
      verbose = true;
    else {
      std::fprintf(
          stderr,
          "usage: bench_calibrate_rule [--cases N] [--seed S] [--max-seq N] [--max-dim N] [--dtype D] [--breaking-share P] [--bias-share P] --backends a,b [--verbose]\n");
      return 2;
    }
  }
  std::vector<std::unique_ptr<Backend>> owned;
  std::vector<Backend*> backends;
  std::stringstream ss(backends_arg);
  for (std::string name; std::getline(ss, name, ',');) {
    owned.push_back(make_backend(name));
    backends.push_back(owned.back().get());
  }
  const OracleSet oracles = default_oracles();
  DiffOptions opt;
  opt.check_determinism = false;
  std::map<std::string, double> margin;                         // granularity -> max ratio/limit
  std::map<std::string, std::pair<double, std::string>> worst;  // granularity -> (margin, where)
  uint64_t with_findings = 0, runs = 0;
  for (uint64_t n = 0; n < cases; ++n) {
    const Case c = random_case(seed * 1000003 + n, rc);
    const DiffReport r = run_differential(c, backends, oracles, opt);
    for (const auto& run : r.runs) {
      if (run.skipped) continue;
      ++runs;
      for (const auto& t : run.tensors)
        for (const auto& [granularity, m] : t.margin)
          if (const std::string g(to_string(granularity)); m > margin[g]) {
            margin[g] = m;
            worst[g] = {m, run.backend + " " + std::string(to_string(run.composition_class)) + " " + name_of(t.tensor) + " " + std::string(to_string(c.dtype)) + " case " +
                               std::to_string(seed * 1000003 + n)};
          }
    }
    if (!r.findings.empty()) {
      ++with_findings;
      for (const auto& f : r.findings)
        std::printf("finding (case seed %llu): %s  %s\n", static_cast<unsigned long long>(seed * 1000003 + n),
                    f.signature.to_string().c_str(), f.detail.c_str());
      if (verbose) std::printf("%s\n", write_case(c).c_str());
    }
  }
  std::printf("\n%llu cases, %llu backend runs, %llu cases with findings\n", static_cast<unsigned long long>(cases),
              static_cast<unsigned long long>(runs), static_cast<unsigned long long>(with_findings));
  std::printf("largest ratio / limit per granularity (below 1 passes):\n");
  for (const auto& [g, m] : margin) std::printf("  %-8s %.3f   (%s)\n", g.c_str(), m, worst[g].second.c_str());
  return with_findings ? 1 : 0;
}
