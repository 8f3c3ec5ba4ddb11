#pragma once
// What a campaign really tested: per backend and per composition class, how many cases ran,
// were skipped (grouped by reason) or errored. A campaign whose backend declined every case
// must not look like a clean run, so these counts go into the progress line, summary.json,
// the HTML report and check's JUnit, and a backend that ran nothing is called out.
//
// The unit is a case. For one backend and one case, each composition it was put through
// (the single call, the case's composition) has an outcome; the backend's outcome for the
// case is `errored` if any composition errored, else `ran` if any ran, else `skipped`.
// A worker that died on a case (crash, hang) counts as `errored` for the backend it was
// running, composition "-"; the other backends of that case are not counted.
//
// Cases are judged or unjudged. A case is judged when some backend ran to the end of some
// composition and was compared against the reference, or when it killed or hung the worker
// (a crash or timeout finding is a verdict). It is unjudged when no backend ran (every one
// skipped or failed with an error) or when the worker could not judge it at all. Throughput
// is judged cases per second: a stream of cases nothing ran is no progress.
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "harness/differential.h"
#include "harness/envelope.h"

namespace attnfuzz {

enum class Outcome { ran, skipped, errored };

// One backend through one composition of one case.
struct RunOutcome {
  std::string backend;
  CompositionClass composition = CompositionClass::single;
  Outcome outcome = Outcome::ran;
  std::string reason;                // why it was skipped or what the error was
  std::vector<TensorId> tensors;  // ran: the outputs it returned and that were judged (O, LSE, ...)
  // Per tensors[i]: its worst block's error statistic over that block's limit (harness/verdict.h,
  // WorstBlock ratio / limit; above 1 the tensor fails), the signal guided campaigns climb
  // (campaign/guided_corpus.h). Empty from a worker that does not send it.
  std::vector<double> limit_ratios;
};

// The outcomes of one differential report, for the worker to send to its campaign.
// A skipped run with a backend_error finding of the same backend and composition errored.
std::vector<RunOutcome> run_outcomes(const DiffReport& r);
nlohmann::json to_json(const std::vector<RunOutcome>& runs);
std::vector<RunOutcome> run_outcomes_from_json(const nlohmann::json& j);

// Why a finding that did not show again was not tested (nothing when it was): `fixed` needs every
// backend the signature blames to have run the case to the end, through the signature's
// composition (every composition for a crash or hang), and to have returned the signature's
// tensor. A backend that errored, declined, was not loaded, or gave no such tensor tested nothing.
std::optional<std::string> why_untested(const Signature& sig, const std::vector<RunOutcome>& runs);

// A reason as a group key: first line, at most 160 characters, and every number that stands
// alone (not part of a name like fp16) replaced by '#', so "head_dim 72 not supported" and
// "head_dim 80 not supported" are one group.
std::string reason_group(const std::string& reason);

struct ReasonCount {
  uint64_t count = 0;
  std::string example;  // the smallest full reason of the group (deterministic under any scheduling)
};

struct CoverageCounts {
  uint64_t ran = 0, skipped = 0, errored = 0;
  std::map<std::string, ReasonCount> reasons;  // skip and error reasons by group
  uint64_t total() const { return ran + skipped + errored; }
  void add(Outcome o, const std::string& reason);
  void add(const CoverageCounts& other);
};

// How a target backend's cases were aimed (generators/envelope_cases.h): drawn inside its
// envelope, and how many of those it ran; drawn just outside one clause (by clause), and how
// many of those it ran (the library took them: reject or correct).
struct AimCounts {
  uint64_t inside = 0, inside_ran = 0, edge = 0, edge_ran = 0;
  std::map<std::string, uint64_t> edge_by_clause;
  void add(const AimCounts& other);
};

// Cases that held one of the values that break kernels (harness/case.h, ValueFeature), and how
// many of those were judged.
struct ValueCounts {
  uint64_t cases = 0, judged = 0;
};

class Coverage {
 public:
  // Lists a backend even if it never reports (it then ran nothing).
  void add_backend(const std::string& name);
  // One case's outcomes. `died` says the worker died running it (a crash or timeout finding
  // of the backend in `runs`): judged, though nothing ran to the end.
  void add_case(const std::vector<RunOutcome>& runs, bool died = false);
  // A case the worker could not judge at all (not any backend's doing): unjudged.
  void add_case_error(const std::string& reason) { case_errors_.add(Outcome::errored, reason); }
  void add(const Coverage& other);
  // How the case was aimed; after add_case of the same case, which says whether the target ran it.
  void add_aim(const AimedCase& aimed);
  // The case's breaking values; after add_case of the same case, which says whether it was judged.
  void add_values(const Case& c);
  // The case's feature cells and sides (campaign/feature_cells.h): per backend, the cell of each
  // composition it ran the case through to the end (the single call and the case's own: up to two
  // cells), and the sides once for a backend that ran any.
  void add_features(const Case& c, const std::vector<RunOutcome>& runs);
  // The cells a backend's envelope keeps every case out of, and why (the campaign sets them from
  // its backends' profiles): the map shows them apart, and thin_cells leaves them out.
  void set_outside_cells(const std::string& backend, const SupportEnvelope& envelope, bool returns_lse);

