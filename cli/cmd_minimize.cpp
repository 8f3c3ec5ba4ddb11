// `attnfuzz minimize FINDING.json`: shrinks a reproducer while its divergence signature
// holds, writes the minimized reproducer, and reports the steps and sizes.
#include <fmt/core.h>
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <optional>

#include "campaign/campaign.h"
#include "campaign/dir_lock.h"
#include "campaign/minimize.h"
#include "campaign/output_file.h"
#include "campaign/run_dir.h"
#include "cli/arg_checks.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "generators/shrink.h"
#include "harness/errors.h"
#include "harness/plugin_path.h"
#include "harness/worker.h"
#include "backends/registry.h"

namespace attnfuzz::cli {
namespace {

struct MinimizeOptions {
  std::string path, out;
  std::vector<std::string> backends;
  bool any_plugin_build = false;
  double timeout = 0;  // --timeout: the watchdog of each candidate, in an isolated worker (0: the defaults)
};

int minimize_command(const MinimizeOptions& opt) {
  Reproducer r;
  try {
    r = load_repro(opt.path);
  } catch (const CaseError& e) {
    fmt::print(stderr, "attnfuzz: {}: {}\n", printable(opt.path), message_safe(e.what(), 600));
    return kExitBadInput;
  }
  std::vector<std::string> names, notes;
  try {
    names = runnable_backends(r, opt.backends.empty() ? r.backends : opt.backends, opt.any_plugin_build, &notes);
  } catch (const std::exception& e) {  // a plugin not found here, or another build of it
    fmt::print(stderr, "attnfuzz: {}: {}\n", printable(opt.path), message_safe(e.what(), 900));
    return kExitBadInput;
  }
  for (const std::string& n : notes) fmt::print("note      {}\n", printable(n));
  const Signature& sig = r.finding.signature;
  std::string dest = opt.out;
  if (dest.empty()) {
    std::filesystem::path p(opt.path);
    dest = (p.parent_path() / (p.stem().string() + rundir::kMinimizedSuffix)).string();
  }
  // Checked before the minimization, which may take minutes.
  const std::string dest_flag = opt.out.empty() ? "minimize (FINDING.min.json)" : "--out";
  if (const auto why = writable_file(dest_flag, dest)) {
    fmt::print(stderr, "attnfuzz: {}\n", *why);
    return kExitBadInput;
  }
  // Into a campaign's directory (its findings/, say) only under its lock, held until the file is
  // written: a running campaign writes the same .min.json names.
  std::optional<DirLock> lock;
  if (const auto campaign_dir = campaign_directory_of(dest)) {
    try {
      lock.emplace(*campaign_dir);
    } catch (const DirLockError& e) {
      fmt::print(stderr, "attnfuzz: {} {}: {}\n", dest_flag, printable(dest), message_safe(e.what(), 600));
      return kExitBadInput;
    }
  }
  BackendSet loaded;
  try {
    refuse_repeated_backends(opt.backends);
    loaded = make_backends(names);
  } catch (const BackendLoadError& e) {
    fmt::print(stderr, "attnfuzz: --backends: {}\n", message_safe(e.what(), 600));
    return kExitBadInput;
  } catch (const std::invalid_argument& e) {
    fmt::print(stderr, "attnfuzz: {}\n", message_safe(e.what(), 600));
    return kExitBadInput;
  }
  // Only the backends the signature blames are needed (a consistency finding blames two).
  const std::vector<std::string> blamed = sig.blamed_backends();
  // `used` holds the names they load by (a plugin's path, not its name in signatures), for the
  // isolated workers; make_backends (fail) loads every name, in order.
  std::vector<Backend*> backends;
  std::vector<std::string> used;
  const std::vector<Backend*> all = loaded.pointers();
  for (size_t i = 0; i < all.size(); ++i)
    if (std::find(blamed.begin(), blamed.end(), all[i]->name()) != blamed.end()) {
      backends.push_back(all[i]);
      used.push_back(names[i]);
    }
  if (backends.empty()) {
    fmt::print(stderr, "attnfuzz: {}: none of the backends {} is '{}' (use --backends)\n", printable(opt.path),
               printable(fmt::format("{}", fmt::join(names, ","))), printable(sig.backend));
    return kExitBadInput;
  }
  fmt::print("signature {}\n", sig.to_string());
  // A GPU fault can leave this process's CUDA context unusable, and every later candidate
  // would then "reproduce" it: on a GPU each candidate is judged in an isolated worker.
  const bool on_gpu = std::any_of(backends.begin(), backends.end(), [](const Backend* b) { return b->on_gpu(); });
  std::optional<WorkerProcess> proc;
  CampaignOptions isolation;  // the worker's argv and watchdog
  isolation.backends = used;
  isolation.worker_argv = worker_argv(used);
  Judge judge;
  // A crash or a hang can only be judged from outside: such a finding, like any given --timeout,
  // has every candidate run in an isolated worker under a watchdog, on the CPU too (in this
  // process the first candidate that crashes would end the minimization).
  const bool dies = sig.cls == FindingClass::crash || sig.cls == FindingClass::timeout;
  if (on_gpu || dies || opt.timeout > 0) {
    proc.emplace(isolation.worker_argv, on_gpu ? std::vector<std::string>{"CUDA_LAUNCH_BLOCKING=1"} : std::vector<std::string>{});
    const double timeout = opt.timeout > 0 ? opt.timeout : sig.cls == FindingClass::timeout ? 2.0 : 120.0;
    judge = isolated_judge(*proc, isolation, needs_determinism(sig), timeout);
  } else {
    Device oracle_device = Device::cpu;
    OracleSet oracles = oracles_for(backends, r.c, &oracle_device);
    try {  // the reproducer was read without the budget: here it runs in this process
      check_memory_budget(r.c, Limits{Limits{}.memory_budget_bytes, host_work(backends, oracle_device)});
    } catch (const CaseError& e) {
      fmt::print(stderr, "attnfuzz: {}: {}\n", printable(opt.path), message_safe(e.what(), 600));
      return kExitBadInput;
    }
    judge = in_process_judge(backends, oracles, needs_determinism(sig));
  }
  if (!signature_holds(judge, r.c, sig)) {
    fmt::print("the signature does not reproduce on the original case: nothing to minimize\n");
    return kExitDivergence;
  }
  ShrinkReport rep;
  const Reproducer m = minimize(r, judge, shrink_candidates, case_size, &rep);
  Reproducer out = m;
  out.minimized_from = opt.path;
  try {
    write_file_atomic(dest, write_repro(out));
  } catch (const std::exception& e) {  // a full disk
    fmt::print(stderr, "attnfuzz: minimize: {}\n", message_safe(e.what(), 600));
    return kExitBadInput;
  }
  fmt::print("shrunk    {} steps ({} candidates tried), size {} -> {}\n", rep.steps, rep.attempts, rep.size_before, rep.size_after);
  fmt::print("before    {}  {}  mask {}  composition {}  layouts {}\n", describe_shape(r.c.shape), to_string(r.c.dtype), describe(r.c.mask),
             describe(r.c.composition), describe(r.c.layouts));
  fmt::print("after     {}  {}  mask {}  composition {}  layouts {}\n", describe_shape(m.c.shape), to_string(m.c.dtype), describe(m.c.mask),
             describe(m.c.composition), describe(m.c.layouts));
  fmt::print("wrote     {}\n", dest);
  return kExitOk;
}

}  // namespace

void add_minimize_command(CLI::App& app, int& exit_code) {
  auto opt = std::make_shared<MinimizeOptions>();
  CLI::App* cmd = app.add_subcommand("minimize", "Shrink a reproducer while its divergence signature holds");
  cmd->add_option("finding", opt->path, "reproducer JSON (attnfuzz-repro/1)")->required();
  add_shared_option(cmd, Flag::out, opt->out, "where to write the minimized reproducer (default: FINDING.min.json)");
  add_shared_option(cmd, Flag::backends, opt->backends, "to load (default: those recorded in the finding)");
  add_oracle_device_option(cmd);
  add_plugin_path_option(cmd, "(the reproducer's plugins)");
  cmd->add_flag("--any-plugin-build", opt->any_plugin_build, "minimize with a plugin whose library is not the one recorded");
  add_shared_option(cmd, Flag::timeout, opt->timeout,
                    "watchdog per candidate, seconds: every candidate then runs in an isolated worker (default: isolated with 120 s "
                    "where a backend runs on a GPU or the finding is a crash or a hang (2 s), in this process otherwise)");
  cmd->callback([opt, &exit_code] { exit_code = minimize_command(*opt); });
}

}  // namespace attnfuzz::cli
