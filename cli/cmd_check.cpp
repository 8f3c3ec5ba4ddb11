// `attnfuzz check`: the pre-merge check, a campaign with a fixed seed and case budget that
// starts from nothing and writes JUnit and JSON.
#include <fmt/core.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "campaign/dir_lock.h"
#include "campaign/junit.h"
#include "campaign/output_file.h"
#include "campaign/repro.h"
#include "campaign/run_dir.h"
#include "cli/arg_checks.h"
#include "cli/campaign_args.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/coverage_output.h"
#include "harness/errors.h"
#include "harness/json_input.h"

namespace attnfuzz::cli {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// What a check or campaign writes into its directory: the only entries a check deletes.
bool campaign_output_entry(const std::string& name) {
  const std::vector<std::string>& ours = rundir::own_names();
  return std::find(ours.begin(), ours.end(), name) != ours.end();
}

// Empties a previous check's directory under its lock (`lock`), which the caller holds from
// then on; a directory that does not exist yet is left to the campaign to make. Refuses (an
// error line) a directory holding anything a check did not write, so that `check --out .` or a
// typo never deletes a user's files, and one a running campaign holds, so that a check never
// deletes a live campaign's findings.
std::optional<std::string> clear_check_output(const std::string& out, std::optional<DirLock>& lock) {
  auto take_lock = [&]() -> std::optional<std::string> {
    try {
      lock.emplace(out);
    } catch (const DirLockError& e) {
      return "--out " + std::string(e.what());
    }
    return std::nullopt;
  };
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(out, ec);
  // Nothing there: nothing to clear, and nothing is created before the backends have loaded
  // (the campaign makes the directory and takes its lock).
  if (ec || !fs::exists(st)) return std::nullopt;
  if (fs::is_symlink(st)) return "--out " + printable(out) + ": is a symbolic link: give the directory itself";
  if (!fs::is_directory(st)) return "--out " + printable(out) + ": exists and is not a directory";
  // A campaign's directory is locked before it is looked at: a live one is refused as in use,
  // whatever temporary files it holds at the moment.
  if (fs::exists(fs::symlink_status(out + "/" + rundir::kLockFile, ec)))
    if (const auto why = take_lock()) return why;
  for (auto it = fs::directory_iterator(out, ec); !ec && it != fs::directory_iterator(); it.increment(ec))
    if (!campaign_output_entry(it->path().filename().string()))
      return "--out " + printable(out) + ": holds " + printable(it->path().filename().string()) +
             ", which no check wrote: a check starts from an empty directory and will not delete it; choose another --out";
  if (ec) return "--out " + printable(out) + ": cannot be read: " + ec.message();
  if (!lock)
    if (const auto why = take_lock()) return why;
  // Every entry but the lock this check now holds and the compilers' caches: a cache changes
  // how long a check takes, never what it finds.
  std::vector<fs::path> previous;
  for (auto it = fs::directory_iterator(out, ec); !ec && it != fs::directory_iterator(); it.increment(ec))
    if (it->path().filename() != rundir::kLockFile && it->path().filename() != rundir::kCompileCacheDir) previous.push_back(it->path());
  for (const auto& p : previous)
    if (!ec) fs::remove_all(p, ec);
  if (ec) return "--out " + printable(out) + ": cannot clear the previous check's output: " + ec.message();
  return std::nullopt;
}

// Each line made safe to show (harness/errors.h), the line breaks kept.
std::string printable_block(const std::string& text) {
  std::string out, line;
  for (char ch : text) {
    if (ch != '\n') {
      line += ch;
      continue;
    }
    out += message_safe(line, 2000) + "\n";
    line.clear();
  }
  return out + (line.empty() ? "" : message_safe(line, 2000));
}

// What a CI reader needs to act on a finding, from its reproducer (the minimized one where
// there is one: the smaller case to read and replay): the verdict's numbers, the case, and the
// commands that replay and shrink it. Keyed by signature; the findings in their names' order.
std::map<std::string, std::string> failure_bodies(const std::string& findings_dir) {
  std::map<std::string, std::string> out;
  for (const std::string& finding : rundir::finding_files(findings_dir)) {
    Reproducer r;
    std::string shown;
    for (const std::string& file : {rundir::minimized_name(finding), finding}) {
      std::error_code ec;
      if (!fs::exists(file, ec)) continue;
      try {
        r = load_repro(file);
        shown = file;
        break;
      } catch (const std::exception&) {
      }
    }
    if (shown.empty()) continue;
    const Signature& sig = r.finding.signature;
    std::string body = "divergence: " + sig.to_string() + "\n";
    if (!r.finding.detail.empty()) body += "detail: " + r.finding.detail + "\n";
    if (!r.finding.metrics.empty()) {
      body += "metrics:";
      for (const auto& [k, v] : metrics_by_name(r.finding)) body += fmt::format(" {}={:.4g}", k, v);
      body += "\n";
    }
    if (!r.rule.empty()) body += "rule: " + r.rule + "\n";
    body += fmt::format("case: {} {} mask {} composition {} layouts {}\n", describe_shape(r.c.shape), to_string(r.c.dtype),
                        describe(r.c.mask), describe(r.c.composition), describe(r.c.layouts));
    body += "reproducer: " + shown + "\n";
    body += "replay: attnfuzz replay " + shown + "\n";
    body += "minimize: attnfuzz minimize " + finding + "\n";
    out.emplace(sig.to_string(), printable_block(body));
  }
  return out;
}

}  // namespace

