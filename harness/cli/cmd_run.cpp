// `attnfuzz run CASE.json`: one case through the chosen backends, each through the
// single call and the case's composition, every tensor against the float64 reference.
// `attnfuzz list`: the backends of this build and whether they can run here.
#include <fmt/core.h>

#include <array>
#include <memory>

#include "harness/case_json.h"
#include "harness/cli/commands.h"
#include "harness/compose.h"
#include "harness/errors.h"
#include "harness/metrics.h"
#include "oracles/reference.h"
#include "oracles/registry.h"

namespace attnfuzz::cli {
namespace {

struct RunOptions {
  std::string case_path;
  std::vector<std::string> backends{"reference", "torch.f64", "torch.math"};
  uint64_t memory_budget_mib = 8192;
};

void print_row(const std::string& backend, const std::string& comp, const char* tensor, const ErrorStats& e) {
  fmt::print("{:<14} {:<32} {:<4} {:>11.3e} {:>11.3e} {:>11.3e} {:>8}\n", backend, comp, tensor, e.max_abs, e.rel_fro,
             e.mean_abs, e.nonfinite_mismatch);
}

int run(const RunOptions& opt) {
  Case c;
  try {
    c = load_case_file(opt.case_path, Limits{opt.memory_budget_mib << 20});
  } catch (const CaseError& e) {
    fmt::print(stderr, "attnfuzz: {}: {}\n", opt.case_path, e.what());
    return kExitBadInput;
  }
  std::vector<std::unique_ptr<Backend>> backends;
  for (const auto& name : opt.backends) {
    try {
      backends.push_back(make_backend(name));
    } catch (const std::invalid_argument& e) {
      fmt::print(stderr, "attnfuzz: --backends: {}\n", e.what());
      return kExitBadInput;
    } catch (const std::runtime_error& e) {
      fmt::print(stderr, "attnfuzz: skipping {}\n", e.what());
    }
  }
  const Inputs in = generate_inputs(c);
  ReferenceBackend ref_backend;
  const ComposedResult ref = run_composition(ref_backend, c, in, Composition{});

  fmt::print("case      {}\n", opt.case_path);
  fmt::print("shape     {}  dtype={}  scale={:.6g}{}\n", describe_shape(c.shape), to_string(c.dtype), c.effective_scale(),
             c.softcap ? fmt::format("  softcap={:g}", *c.softcap) : std::string());
  fmt::print("mask      {}\n", describe(c.mask));
  fmt::print("dLSE      {}\n", to_string(c.d_lse.kind));
  fmt::print("inputs    checksum {:016x}\n", checksum(in));
  fmt::print("errors against the float64 reference (single call, Eigen)\n\n");
  fmt::print("{:<14} {:<32} {:<4} {:>11} {:>11} {:>11} {:>8}\n", "backend", "composition", "out", "max_abs", "rel_fro",
             "mean_abs", "nonfin");

  std::vector<Composition> comps{Composition{}};
  if (!(c.composition == Composition{})) comps.push_back(c.composition);
  for (auto& be : backends) {
    for (const auto& comp : comps) {
      const std::string comp_name = describe(comp);
      try {
        const ComposedResult r = run_composition(*be, c, in, comp);
        const std::array<std::pair<const char*, std::pair<const Tensor*, const Tensor*>>, 5> rows{{
            {"O", {&r.fwd.o, &ref.fwd.o}},
            {"LSE", {&r.fwd.lse, &ref.fwd.lse}},
            {"dQ", {&r.grads.dq, &ref.grads.dq}},
            {"dK", {&r.grads.dk, &ref.grads.dk}},
            {"dV", {&r.grads.dv, &ref.grads.dv}},
        }};
        for (const auto& [tensor, pair] : rows) print_row(be->name(), comp_name, tensor, compare(*pair.first, *pair.second));
        for (const auto& note : r.notes) fmt::print("  note: {}\n", note);
      } catch (const std::runtime_error& e) {
        fmt::print("{:<14} {:<32} skipped: {}\n", be->name(), comp_name, e.what());
      }
    }
  }
  return kExitOk;
}

}  // namespace

void add_run_command(CLI::App& app, int& exit_code) {
  auto opt = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand("run", "Run one case through backends and print each tensor's error against float64");
  cmd->add_option("case", opt->case_path, "case or reproducer JSON file")->required();
  cmd->add_option("--backends", opt->backends, "comma-separated backend names (see `attnfuzz list`)")->delimiter(',');
  cmd->add_option("--memory-budget-mib", opt->memory_budget_mib, "refuse cases that need more host memory than this");
  cmd->callback([opt, &exit_code] { exit_code = run(*opt); });
}

void add_list_command(CLI::App& app, int& exit_code) {
  CLI::App* cmd = app.add_subcommand("list", "List the backends of this build and whether they can run here");
  cmd->callback([&exit_code] {
    for (const auto& b : list_backends())
      fmt::print("{:<18} {:<13} {}\n", b.name, b.available ? "available" : "unavailable",
                 b.available ? b.description : b.description + " -- " + b.unavailable_reason);
    exit_code = kExitOk;
  });
}

}  // namespace attnfuzz::cli
