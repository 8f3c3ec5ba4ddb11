// `attnfuzz generate`: writes random valid cases (the generator the tests and
// campaigns draw from), one JSON file each, or the first to standard output.
#include <fmt/core.h>

#include "campaign/output_file.h"
#include "campaign/repro.h"
#include "cli/arg_checks.h"
#include "cli/campaign_args.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "generators/envelope_cases.h"
#include "generators/random_case.h"
#include "harness/case_json.h"
#include "harness/errors.h"
#include "backends/registry.h"

namespace attnfuzz::cli {

void add_generate_command(CLI::App& app, int& exit_code) {
  struct Options {
    uint64_t seed = 0;
    int count = 1;
    std::string out_dir;
    std::string tier = domain::tier_name(domain::kDefaultCpuTier);
    int64_t max_seq = 0, max_dim = 0;  // 0: the tier's
    std::vector<std::string> backends;  // aim at their envelopes, one after the other
    double edge_share = kDefaultEdgeShare;
    CaseMix mix;
  };
  auto opt = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("generate", "Write random valid cases (deterministic for a seed)");
  add_shared_option(cmd, Flag::seed, opt->seed, "first generator seed; case i uses seed + i");
  cmd->add_option("--count", opt->count, "number of cases (more than one needs --out)")->check(CLI::Range(1, 1000000));
  add_shared_option(cmd, Flag::out, opt->out_dir, "directory for case-<seed>.json files (default: print the case)");
  add_shared_option(cmd, Flag::tier, opt->tier, "toy, small (default), real or decode")->check(CLI::IsMember({"toy", "small", "real", "decode"}));
  add_shared_option(cmd, Flag::max_seq, opt->max_seq);
  add_shared_option(cmd, Flag::max_dim, opt->max_dim);
  add_shared_option(cmd, Flag::backends, opt->backends,
                    "to aim at: case i lies inside the support envelope of the (i mod n)-th (docs/fuzzing.md, \"Aimed cases\")");
  cmd->add_option("--edge-share", opt->edge_share, "with --backends: share of cases just outside one clause of an envelope (default 0.12)");
  cmd->callback([opt, &exit_code] {
    RandomCaseOptions& gen = opt->mix.gen;
    gen = RandomCaseOptions::for_tier(*domain::tier_from_name(opt->tier));
    if (opt->max_seq > 0) gen.max_seq = opt->max_seq;
    if (opt->max_dim > 0) gen.max_dim = opt->max_dim;
    if (!(opt->edge_share >= 0.0 && opt->edge_share <= 1.0)) {
      fmt::print(stderr, "attnfuzz: --edge-share takes a share in [0, 1], got {}\n", opt->edge_share);
      exit_code = kExitBadInput;
      return;
    }
    opt->mix.edge_share = opt->edge_share;
    try {
      std::vector<BackendProfile> profiles;
      for (const auto& b : make_backends(opt->backends).owned) {
        opt->mix.targets.push_back({b->name(), b->envelope(), b->on_gpu()});
        profiles.push_back({b->name(), b->device(), b->envelope(), b->host_scores()});
      }
      // The memory budget for the work these backends do on the host (without --backends: all of it).
      if (!profiles.empty()) opt->mix.host_work = [profiles](const Shape& s) { return host_work_of(profiles, s); };
    } catch (const std::exception& e) {
      fmt::print(stderr, "attnfuzz: --backends: {}\n", e.what());
      exit_code = kExitBadInput;
      return;
    }
    auto draw = [opt](uint64_t seed, uint64_t i) { return aim_case(random_case(seed, opt->mix.gen), i, opt->mix).c; };
    if (opt->out_dir.empty()) {
      if (opt->count > 1) {  // printing one and dropping the rest would be a silent default
        fmt::print(stderr, "attnfuzz: --count {}: more than one case needs --out DIR (one file each)\n", opt->count);
        exit_code = kExitBadInput;
        return;
      }
      fmt::print("{}", write_case(draw(opt->seed, 0)));
      exit_code = kExitOk;
      return;
    }
    if (const auto why = writable_directory("--out", opt->out_dir)) {
      fmt::print(stderr, "attnfuzz: {}\n", *why);
      exit_code = kExitBadInput;
      return;
    }
    try {
      for (int i = 0; i < opt->count; ++i) {
        const uint64_t s = opt->seed + static_cast<uint64_t>(i);  // wraps past 2^64 - 1, as the seeds of a stream may
        write_file_atomic(opt->out_dir + "/case-" + std::to_string(s) + ".json", write_case(draw(s, static_cast<uint64_t>(i))));
      }
    } catch (const std::exception& e) {  // a full disk: the files written so far are whole
      fmt::print(stderr, "attnfuzz: --out {}: {}\n", printable(opt->out_dir), message_safe(e.what(), 600));
      exit_code = kExitBadInput;
      return;
    }
    fmt::print("wrote {} cases to {}\n", opt->count, opt->out_dir);
    exit_code = kExitOk;
  });
}

}  // namespace attnfuzz::cli