  const std::map<std::string, CoverageCounts>& backends() const { return backends_; }
  const std::map<std::string, AimCounts>& aims() const { return aims_; }
  uint64_t blind_cases() const { return blind_cases_; }
  const std::map<ValueFeature, ValueCounts>& values() const { return values_; }
  // Per backend, the judged cases of each feature cell it ran (cells it never ran are absent).
  const std::map<std::string, std::map<std::string, uint64_t>>& cells() const { return cells_; }
  // Per backend and side feature, the judged cases of each value.
  const std::map<std::string, std::map<std::string, std::map<std::string, uint64_t>>>& sides() const { return sides_; }
  const std::map<std::string, std::map<std::string, std::string>>& outside_cells() const { return outside_; }
  // "backend cell: n judged" for every cell inside a backend's envelope (every cell where the
  // campaign recorded none outside) that it ran in fewer than `min` cases, in the map's order.
  std::vector<std::string> thin_cells(uint64_t min) const;
  const std::map<std::string, std::map<std::string, CoverageCounts>>& compositions() const { return by_composition_; }
  const CoverageCounts& case_errors() const { return case_errors_; }
  uint64_t judged_cases() const { return judged_cases_; }
  // Cases in which no backend ran (every one skipped or errored); with case_errors().errored,
  // the unjudged cases.
  uint64_t no_backend_ran_cases() const { return no_backend_ran_; }
  uint64_t unjudged_cases() const { return no_backend_ran_ + case_errors_.errored; }
  // Backends that ran no case.
  std::vector<std::string> untested() const;
  // The most frequent skip/error reasons of a backend, most frequent first.
  std::vector<std::pair<std::string, ReasonCount>> top_reasons(const std::string& backend, size_t n) const;

  // "plugin.x 12/0/0, torch.math 10/2/0" (ran/skipped/errored per backend).
  std::string progress_text() const;
  // One line per untested backend: what happened and its top reasons.
  std::vector<std::string> warnings() const;

  // summary.json's "coverage" (top reasons only; the rest summed under "(other reasons)").
  nlohmann::json to_json(size_t top = 5) const;
  static Coverage from_json(const nlohmann::json& j);

 private:
  std::map<std::string, CoverageCounts> backends_;
  std::map<std::string, std::map<std::string, CoverageCounts>> by_composition_;
  CoverageCounts case_errors_;
  uint64_t judged_cases_ = 0, no_backend_ran_ = 0;
  std::map<std::string, AimCounts> aims_;
  uint64_t blind_cases_ = 0;
  std::map<ValueFeature, ValueCounts> values_;
  std::map<std::string, std::map<std::string, uint64_t>> cells_;
  std::map<std::string, std::map<std::string, std::map<std::string, uint64_t>>> sides_;
  std::map<std::string, std::map<std::string, std::string>> outside_;
};

const char* to_string(Outcome o);

}  // namespace attnfuzz
