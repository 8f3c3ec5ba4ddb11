#pragma once
// Known deviations: reproducers of findings already triaged (docs/findings/repro/). A campaign
// given them (`--known PATH`) counts a finding they cover as known instead of recording it as
// new, so a new bug does not drown among re-findings of an old one.
//
// A known deviation covers a finding when
//   - the finding's bucket matches its pattern: backend/composition/tensor/class, each field
//     the reproducer's own, "*" (any) or alternatives "a|b", and
//   - the finding's case meets its predicate (every case, when it has none).
// Both come from the reproducer's optional "known" object (triage metadata, added after the
// finding was recorded, so outside its record_checksum):
//
//   "known": {"id": "F-1",
//             "covers": {"backend": "torch.cudnn|torch.sdpa.cudnn", "composition": "*", "tensor": "*", "class": "*"},
//             "when": "unaligned_rows(16)"}
//
// Without it the id is the file's stem, the pattern the reproducer's own bucket, and the
// predicate "always". Predicates are terms joined by " and ":
//   unaligned_rows(N)   in some call of the case's composition, an input (Q, K, V, dO) has a batch,
//                       head or row stride or an offset that is not a multiple of N bytes (a view of a
//                       padded buffer, say; a part a packing does not fit takes each tensor's own layout)
//   masked_rows         some call of the case's composition has a query row with no visible key
//   head_dims_differ    Dqk != Dv
//   bias_broadcast_kv   a score bias tensor broadcast over the keys ([B|1][H|1][Sq|1][1])
//   dtype(a|b|...)      the case's dtype is one of these (fp32, fp16, bf16)
//   always
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "campaign/repro.h"
#include "harness/case.h"

namespace attnfuzz {

using CasePredicate = std::function<bool(const Case&)>;

// The format of a campaign's copy of its known set (OUT/known.json).
inline constexpr const char* kKnownSetFormat = "attnfuzz-known-set/1";
// The size limit of that copy. It holds every --known reproducer whole, each up to the input
// limit (harness/json_input.h), so it may be larger than any one input: a campaign must be able
// to resume its own file (two 9 MiB reproducers make a 19 MiB known.json). A campaign whose set would be larger is refused before it starts.
inline constexpr uint64_t kMaxKnownSetBytes = uint64_t{256} << 20;

// Throws std::invalid_argument, naming the term, for a predicate it cannot parse.
CasePredicate parse_case_predicate(const std::string& text);

struct KnownDeviation {
  std::string id, path;
  std::string source;  // the reproducer file's JSON, as loaded (a campaign's snapshot keeps it)
  Reproducer repro;
  // The bucket it covers, as spelled in the file: "*" matches any, "a|b" either.
  struct Pattern {
    std::string backend, composition, tensor;
  } pattern;
  bool any_class = false;
  std::vector<FindingClass> classes;  // covers.class: "*" (any_class), one class or "a|b|c"
  std::string when;  // the predicate's text ("always" when none)
  CasePredicate predicate;

  bool covers(const Reproducer& finding) const;
};

class KnownFindings {
 public:
  // Every reproducer in these files and directories (recursively, *.json; minimized ones
  // included). Throws std::runtime_error naming the file that is not a usable reproducer.
  static KnownFindings load(const std::vector<std::string>& paths);
  // A campaign's own copy of the set (OUT/known.json): every deviation's reproducer, whole, so a
  // resumed campaign counts exactly what the first run counted, wherever it is resumed from and
  // whatever happened to the files since. from_snapshot throws std::runtime_error naming what
  // is wrong.
  std::string snapshot_json() const;
  static KnownFindings from_snapshot(const std::string& text);
  // The first known deviation covering the finding, or nullptr.
  const KnownDeviation* covering(const Reproducer& finding) const;
  const std::vector<KnownDeviation>& all() const { return known_; }
  bool empty() const { return known_.empty(); }

 private:
  std::vector<KnownDeviation> known_;
};

}  // namespace attnfuzz
