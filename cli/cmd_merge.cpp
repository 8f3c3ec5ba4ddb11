// `attnfuzz merge`: combines shard outputs into one findings store and summary (campaign/merge.h).
#include <fmt/core.h>
#include <fmt/format.h>

#include <memory>

#include "campaign/dir_lock.h"
#include "campaign/merge.h"
#include "cli/arg_checks.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/coverage_output.h"
#include "harness/errors.h"

namespace attnfuzz::cli {
namespace {

int merge_command(const std::vector<std::string>& dirs, const std::string& out) {
  // Everything is checked before anything is written: the inputs must be campaign
  // directories, and the output none of them (merging into an input overwrote its files).
  if (const auto why = merge_refusal(dirs, out)) {
    fmt::print(stderr, "attnfuzz: merge: {}\n", *why);
    return kExitBadInput;
  }
  if (const auto why = writable_directory("--out", out)) {
    fmt::print(stderr, "attnfuzz: merge: {}\n", *why);
    return kExitBadInput;
  }
  MergeResult m;
  try {
    m = merge_shards(dirs, out, [](const std::string& file, const std::string& why) {
      fmt::print(stderr, "attnfuzz: merge: warning: {} left out: {}\n", printable(file), message_safe(why, 600));
    });
  } catch (const DirLockError& e) {  // a live campaign's directory is never merged into
    fmt::print(stderr, "attnfuzz: merge: --out {}\n", message_safe(e.what(), 600));
    return kExitBadInput;
  } catch (const std::exception& e) {  // a damaged summary, an unwritable --out, a full disk
    fmt::print(stderr, "attnfuzz: merge: {}\n", message_safe(e.what(), 600));
    return kExitBadInput;
  }
  fmt::print("merged {} directories: {} cases, {} distinct finding(s){}{} -> {}\n", dirs.size(), m.cases, m.distinct_findings,
             m.unreadable ? fmt::format(", {} unreadable finding file(s) left out", m.unreadable) : std::string(),
             m.orphans ? fmt::format(", {} minimized file(s) without their finding left out", m.orphans) : std::string(), printable(out));
  print_coverage(m.coverage);
  return kExitOk;
}

}  // namespace

void add_merge_command(CLI::App& app, int& exit_code) {
  struct MergeArgs {
    std::vector<std::string> dirs;
    std::string out = "attnfuzz-merged";
  };
  auto ma = std::make_shared<MergeArgs>();
  CLI::App* merge = app.add_subcommand("merge", "Combine shard outputs into one findings store and summary");
  merge->add_option("dirs", ma->dirs, "campaign output directories")->required();
  add_shared_option(merge, Flag::out, ma->out, "merged output directory (default attnfuzz-merged)");
  merge->callback([ma, &exit_code] { exit_code = merge_command(ma->dirs, ma->out); });
}

}  // namespace attnfuzz::cli
