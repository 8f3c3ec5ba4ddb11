// `attnfuzz minimize FINDING.json`: shrinks a reproducer while its divergence signature
// holds, writes the minimized reproducer, and reports the steps and sizes.
#include <fmt/core.h>
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <memory>

#include "generators/shrink.h"
#include "harness/cli/commands.h"
#include "harness/errors.h"
#include "harness/campaign.h"
#include "harness/minimize.h"
#include "harness/worker.h"
#include "oracles/registry.h"

namespace attnfuzz::cli {
namespace {

struct MinimizeOptions {
  std::string path, out;
  std::vector<std::string> backends;
};

int minimize_command(const MinimizeOptions& opt) {
  Reproducer r;
  try {
    r = load_repro(opt.path);
  } catch (const CaseError& e) {
    fmt::print(stderr, "attnfuzz: {}: {}\n", opt.path, e.what());
    return kExitBadInput;
  }
  std::vector<std::string> names = opt.backends.empty() ? r.backends : opt.backends;
  // Only the backend named in the signature is needed (a consistency finding names two).
  std::vector<std::unique_ptr<Backend>> owned;
  std::vector<Backend*> backends;
  for (const auto& n : names) {
    try {
      auto b = make_backend(n);
      const std::string& who = r.finding.signature.backend;
      if (who == b->name() || who.find(b->name() + "~") == 0 || who.find("~" + b->name()) != std::string::npos) {
        backends.push_back(b.get());
        owned.push_back(std::move(b));
      }
    } catch (const std::exception& e) {
      fmt::print(stderr, "attnfuzz: backend {}: {}\n", n, e.what());
      return kExitBadInput;
    }
  }
  if (backends.empty()) {
    fmt::print(stderr, "attnfuzz: {}: none of the backends {} is '{}' (use --backends)\n", opt.path, fmt::join(names, ","),
               r.finding.signature.backend);
    return kExitBadInput;
  }
  const OracleSet oracles = oracles_for(backends, r.c.shape);
  const Signature& sig = r.finding.signature;
  fmt::print("signature {}\n", sig.to_string());
  ShrinkReport rep;
  Reproducer m;
  const bool on_gpu = std::any_of(backends.begin(), backends.end(), [](const Backend* b) { return b->device() != "cpu"; });
  if (on_gpu) {
    // A GPU fault can leave this process's CUDA context unusable, and every later candidate
    // would then "reproduce" it: each candidate is judged in an isolated worker instead.
    std::vector<std::string> used;
    for (const Backend* b : backends) used.push_back(b->name());
    CampaignOptions o;
    o.backends = used;
    o.worker_argv = worker_argv(used);
    o.candidates = shrink_candidates;
    o.size = case_size;
    o.timeout_seconds = 120;
    o.determinism_every = sig.cls == FindingClass::nondeterministic ? 1 : 1000000;
    WorkerProcess proc(o.worker_argv, {"CUDA_LAUNCH_BLOCKING=1"});
    bool holds = false;
    for (const auto& f : run_case(proc, r.c, -1, o)) holds = holds || f.finding.signature == sig;
    if (!holds) {
      fmt::print("the signature does not reproduce on the original case: nothing to minimize\n");
      return kExitDivergence;
    }
    m = minimize_isolated(proc, r, o, &rep);
  } else {
    if (!signature_holds(r.c, sig, backends, oracles)) {
      fmt::print("the signature does not reproduce on the original case: nothing to minimize\n");
      return kExitDivergence;
    }
    m = minimize(r, backends, oracles, shrink_candidates, case_size, &rep);
  }
  Reproducer out = m;
  out.minimized_from = opt.path;
  std::string dest = opt.out;
  if (dest.empty()) {
    std::filesystem::path p(opt.path);
    dest = (p.parent_path() / (p.stem().string() + ".min.json")).string();
  }
  write_file_atomic(dest, write_repro(out));
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
  cmd->add_option("--out", opt->out, "where to write the minimized reproducer (default: FINDING.min.json)");
  cmd->add_option("--backends", opt->backends, "backends to load (default: those recorded in the finding)")->delimiter(',');
  cmd->add_option_function<std::string>("--oracle-device", set_oracle_device_override, "oracles: auto (default), cpu or cuda (docs/gpu.md)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  cmd->callback([opt, &exit_code] { exit_code = minimize_command(*opt); });
}

}  // namespace attnfuzz::cli
