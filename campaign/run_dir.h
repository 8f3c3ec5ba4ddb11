#pragma once
// The layout of a campaign directory, in one place: the names of its files, their format tags,
// and the writers and readers every command goes through (campaign, merge, replay, minimize,
// report, check). A name or tag spelled anywhere else could drift from the one a reader expects.
//
//   DIR/findings/<bucket>.json      one reproducer per bucket (campaign/finding_store.h)
//   DIR/findings/<bucket>.min.json  its minimized reproducer
//   DIR/state.json                  the resumable state (attnfuzz-campaign-state/1)
//   DIR/known.json                  the campaign's copy of its --known deviations
//   DIR/corpus.json                 a guided campaign's corpus (attnfuzz-corpus/1;
//                                   campaign/guided_corpus.h)
//   DIR/summary.json                the reproducible summary (attnfuzz-summary/1)
//   DIR/compile-cache/              the compilers' caches its Python workers share (Inductor,
//                                   Triton, XLA), kept across --resume and by `check`
//   DIR/lock, DIR/report.html, DIR/junit.xml
//
// Every write is atomic and never follows a symbolic link (campaign/output_file.h).
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "campaign/coverage.h"
#include "campaign/guided_corpus.h"

namespace attnfuzz::rundir {

inline constexpr const char* kFindingsDir = "findings";
inline constexpr const char* kStateFile = "state.json";
inline constexpr const char* kSummaryFile = "summary.json";
inline constexpr const char* kKnownSetFile = "known.json";
inline constexpr const char* kCorpusFile = "corpus.json";
inline constexpr const char* kLockFile = "lock";
inline constexpr const char* kReportFile = "report.html";
inline constexpr const char* kJUnitFile = "junit.xml";
inline constexpr const char* kCompileCacheDir = "compile-cache";
inline constexpr const char* kMinimizedSuffix = ".min.json";

inline constexpr const char* kSummaryFormat = "attnfuzz-summary/1";
inline constexpr const char* kStateFormat = "attnfuzz-campaign-state/1";
inline constexpr const char* kCorpusFormat = "attnfuzz-corpus/1";

// Every name attnfuzz itself puts at the top of a campaign directory.
const std::vector<std::string>& own_names();

std::string findings_dir(const std::string& dir);
std::string state_path(const std::string& dir);
std::string summary_path(const std::string& dir);
std::string known_set_path(const std::string& dir);
std::string compile_cache_dir(const std::string& dir);
std::string corpus_path(const std::string& dir);

// findings/X.json -> findings/X.min.json (a path or a bare file name).
std::string minimized_name(const std::string& finding);
// findings/X.min.json -> findings/X.json.
std::string finding_of_minimized(const std::string& minimized);
bool is_minimized(const std::string& path);
// The temporary of an atomic write in progress (or left by a kill): never a finding.
bool is_temporary(const std::string& path);
// A finding file: X.json, neither minimized nor a temporary.
bool is_finding_file(const std::string& path);
// The finding files in a findings directory, sorted (empty when it does not exist).
std::vector<std::string> finding_files(const std::string& findings);

// Writes a file of the directory atomically; throws OutputError.
void write(const std::string& path, const std::string& text);

// The summary one campaign or one merge of shards writes: one schema, sorted keys, no times
// (two identical runs give identical bytes). Fields that are absent are left out.
struct Summary {
  std::optional<uint64_t> seed;
  std::optional<std::string> shard;          // "i/N" of a campaign
  std::optional<nlohmann::json> merged_shards;  // the shards a merge combined
  std::optional<std::vector<std::string>> backends;
  uint64_t cases = 0;
  std::map<std::string, int> findings_by_class;
  std::vector<std::string> signatures;  // sorted
  Coverage coverage;
  std::optional<std::map<std::string, uint64_t>> known_findings;
  std::optional<size_t> known_deviations;
  // A guided campaign's (absent for a blind one): its share, its mutants and their raises, and
  // the entries its corpus ends with.
  struct Guided {
    std::optional<double> mutation_share;  // absent in a merge
    GuidedCounts counts;
    size_t corpus_entries = 0;
  };
  std::optional<Guided> guided;
};
std::string summary_text(const Summary& s);
void write_summary(const std::string& dir, const Summary& s);
// Whether a parsed file is an object tagged with `format` (kSummaryFormat, kStateFormat, ...).
bool has_format(const nlohmann::json& j, const char* format);

// DIR/state.json as read (its bytes) and parsed, its format checked; throws std::runtime_error
// "--resume: PATH: why". Read once per --resume (campaign.h, read_saved_campaign).
struct StateFile {
  std::string bytes;
  nlohmann::json json;
};
StateFile read_state(const std::string& dir);
// How long the campaign in DIR has run over all its invocations (state.json's seconds), or
// nothing where DIR has no readable state (a merge's directory) or no time recorded.
std::optional<double> campaign_seconds(const std::string& dir);
void write_state(const std::string& dir, const nlohmann::json& state);

// The largest corpus.json read back: a slot's cases may carry large masks.
inline constexpr uint64_t kMaxCorpusBytes = uint64_t{256} << 20;
// DIR/corpus.json: written whole, tagged kCorpusFormat; read back as the corpus, or nothing where
// DIR has none. Throws std::runtime_error "PATH: why" for a damaged one.
void write_corpus(const std::string& dir, const GuidedCorpus& corpus);
std::optional<GuidedCorpus> read_corpus(const std::string& dir);

}  // namespace attnfuzz::rundir
