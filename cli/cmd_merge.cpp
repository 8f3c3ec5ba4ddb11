// `attnfuzz merge`: combines shard outputs into one findings store and summary, bucketed and
// named exactly as one campaign's store (campaign/finding_store.h).
#include <fmt/core.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "campaign/coverage.h"
#include "campaign/dir_lock.h"
#include "campaign/finding_store.h"
#include "campaign/output_file.h"
#include "cli/arg_checks.h"
#include "cli/commands.h"
#include "cli/coverage_output.h"
#include "harness/errors.h"
#include "harness/json_input.h"

namespace attnfuzz::cli {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// `path` lies strictly inside the directory `dir` (after resolving both).
bool inside(const std::string& path, const std::string& dir) {
  std::error_code ec;
  const fs::path p = fs::weakly_canonical(path, ec);
  if (ec) return false;
  const fs::path d = fs::canonical(dir, ec);
  if (ec) return false;
  const auto [end, rest] = std::mismatch(d.begin(), d.end(), p.begin(), p.end());
  return end == d.end() && rest != p.end();
}

// Why `dir` cannot be merged (nothing when it can): it must be a campaign output directory.
std::optional<std::string> not_mergeable(const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return dir + ": no such directory";
  if (!fs::is_directory(dir, ec)) return dir + ": not a directory";
  if (!fs::exists(dir + "/summary.json", ec) && !fs::is_directory(dir + "/findings", ec))
    return dir + ": not a campaign output directory (no summary.json, no findings/)";
  return std::nullopt;
}

int merge_command(const std::vector<std::string>& dirs, const std::string& out) {
  // Everything is checked before anything is written: the inputs must be campaign
  // directories, and the output none of them (merging into an input overwrote its files).
  for (size_t i = 0; i < dirs.size(); ++i) {
    const std::string& d = dirs[i];
    if (const auto why = not_mergeable(d)) {
      fmt::print(stderr, "attnfuzz: merge: {}\n", *why);
      return kExitBadInput;
    }
    std::error_code ec;
    for (size_t j = 0; j < i; ++j)  // a shard given twice would count its cases and known findings twice
      if (fs::equivalent(dirs[j], d, ec)) {
        fmt::print(stderr, "attnfuzz: merge: {} is given twice{}\n", printable(d), dirs[j] == d ? "" : " (as " + printable(dirs[j]) + ")");
        return kExitBadInput;
      }
    if (fs::exists(out, ec) && fs::equivalent(out, d, ec)) {
      fmt::print(stderr, "attnfuzz: merge: --out {} is one of the inputs: choose another directory\n", printable(out));
      return kExitBadInput;
    }
    if (inside(out, d)) {  // the merged store would land in an input, and the next merge would read it
      fmt::print(stderr, "attnfuzz: merge: --out {} is inside the input {}: choose a directory outside every input\n", printable(out),
                 printable(d));
      return kExitBadInput;
    }
  }
  if (const auto why = writable_directory("--out", out)) {
    fmt::print(stderr, "attnfuzz: merge: {}\n", *why);
    return kExitBadInput;
  }
  // A live campaign's directory is never merged into: its store would take foreign findings.
  std::optional<DirLock> lock;
  try {
    lock.emplace(out);
  } catch (const DirLockError& e) {
    fmt::print(stderr, "attnfuzz: merge: --out {}\n", message_safe(e.what(), 600));
    return kExitBadInput;
  }
  uint64_t cases = 0;
  int unreadable = 0, orphans = 0;  // finding files left out: damaged ones, .min.json without their finding
  Coverage coverage;
  std::map<std::string, uint64_t> known;
  json shards = json::array();
  std::vector<std::string> signatures;
  try {
    // The campaign's own store: the same buckets, the same representatives, the same names.
    FindingStore store(out + "/findings");
    for (const auto& d : dirs) {
      if (fs::exists(d + "/summary.json")) {
        json s;
        try {
          s = parse_strict_json(read_input_file(d + "/summary.json"));
        } catch (const CaseError& e) {
          throw std::runtime_error(d + "/summary.json: " + e.what());
        }
        // The format report reads, and counts that add up: a sum past 2^64 - 1 is refused, not wrapped.
        if (!s.is_object() || s.value("format", json()) != "attnfuzz-summary/1")
          throw std::runtime_error(d + "/summary.json: format: not an attnfuzz-summary/1 file");
        if (!s.contains("cases") || !s.at("cases").is_number_unsigned())
          throw std::runtime_error(d + "/summary.json: cases: not a case count (a whole number >= 0)");
        cases = checked_sum(cases, s.at("cases").get<uint64_t>(), d + "/summary.json: cases");
        try {
          if (s.contains("coverage")) coverage.add(Coverage::from_json(s.at("coverage")));
          if (s.contains("known_findings"))
            for (const auto& [id, n] : s.at("known_findings").items())
              known[id] = checked_sum(known[id], count_at(s.at("known_findings"), id, "known_findings"), "known_findings." + id);
        } catch (const std::exception& e) {
          throw std::runtime_error(d + "/summary.json: " + e.what());
        }
        shards.push_back(s.contains("shard") ? s.at("shard") : json("?"));
      }
      if (!fs::exists(d + "/findings")) continue;
      std::vector<fs::path> files;
      for (const auto& e : fs::directory_iterator(d + "/findings")) files.push_back(e.path());
      std::sort(files.begin(), files.end());
      for (const auto& f : files) {
        const std::string p = f.string();
        if (f.extension() != ".json" || p.find(".tmp.") != std::string::npos) continue;
        if (p.find(".min.json") != std::string::npos) {
          // A minimized reproducer goes with its finding; alone (its finding deleted or lost) it is
          // no bucket's representative, and is said to be left out rather than dropped silently.
          if (!fs::exists(p.substr(0, p.size() - 9) + ".json")) {
            fmt::print(stderr, "attnfuzz: merge: warning: {} left out: its finding {} is missing\n", printable(p),
                       printable(f.filename().string().substr(0, f.filename().string().size() - 9) + ".json"));
            ++orphans;
          }
          continue;
        }
        try {
          const Reproducer r = load_repro(p);
          const std::string min = p.substr(0, p.size() - 5) + ".min.json";
          store.record(r, fs::exists(min) ? min : std::string());
        } catch (const CaseError& e) {  // damaged or edited: said, and left out
          fmt::print(stderr, "attnfuzz: merge: warning: {} left out: {}\n", printable(p), message_safe(e.what(), 600));
          ++unreadable;
        }
      }
    }
    signatures = store.signatures();
    json s{{"format", "attnfuzz-summary/1"},        {"merged_shards", shards},  {"cases", cases},
           {"findings_by_class", store.by_class()}, {"signatures", signatures}, {"coverage", coverage.to_json()}};
    s["cases_judged"] = coverage.judged_cases();
    s["cases_unjudged"] = coverage.unjudged_cases();
    if (!known.empty()) s["known_findings"] = known;
    write_file_atomic(out + "/summary.json", s.dump(2) + "\n");
  } catch (const std::exception& e) {  // a damaged summary, an unwritable --out, a full disk
    fmt::print(stderr, "attnfuzz: merge: {}\n", message_safe(e.what(), 600));
    return kExitBadInput;
  }
  fmt::print("merged {} directories: {} cases, {} distinct finding(s){}{} -> {}\n", dirs.size(), cases, signatures.size(),
             unreadable ? fmt::format(", {} unreadable finding file(s) left out", unreadable) : std::string(),
             orphans ? fmt::format(", {} minimized file(s) without their finding left out", orphans) : std::string(), printable(out));
  print_coverage(coverage);
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
  merge->add_option("--out", ma->out, "merged output directory")->check(non_empty_path());
  merge->callback([ma, &exit_code] { exit_code = merge_command(ma->dirs, ma->out); });
}

}  // namespace attnfuzz::cli
