// `attnfuzz generate`: writes random valid cases (the generator the tests and
// campaigns draw from), one JSON file each, or the first to standard output.
#include <fmt/core.h>

#include <filesystem>
#include <fstream>

#include "cli/commands.h"
#include "generators/random_case.h"
#include "harness/case_json.h"

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
  cmd->add_option("--seed", opt->seed, "first generator seed; case i uses seed + i");
  cmd->add_option("--count", opt->count, "number of cases")->check(CLI::Range(1, 1000000));
  cmd->add_option("--out", opt->out_dir, "directory for case-<seed>.json files (default: print the first case)");
  cmd->add_option("--tier", opt->tier, "size tier: toy, small (default) or real (docs/fuzzing.md)")
      ->check(CLI::IsMember({"toy", "small", "real"}));
  cmd->add_option("--max-seq", opt->max_seq, "largest Sq and Skv (default: the tier's)")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--max-dim", opt->max_dim, "largest head dimension (default: the tier's)")->check(CLI::Range(1, 1024));
  cmd->callback([opt, &exit_code] {
    opt->gen = RandomCaseOptions::for_tier(*domain::tier_from_name(opt->tier));
    if (opt->max_seq > 0) opt->gen.max_seq = opt->max_seq;
    if (opt->max_dim > 0) opt->gen.max_dim = opt->max_dim;
    if (opt->out_dir.empty()) {
      fmt::print("{}", write_case(random_case(opt->seed, opt->gen)));
      exit_code = kExitOk;
      return;
    }
    std::filesystem::create_directories(opt->out_dir);
    for (int i = 0; i < opt->count; ++i) {
      const uint64_t s = opt->seed + static_cast<uint64_t>(i);
      std::ofstream(opt->out_dir + "/case-" + std::to_string(s) + ".json") << write_case(random_case(s, opt->gen));
    }
    fmt::print("wrote {} cases to {}\n", opt->count, opt->out_dir);
    exit_code = kExitOk;
  });
}

}  // namespace attnfuzz::cli
