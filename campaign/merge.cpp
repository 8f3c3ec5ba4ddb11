#include "campaign/merge.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "campaign/dir_lock.h"
#include "campaign/finding_store.h"
#include "campaign/run_dir.h"
#include "harness/errors.h"
#include "harness/json_input.h"

namespace attnfuzz {
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

// Why `dir` is no campaign output directory (nothing when it is one).
std::optional<std::string> not_a_campaign(const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return dir + ": no such directory";
  if (!fs::is_directory(dir, ec)) return dir + ": not a directory";
  if (!fs::exists(rundir::summary_path(dir), ec) && !fs::is_directory(rundir::findings_dir(dir), ec))
    return dir + ": not a campaign output directory (no summary.json, no findings/)";
  return std::nullopt;
}

// One shard's summary.json added to the merged counts; the shard's label, or "?".
json add_summary(const std::string& dir, MergeResult& m, std::map<std::string, uint64_t>& known) {
  const std::string path = rundir::summary_path(dir);
  json s;
  try {
    s = parse_strict_json(read_input_file(path));
  } catch (const CaseError& e) {
    throw std::runtime_error(path + ": " + e.what());
  }
  // The format report reads, and counts that add up: a sum past 2^64 - 1 is refused, not wrapped.
  if (!rundir::has_format(s, rundir::kSummaryFormat))
    throw std::runtime_error(path + ": format: not an " + rundir::kSummaryFormat + " file");
  if (!s.contains("cases") || !s.at("cases").is_number_unsigned())
    throw std::runtime_error(path + ": cases: not a case count (a whole number >= 0)");
  m.cases = checked_sum(m.cases, s.at("cases").get<uint64_t>(), path + ": cases");
  try {
    if (s.contains("coverage")) m.coverage.add(Coverage::from_json(s.at("coverage")));
    if (s.contains("known_findings"))
      for (const auto& [id, n] : s.at("known_findings").items())
        known[id] = checked_sum(known[id], count_at(s.at("known_findings"), id, "known_findings"), "known_findings." + id);
  } catch (const std::exception& e) {
    throw std::runtime_error(path + ": " + e.what());
  }
  return s.contains("shard") ? s.at("shard") : json("?");
}

// One shard's findings recorded into the merged store.
void add_findings(const std::string& dir, FindingStore& store, MergeResult& m, const LeftOut& left_out) {
  const std::string findings = rundir::findings_dir(dir);
  if (!fs::exists(findings)) return;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(findings)) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    const std::string p = f.string();
    if (f.extension() != ".json" || rundir::is_temporary(p)) continue;
    if (rundir::is_minimized(p)) {
      // A minimized reproducer goes with its finding; alone (its finding deleted or lost) it is
      // no bucket's representative, and is said to be left out rather than dropped silently.
      if (!fs::exists(rundir::finding_of_minimized(p))) {
        left_out(p, "its finding " + rundir::finding_of_minimized(f.filename().string()) + " is missing");
        ++m.orphans;
      }
      continue;
    }
    try {
      const Reproducer r = load_repro(p);
      const std::string min = rundir::minimized_name(p);
      store.record(r, fs::exists(min) ? min : std::string());
    } catch (const CaseError& e) {  // damaged or edited: said, and left out
      left_out(p, e.what());
      ++m.unreadable;
    }
  }
}

}  // namespace

std::optional<std::string> merge_refusal(const std::vector<std::string>& dirs, const std::string& out) {
  for (size_t i = 0; i < dirs.size(); ++i) {
    const std::string& d = dirs[i];
    if (const auto why = not_a_campaign(d)) return why;
    std::error_code ec;
    for (size_t j = 0; j < i; ++j)  // a shard given twice would count its cases and known findings twice
      if (fs::equivalent(dirs[j], d, ec))
        return message_safe(d) + " is given twice" + (dirs[j] == d ? "" : " (as " + message_safe(dirs[j]) + ")");
    if (fs::exists(out, ec) && fs::equivalent(out, d, ec))
      return "--out " + message_safe(out) + " is one of the inputs: choose another directory";
    if (inside(out, d))  // the merged store would land in an input, and the next merge would read it
      return "--out " + message_safe(out) + " is inside the input " + message_safe(d) + ": choose a directory outside every input";
  }
  return std::nullopt;
}

MergeResult merge_shards(const std::vector<std::string>& dirs, const std::string& out, const LeftOut& left_out) {
  const DirLock lock(out);
  MergeResult m;
  std::map<std::string, uint64_t> known;
  json shards = json::array();
  // The campaign's own store: the same buckets, the same representatives, the same names.
  FindingStore store(rundir::findings_dir(out));
  // Guided shards' corpora: one corpus, the best entries of every slot (campaign/guided_corpus.h).
  std::optional<GuidedCorpus> corpus;
  for (const auto& d : dirs) {
    if (fs::exists(rundir::summary_path(d))) shards.push_back(add_summary(d, m, known));
    add_findings(d, store, m, left_out);
    if (std::optional<GuidedCorpus> c = rundir::read_corpus(d)) {
      if (!corpus) corpus.emplace();
      corpus->add(*c);
    }
  }
  if (corpus) rundir::write_corpus(out, *corpus);
  rundir::Summary s;
  s.merged_shards = shards;
  s.cases = m.cases;
  s.findings_by_class = store.by_class();
  s.signatures = store.signatures();
  s.coverage = m.coverage;
  if (!known.empty()) s.known_findings = known;
  if (corpus) s.guided = rundir::Summary::Guided{std::nullopt, corpus->counts, corpus->entries()};
  rundir::write_summary(out, s);
  m.distinct_findings = s.signatures.size();
  return m;
}

}  // namespace attnfuzz
