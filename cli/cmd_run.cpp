// `attnfuzz run CASE.json`: one case through the chosen backends, each through the
// single call and the case's composition, judged against the float64 reference.
// `attnfuzz list`: the backends of this build and whether they can run here.
#include <fmt/core.h>
#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <new>
#include <optional>
#include <set>

#include "campaign/campaign.h"
#include "campaign/coverage.h"
#include "campaign/output_file.h"
#include "campaign/repro.h"
#include "campaign/worker_protocol.h"
#include "cli/arg_checks.h"
#include "cli/campaign_args.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "harness/case_json.h"
#include "harness/differential.h"
#include "harness/errors.h"
#include "backends/provenance.h"
#include "backends/registry.h"

namespace attnfuzz::cli {
namespace {

// Backends run inside this process: one that calls exit() (exit(0) included) would end `run`
// with its own status, as if nothing had been found. While backends run, an exit handler turns
// that into a crash finding of the backend that was running (exit status 1). _exit() and
// signals cannot be caught in-process; campaigns run every backend in a worker for that.
std::atomic<bool> backends_running{false};
std::string running_backend = "?";  // written only by the thread that runs the backends
void exit_inside_backend() {
  if (!backends_running.exchange(false)) return;
  std::fflush(stdout);
  std::fprintf(stdout, "\n1 finding(s)\n  %s/-/-/crash/-/-  the backend called exit() while it ran\n", running_backend.c_str());
  std::fflush(stdout);
  std::fprintf(stderr, "attnfuzz: backend %s ended the process (exit) while it ran: a crash finding\n", running_backend.c_str());
  std::_Exit(kExitDivergence);
}

// --record's directory, made and checked before any work: a run must not end with an
// unrecordable finding. Returns an error line, or nothing.
std::optional<std::string> prepare_record_dir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return "--record " + dir + ": cannot create the directory: " + ec.message();
  if (!std::filesystem::is_directory(dir)) return "--record " + dir + ": not a directory";
  if (::access(dir.c_str(), W_OK | X_OK) != 0) return "--record " + dir + ": not writable: " + std::strerror(errno);
  return std::nullopt;
}

struct RunOptions {
  std::string case_path;
  std::vector<std::string> backends;
  uint64_t memory_budget_mib = 8192;
  bool no_determinism = false;
  std::string record_dir;
  bool isolate = false;
  bool batch_invariance_all = false;
  double timeout = 300;  // --isolate's watchdog
};

// Writes one reproducer per distinct signature into --record's directory; an error line per
// file that could not be written (the others are still written). Returns whether all were.
bool record(const std::string& dir, const std::vector<Reproducer>& found) {
  std::set<std::string> seen;
  std::vector<OutputFile> files;
  for (const auto& r : found) {
    if (!seen.insert(r.finding.signature.to_string()).second) continue;
    files.push_back({dir + "/" + repro_file_name(r.finding.signature), write_repro(r)});
  }
  // Every reproducer is attempted: one that cannot be written (the disk filled up since the
  // check, a name that is refused) is reported and the others are still written.
  const OutputResult written = write_files_atomic(files);
  for (const auto& path : written.written) fmt::print("recorded  {}\n", path);
  std::fflush(stdout);
  for (const auto& why : written.errors) fmt::print(stderr, "attnfuzz: --record: {}\n", why);
  return written.errors.empty();
}

// --isolate: the case in a worker process with the watchdog, as a campaign runs it. A backend
// that crashes, exits or hangs is a crash or timeout finding, not the end of `run`. The worker
// reports findings and what ran, not the per-tensor table.
int run_isolated(const RunOptions& opt, const Case& c, const std::vector<std::string>& names) {
  CampaignOptions o;
  o.backends = names;
  o.worker_argv = worker_argv(names);
  o.worker_argv.insert(o.worker_argv.end(), {"--memory-budget-mib", std::to_string(opt.memory_budget_mib)});  // the run's budget
  o.timeout_seconds = opt.timeout;
  WorkerProcess w(o.worker_argv, {});
  std::vector<BackendProfile> profiles;
  try {
    profiles = probe_backends(w, o);
  } catch (const BackendLoadError& e) {
    fmt::print(stderr, "attnfuzz: --backends: {}\n", message_safe(e.what(), 600));
    return kExitBadInput;
  }
  for (const auto& b : profiles) o.backend_devices.push_back(b.device);
  try {
    check_memory_budget(c, Limits{opt.memory_budget_mib << 20, host_work_of(profiles, c.shape)});
  } catch (const CaseError& e) {
    fmt::print(stderr, "attnfuzz: {}: {}\n", printable(opt.case_path), message_safe(e.what(), 600));
    return kExitBadInput;
  }
  fmt::print("case      {}\n", opt.case_path);
  fmt::print("isolated  in a worker process, watchdog {:.1f} s (with the case's work)\n", case_watchdog_seconds(c, !opt.no_determinism, o));
  std::fflush(stdout);
  Coverage coverage;
  bool out_of_memory = false;
  const std::vector<Reproducer> found = run_case(w, c, -1, !opt.no_determinism, o, &coverage, nullptr, &out_of_memory);
  if (out_of_memory) {  // never a finding (harness/differential.h): an internal error, as without --isolate
    fmt::print(
        stderr,
        "attnfuzz: internal error: the worker ran out of memory while running {} (its memory estimate was too low); nothing was judged\n",
        printable(opt.case_path));
    return kExitInternal;
  }
  for (const auto& [backend, comps] : coverage.compositions())
    for (const auto& [comp, counts] : comps) {
      std::string why;
      for (const auto& [reason, n] : counts.reasons) why += (why.empty() ? "" : "; ") + reason;
      fmt::print("{:<9} {:<24} {:<8} {}\n", counts.ran ? "ran" : counts.skipped ? "skipped" : "errored", backend, comp,
                 printable(message_safe(why, 300)));
    }
  fmt::print("\n{} finding(s)\n", found.size());
  for (const auto& r : found) fmt::print("  {}  {}\n", r.finding.signature.to_string(), printable(message_safe(r.finding.detail, 600)));
  std::fflush(stdout);
  if (!opt.record_dir.empty() && !found.empty() && !record(opt.record_dir, found)) return kExitBadInput;
  const bool died = std::any_of(found.begin(), found.end(), [](const Reproducer& r) {
    return r.finding.signature.cls == FindingClass::crash || r.finding.signature.cls == FindingClass::timeout;
  });
  if (coverage.judged_cases() == 0 && !died) {
    fmt::print(stderr, "attnfuzz: nothing was tested: every backend was skipped or failed\n");
    return kExitUntested;
  }
  return found.empty() ? kExitOk : kExitDivergence;
}

void print_report(const Case& c, const DiffReport& r, Device reference, const std::vector<Backend*>& backends) {
  fmt::print("shape     {}  dtype={}  scale={:.6g}{}\n", describe_shape(c.shape), to_string(c.dtype), c.effective_scale(),
             c.softcap ? fmt::format("  softcap={:g}", *c.softcap) : std::string());
  fmt::print("mask      {}\n", describe(c.mask));
  fmt::print("layouts   {}\n", describe(c.layouts));
  fmt::print("dLSE      {}    composition {}\n", to_string(c.d_lse.kind), describe(c.composition));
  fmt::print("inputs    checksum {:016x}\n", r.input_checksum);
  fmt::print("rule      {}\n", r.rule.describe());
  // Outputs a backend declares nondeterministic (AF_NONDETERMINISTIC_*, nondeterministic_outputs).
  for (const Backend* b : backends)
    if (const std::vector<TensorId> may_differ = b->nondeterministic_outputs(); !may_differ.empty()) {
      std::vector<std::string> names;
      for (TensorId t : may_differ) names.emplace_back(to_string(t));
      fmt::print("declared  {}: {} may differ run to run ({}): judged against the reference, not checked bitwise\n", b->name(),
                 fmt::join(names, ", "), b->why_nondeterministic());
    }
  for (const Backend* b : backends)
    if (b->batch_invariant())
      fmt::print("declared  {}: batch invariant: its problems run again inside a batch of {} must give the same bits\n", b->name(),
                 batch_invariance_batch(c.shape, b->device()));
  fmt::print("errors against the float64 reference ({}, single call); baseline: naive computation under the backend's contract ({})\n\n",
             reference == Device::cuda ? "cuda.reference64" : "Eigen", reference == Device::cuda ? "cuda.emulated.*" : "CPU");
  // "looks": the fingerprint, and in brackets the ladder's spread on that tensor (its coarsest
  // rung's error over its finest's): below 8 the precisions cannot be told apart there.
  fmt::print("{:<22} {:<32} {:<8} {:<4} {:>10} {:>10} {:>10} {:>10} {:>10}  {:<15} {:<7} {}\n", "backend", "composition", "contract", "out",
             "rms", "bound", "max_abs", "bound", "rel_fro", "looks (spread)", "verdict", "worst block: error/sigma' (limit)");
  for (const auto& run : r.runs) {
    if (run.skipped) {
      fmt::print("{:<22} {:<32} skipped: {}\n", run.backend, run.composition, run.skip_reason);
      continue;
    }
    for (const auto& t : run.tensors) {
      if (!t.compared) {
        fmt::print("{:<22} {:<32} {:<8} {:<4} (not returned)\n", run.backend, run.composition, run.contract, name_of(t.tensor));
        continue;
      }
      fmt::print("{:<22} {:<32} {:<8} {:<4} {:>10.3e} {:>10.3e} {:>10.3e} {:>10.3e} {:>10.3e}  {:<15} {:<7} {} {}: {:.2f} ({:.2f})\n",
                 run.backend, run.composition, run.contract, name_of(t.tensor), t.err.rms, t.bound_rms, t.err.max_abs, t.bound_max, t.err.rel_fro,
                 fmt::format("{} ({:.3g})", t.print.name(), t.print.spread), t.pass ? "ok" : "FAIL", t.worst.granularity_name(), t.worst.where,
                 t.worst.ratio, t.worst.limit);
    }
    for (const auto& n : run.notes) fmt::print("  note ({}): {}\n", run.backend, n);
  }
  fmt::print("\n{} finding(s)\n", r.findings.size());
  for (const auto& f : r.findings) fmt::print("  {}  {}\n", f.signature.to_string(), f.detail);
}

int run(const RunOptions& opt) {
  Case c;
  try {
    // Its memory is checked once the backends and the oracle set say where the work runs.
    c = load_case_file(opt.case_path, kNoMemoryBudget);
  } catch (const CaseError& e) {
    fmt::print(stderr, "attnfuzz: {}: {}\n", printable(opt.case_path), message_safe(e.what(), 600));
    return kExitBadInput;
  }
  const std::vector<std::string> names = opt.backends.empty() ? default_backend_names() : opt.backends;
  try {
    refuse_repeated_backends(opt.backends);
  } catch (const std::invalid_argument& e) {
    fmt::print(stderr, "attnfuzz: {}\n", message_safe(e.what(), 600));
    return kExitBadInput;
  }
  if (opt.batch_invariance_all && (opt.isolate || opt.no_determinism)) {
    fmt::print(stderr, "attnfuzz: --batch-invariance-all runs in this process with the repeat checks: drop --isolate and --no-determinism-check\n");
    return kExitBadInput;
  }
  if (opt.isolate) {
    if (!opt.record_dir.empty())
      if (const auto why = prepare_record_dir(opt.record_dir)) {
        fmt::print(stderr, "attnfuzz: {}\n", *why);
        return kExitBadInput;
      }
    return run_isolated(opt, c, names);
  }
  BackendSet loaded;
  try {
    loaded = make_backends(names, WhenUnavailable::skip);
  } catch (const std::invalid_argument& e) {
    fmt::print(stderr, "attnfuzz: {}\n", message_safe(e.what(), 600));
    return kExitBadInput;
  } catch (const BackendLoadError& e) {
    fmt::print(stderr, "attnfuzz: --backends: {}\n", message_safe(e.what(), 600));
    return kExitBadInput;
  }
  for (const auto& why : loaded.skipped) fmt::print(stderr, "attnfuzz: skipping {}\n", why);
  const std::vector<Backend*> backends = loaded.pointers();
  OracleSet oracles;
  Device oracle_device = Device::cpu;
  std::string why_device;
  try {
    oracles = oracles_for(backends, c, &oracle_device, &why_device);
  } catch (const std::runtime_error& e) {
    fmt::print(stderr, "attnfuzz: --oracle-device: {}\n", message_safe(e.what(), 600));
    return kExitBadInput;
  }
  try {
    check_memory_budget(c, Limits{opt.memory_budget_mib << 20, host_work(backends, oracle_device)});
  } catch (const CaseError& e) {
    fmt::print(stderr, "attnfuzz: {}: {}\n", printable(opt.case_path), message_safe(e.what(), 600));
    return kExitBadInput;
  }
  DiffOptions dopt;
  dopt.check_determinism = !opt.no_determinism;
  dopt.batch_invariance_undeclared = opt.batch_invariance_all;
  dopt.gpu_health = gpu_health;
  if (!opt.record_dir.empty())
    if (const auto why = prepare_record_dir(opt.record_dir)) {
      fmt::print(stderr, "attnfuzz: {}\n", *why);
      return kExitBadInput;
    }
  fmt::print("case      {}\n", opt.case_path);
  fmt::print("oracles   {} ({})\n", to_string(oracle_device), why_device);
  std::fflush(stdout);
  dopt.on_backend = [](const std::string& b) { running_backend = b; };
  static const bool handler_installed = std::atexit(exit_inside_backend) == 0 && std::at_quick_exit(exit_inside_backend) == 0;
  (void)handler_installed;
  backends_running = true;
  DiffReport report;
  try {
    report = run_differential(c, backends, oracles, dopt);
  } catch (const std::bad_alloc&) {  // never a finding (harness/differential.h): an internal error
    backends_running = false;
    std::fflush(stdout);
    fmt::print(stderr, "attnfuzz: internal error: out of memory while running {} (its memory estimate was too low); nothing was judged\n",
               printable(opt.case_path));
    return kExitInternal;
  }
  backends_running = false;
  print_report(c, report, oracle_device, backends);
  if (!opt.record_dir.empty() && !report.findings.empty()) {
    std::vector<Reproducer> found;
    for (const auto& f : report.findings) found.push_back(reproducer_of(c, names, f, report, environment(), backend_sources(backends)));
    if (!record(opt.record_dir, found)) return kExitBadInput;
  }
  // A run in which every backend was skipped (or failed) tested nothing: never a pass.
  const bool any_ran = std::any_of(report.runs.begin(), report.runs.end(), [](const BackendRun& r) { return !r.skipped; });
  if (!any_ran) {
    fmt::print(stderr, "attnfuzz: nothing was tested: every backend was skipped or failed (reasons above)\n");
    return kExitUntested;
  }
  return report.findings.empty() ? kExitOk : kExitDivergence;
}

}  // namespace

