// `attnfuzz generate`: writes random valid cases (the generator the tests and
// campaigns draw from), one JSON file each, or the first to standard output.
#include <fmt/core.h>

#include "campaign/output_file.h"
#include "campaign/repro.h"
#include "cli/arg_checks.h"
#include "cli/commands.h"
#include "generators/random_case.h"
#include "harness/case_json.h"
#include "harness/errors.h"

namespace attnfuzz::cli {

void add_generate_command(CLI::App& app, int& exit_code) {
  struct Options {
    uint64_t seed = 0;
    int count = 1;
    std::string out_dir;
    std::string tier = domain::tier_name(domain::kDefaultCpuTier);
    int64_t max_seq = 0, max_dim = 0;  // 0: the tier's
    RandomCaseOptions gen;
  };
  auto opt = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("generate", "Write random valid cases (deterministic for a seed)");
  cmd->add_option("--seed", opt->seed, "first generator seed; case i uses seed + i")->check(strict_unsigned());
  cmd->add_option("--count", opt->count, "number of cases (more than one needs --out)")->check(CLI::Range(1, 1000000));
  cmd->add_option("--out", opt->out_dir, "directory for case-<seed>.json files (default: print the case)")->check(non_empty_path());
  cmd->add_option("--tier", opt->tier, "size tier: toy, small (default) or real (docs/fuzzing.md)")
      ->check(CLI::IsMember({"toy", "small", "real"}));
  cmd->add_option("--max-seq", opt->max_seq, "largest Sq and Skv (default: the tier's)")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--max-dim", opt->max_dim, "largest head dimension (default: the tier's)")->check(CLI::Range(1, 1024));
  cmd->callback([opt, &exit_code] {
    opt->gen = RandomCaseOptions::for_tier(*domain::tier_from_name(opt->tier));
    if (opt->max_seq > 0) opt->gen.max_seq = opt->max_seq;
    if (opt->max_dim > 0) opt->gen.max_dim = opt->max_dim;
    if (opt->out_dir.empty()) {
      if (opt->count > 1) {  // printing one and dropping the rest would be a silent default
        fmt::print(stderr, "attnfuzz: --count {}: more than one case needs --out DIR (one file each)\n", opt->count);
        exit_code = kExitBadInput;
        return;
      }
      fmt::print("{}", write_case(random_case(opt->seed, opt->gen)));
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
        write_file_atomic(opt->out_dir + "/case-" + std::to_string(s) + ".json", write_case(random_case(s, opt->gen)));
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
