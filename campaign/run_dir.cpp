#include "campaign/run_dir.h"

#include <algorithm>
#include <filesystem>
#include <stdexcept>

#include "campaign/output_file.h"
#include "harness/json_input.h"

namespace attnfuzz::rundir {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {
bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}
}  // namespace

const std::vector<std::string>& own_names() {
  static const std::vector<std::string> names{kStateFile, kLockFile,  kFindingsDir, kSummaryFile,
                                              kReportFile, kJUnitFile, kKnownSetFile, kCompileCacheDir, kCorpusFile};
  return names;
}

std::string findings_dir(const std::string& dir) { return dir + "/" + kFindingsDir; }
std::string state_path(const std::string& dir) { return dir + "/" + kStateFile; }
std::string summary_path(const std::string& dir) { return dir + "/" + kSummaryFile; }
std::string compile_cache_dir(const std::string& dir) { return dir + "/" + kCompileCacheDir; }
std::string known_set_path(const std::string& dir) { return dir + "/" + kKnownSetFile; }
std::string corpus_path(const std::string& dir) { return dir + "/" + kCorpusFile; }

std::string minimized_name(const std::string& finding) { return finding.substr(0, finding.size() - 5) + kMinimizedSuffix; }
std::string finding_of_minimized(const std::string& minimized) {
  return minimized.substr(0, minimized.size() - std::string(kMinimizedSuffix).size()) + ".json";
}
bool is_minimized(const std::string& path) { return path.find(kMinimizedSuffix) != std::string::npos; }
// The file's name, not its directories: a campaign under /scratch/x.tmp.1/ keeps its findings.
bool is_temporary(const std::string& path) { return fs::path(path).filename().string().find(".tmp.") != std::string::npos; }
bool is_finding_file(const std::string& path) { return ends_with(path, ".json") && !is_minimized(path) && !is_temporary(path); }

std::vector<std::string> finding_files(const std::string& findings) {
  std::vector<std::string> files;
  std::error_code ec;
  if (!fs::exists(findings, ec)) return files;
  for (const auto& e : fs::directory_iterator(findings)) {
    const std::string p = e.path().string();
    if (is_finding_file(p)) files.push_back(p);
  }
  std::sort(files.begin(), files.end());
  return files;
}

void write(const std::string& path, const std::string& text) { write_file_atomic(path, text); }

std::string summary_text(const Summary& s) {
  json j;
  j["format"] = kSummaryFormat;
  if (s.seed) j["seed"] = *s.seed;
  if (s.shard) j["shard"] = *s.shard;
  if (s.merged_shards) j["merged_shards"] = *s.merged_shards;
  if (s.backends) j["backends"] = *s.backends;
  j["cases"] = s.cases;
  // Of `cases`: judged (some backend compared, or a crash/timeout verdict) and not.
  j["cases_judged"] = s.coverage.judged_cases();
  j["cases_unjudged"] = s.coverage.unjudged_cases();
  j["findings_by_class"] = s.findings_by_class;
  j["signatures"] = s.signatures;
  j["coverage"] = s.coverage.to_json();
  if (s.known_findings) j["known_findings"] = *s.known_findings;
  if (s.known_deviations) j["known_deviations"] = *s.known_deviations;
  if (s.guided) {
    json g{{"mutants", s.guided->counts.mutants},
           {"raised", s.guided->counts.raised},
           {"steered", s.guided->counts.steered},
           {"corpus_entries", s.guided->corpus_entries}};
    if (s.guided->mutation_share) g["mutation_share"] = *s.guided->mutation_share;
    j["guided"] = g;
  }
  return j.dump(2) + "\n";
}

void write_summary(const std::string& dir, const Summary& s) { write(summary_path(dir), summary_text(s)); }

bool has_format(const json& j, const char* format) {
  const auto f = j.is_object() ? j.find("format") : j.end();
  return f != j.end() && f->is_string() && f->get<std::string>() == format;
}

StateFile read_state(const std::string& dir) {
  const std::string path = state_path(dir);
  try {
    StateFile f;
    f.bytes = read_input_file(path);
    f.json = parse_strict_json(f.bytes);
    if (!has_format(f.json, kStateFormat)) throw std::runtime_error(std::string("not an ") + kStateFormat + " file");
    return f;
  } catch (const std::exception& e) {
    throw std::runtime_error("--resume: " + path + ": " + e.what());
  }
}

std::optional<double> campaign_seconds(const std::string& dir) {
  try {
    const json seconds = read_state(dir).json.value("seconds", json());
    if (seconds.is_number() && seconds.get<double>() > 0) return seconds.get<double>();
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

void write_state(const std::string& dir, const json& state) { write(state_path(dir), state.dump(2) + "\n"); }

void write_corpus(const std::string& dir, const GuidedCorpus& corpus) {
  json j = corpus.to_json();
  j["format"] = kCorpusFormat;
  write(corpus_path(dir), j.dump() + "\n");
}

std::optional<GuidedCorpus> read_corpus(const std::string& dir) {
  const std::string path = corpus_path(dir);
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::nullopt;
  try {
    const json j = parse_strict_json(read_input_file(path, kMaxCorpusBytes));
    if (!has_format(j, kCorpusFormat)) throw std::runtime_error(std::string("not an ") + kCorpusFormat + " file");
    return GuidedCorpus::from_json(j);
  } catch (const std::exception& e) {
    throw std::runtime_error(path + ": " + e.what());
  }
}

}  // namespace attnfuzz::rundir