void add_run_command(CLI::App& app, int& exit_code) {
  auto opt = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand("run", "Run one case through backends and judge every tensor against float64");
  cmd->add_option("case", opt->case_path, "case or reproducer JSON file")->required();
  add_shared_option(cmd, Flag::backends, opt->backends, "to run (default: every CPU backend)");
  cmd->add_option("--memory-budget-mib", opt->memory_budget_mib, "refuse cases that need more host memory than this")
      ->check(strict_unsigned())
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 30));  // MiB: 1 PiB at most, so the bytes fit in 64 bits
  cmd->add_flag("--no-determinism-check", opt->no_determinism, "run each backend once instead of twice (and skip the batch-invariance check of the backends that declare it)");
  add_oracle_device_option(cmd, "--reference");  // --reference: the earlier name
  cmd->add_option("--record", opt->record_dir, "write one reproducer per finding (deduplicated by signature) into this directory")
      ->check(non_empty_path());
  cmd->add_flag("--batch-invariance-all", opt->batch_invariance_all,
                "also run the backends that do not declare batch invariance inside a larger batch, and say in a note which "
                "outputs moved (a measurement, not a finding; docs/verdicts.md, \"Batch invariance\")");
  cmd->add_flag("--isolate", opt->isolate,
                "run the case in a worker process with a watchdog, as campaigns do: a backend that crashes, exits or hangs is a finding "
                "(prints findings and what ran, not the per-tensor table)");
  add_shared_option(cmd, Flag::timeout, opt->timeout, "--isolate's watchdog, seconds (default 300)");
  cmd->callback([opt, &exit_code] { exit_code = run(*opt); });
}

void add_list_command(CLI::App& app, int& exit_code) {
  CLI::App* cmd = app.add_subcommand("list", "List the backends of this build, their contracts, and why any is unavailable");
  cmd->callback([&exit_code] {
    for (const auto& b : list_backends()) {
      if (b.available)
        fmt::print("{:<22} {:<5} {:<30} {:<42} {}\n    {}\n    accepts: {}\n", b.name, b.device, b.contracts, b.conventions, b.version,
                   b.description, b.envelope);
      else
        fmt::print("{:<22} unavailable: {}\n    {}\n", b.name, b.unavailable_reason, b.description);
    }
    exit_code = kExitOk;
  });
}

}  // namespace attnfuzz::cli
