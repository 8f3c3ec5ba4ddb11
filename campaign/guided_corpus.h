#pragma once
// The corpus of a guided campaign (docs/campaigns.md, "Guided campaigns"): per backend and
// output tensor (a slot), the passing cases whose worst block came closest to its limit, as the
// ratio of that block's error statistic over its limit (RunOutcome::limit_ratios; 1 is the
// limit), at most kSlotSize per slot, the highest first. A case's ratio in a slot is the largest
// over the compositions it ran through.
//
// A case enters every slot where it passed (ratio <= 1) above the slot's weakest entry, or where
// the slot is not full; a case already there keeps its higher ratio. A mutant (campaign.h,
// CampaignOptions::mutation_share) raises its parent's slot when its ratio there is above the
// parent's, a failure included. Saved in the campaign directory (campaign/run_dir.h,
// corpus.json) with the counts of mutants and raises, read back by --resume, and unioned by a
// merge of shards (the best kSlotSize of every slot, the counts summed).
#include <cstdint>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "campaign/coverage.h"
#include "harness/case.h"
#include "harness/tensors.h"

namespace attnfuzz {

struct CorpusSlot {
  std::string backend;
  TensorId tensor = TensorId::O;
  auto operator<=>(const CorpusSlot&) const = default;
};

struct CorpusEntry {
  Case c;
  double ratio = 0;    // the worst block's statistic over its limit, in the slot
  int64_t index = -1;  // the global case index that found it
};

// What a guided campaign counts (summary.json's "guided").
struct GuidedCounts {
  uint64_t mutants = 0;  // cases drawn by mutating a corpus entry
  uint64_t raised = 0;   // of those, the ones whose ratio in the parent's slot went above the parent's
  uint64_t steered = 0;  // cases built for a feature cell thin for a backend (campaign.h, "Guided campaigns")
  void add(const GuidedCounts& o) {
    mutants += o.mutants;
    raised += o.raised;
    steered += o.steered;
  }
};

// A parent drawn from the corpus.
struct CorpusParent {
  CorpusSlot slot;
  CorpusEntry entry;
};

// Per slot, the largest ratio of the runs that ran through it (failures included).
std::map<CorpusSlot, double> slot_ratios(const std::vector<RunOutcome>& runs);

class GuidedCorpus {
 public:
  static constexpr size_t kSlotSize = 8;

  // A judged case's runs: every slot it passed in takes it as above. Returns whether any did.
  bool offer(const Case& c, int64_t index, const std::map<CorpusSlot, double>& ratios);
  // A parent for a mutant, from a uniform draw: a slot uniformly, then its best entry half the
  // time, else any entry uniformly. Nothing while the corpus is empty.
  std::optional<CorpusParent> pick(uint64_t draw) const;
  bool empty() const { return slots_.empty(); }
  size_t entries() const;
  const std::map<CorpusSlot, std::vector<CorpusEntry>>& slots() const { return slots_; }

  GuidedCounts counts;

  // corpus.json's body (campaign/run_dir.h wraps and tags it) and back; from_json throws
  // std::invalid_argument or a json error on a damaged file.
  nlohmann::json to_json() const;
  static GuidedCorpus from_json(const nlohmann::json& j);
  // The union: every slot's best kSlotSize of both, the counts summed (a merge of shards).
  void add(const GuidedCorpus& other);

 private:
  bool insert(const CorpusSlot& slot, const CorpusEntry& e);
  std::map<CorpusSlot, std::vector<CorpusEntry>> slots_;
};

}  // namespace attnfuzz