void add_check_command(CLI::App& app, int& exit_code) {
  struct CheckArgs {
    CampaignArgs c;
    std::string junit, json_out;
    uint64_t min_per_cell = 0;  // 0: no minimum
  };
  auto ch = std::make_shared<CheckArgs>();
  ch->c.cases = 200;
  ch->c.seconds = 1e9;
  ch->c.jobs = 1;
  ch->c.mutation_share = 0;  // a gate draws the same cases whatever it found before: blind unless asked
  ch->c.out = "attnfuzz-check";
  CLI::App* check = app.add_subcommand("check", "Pre-merge check: fixed seed and case budget, deterministic, JUnit + JSON, exit code");
  add_campaign_flags(check, ch->c);
  check->add_option("--cases", ch->c.cases, "case budget")->check(strict_unsigned())->check(CLI::Range(uint64_t{1}, UINT64_MAX));
  add_shared_option(check, Flag::junit, ch->junit, "(default: OUT/junit.xml)");
  check->add_option("--json", ch->json_out, "JSON summary file (default: OUT/summary.json)")->check(non_empty_path());
  check->add_option("--min-per-cell", ch->min_per_cell,
                    "judged cases every backend needs in each cell of the feature map inside its envelope (docs/campaigns.md, "
                    "\"Feature map\"); fewer: exit 4 unless there are findings (default 0: none)")
      ->check(strict_unsigned());
  check->callback([ch, &exit_code] {
    std::optional<std::string> bad;
    for (const auto& [flag, path] : {std::pair<std::string, std::string>{"--junit", ch->junit}, {"--json", ch->json_out}})
      if (!bad && !path.empty()) bad = writable_file(flag, path);
    std::optional<DirLock> lock;                          // held until the JUnit and JSON files are written
    if (!bad) bad = clear_check_output(ch->c.out, lock);  // a check always starts from nothing
    if (bad) {
      fmt::print(stderr, "attnfuzz: {}\n", *bad);
      exit_code = kExitBadInput;
      return;
    }
    bool untested = false;
    exit_code = campaign_command(ch->c, &untested);
    if (exit_code == kExitBadInput) return;
    std::vector<JUnitCase> cases;
    std::ifstream in(ch->c.out + "/summary.json");
    const json s = json::parse(in);
    const std::map<std::string, std::string> bodies = failure_bodies(rundir::findings_dir(ch->c.out));
    for (const auto& sig : s.at("signatures")) {
      const auto it = bodies.find(sig.get<std::string>());
      cases.push_back({"attnfuzz.check", sig.get<std::string>(),
                       it != bodies.end() ? it->second : "divergence: " + sig.get<std::string>() + "\n(no reproducer recorded for it)", ""});
    }
    cases.push_back({"attnfuzz.check", "cases=" + std::to_string(s.value("cases", 0)), "", ""});
    // Known deviations pass the check and are shown: a passing test case each, its count as output.
    if (s.contains("known_findings"))
      for (const auto& [id, n] : s.at("known_findings").items())
        cases.push_back({"attnfuzz.check", "known " + id, "", "known deviation, " + std::to_string(n.get<uint64_t>()) + " finding(s)"});
    const Coverage coverage = Coverage::from_json(s.value("coverage", json::object()));
    for (const auto& c : coverage_junit_cases(coverage)) cases.push_back(c);
    if (untested) exit_code = kExitUntested;
    if (ch->min_per_cell > 0) {
      const std::vector<std::string> thin = coverage.thin_cells(ch->min_per_cell);
      std::string text;
      for (const std::string& t : thin) text += t + "\n";
      cases.push_back({"attnfuzz.check.coverage", "feature cells (at least " + std::to_string(ch->min_per_cell) + " judged each)",
                       thin.empty() ? "" : std::to_string(thin.size()) + " cell(s) inside their backend's envelope judged too few times",
                       text});
      if (!thin.empty()) {
        fmt::print(stderr, "attnfuzz: check: {} feature cell(s) judged fewer than {} times (--min-per-cell), the first: {}\n", thin.size(),
                   ch->min_per_cell, thin.front());
        if (exit_code == kExitOk) exit_code = kExitUntested;
      }
    }
    try {
      if (!lock) lock.emplace(ch->c.out);  // the campaign made the directory: held for the JUnit and JSON files
      write_file_atomic(ch->junit.empty() ? ch->c.out + "/" + rundir::kJUnitFile : ch->junit, junit_xml("attnfuzz.check", cases));
      if (!ch->json_out.empty()) write_file_atomic(ch->json_out, read_input_file(ch->c.out + "/summary.json"));
    } catch (const std::exception& e) {  // a full disk, say
      fmt::print(stderr, "attnfuzz: check: {}\n", message_safe(e.what(), 600));
      exit_code = kExitBadInput;
    }
  });
}

}  // namespace attnfuzz::cli
