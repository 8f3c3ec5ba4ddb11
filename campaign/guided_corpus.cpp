#include "campaign/guided_corpus.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "harness/case_json.h"
#include "harness/errors.h"
#include "harness/json_input.h"
#include "harness/rng.h"

namespace attnfuzz {
using nlohmann::json;

std::map<CorpusSlot, double> slot_ratios(const std::vector<RunOutcome>& runs) {
  std::map<CorpusSlot, double> out;
  for (const RunOutcome& r : runs) {
    if (r.outcome != Outcome::ran) continue;
    for (size_t i = 0; i < r.limit_ratios.size() && i < r.tensors.size(); ++i) {
      double& best = out[CorpusSlot{r.backend, r.tensors[i]}];
      best = std::max(best, r.limit_ratios[i]);
    }
  }
  return out;
}

bool GuidedCorpus::insert(const CorpusSlot& slot, const CorpusEntry& e) {
  std::vector<CorpusEntry>& v = slots_[slot];
  const auto same = std::find_if(v.begin(), v.end(), [&](const CorpusEntry& x) { return x.c == e.c; });
  if (same != v.end()) {
    if (same->ratio >= e.ratio) return false;
    v.erase(same);
  }
  if (v.size() >= kSlotSize && v.back().ratio >= e.ratio) return false;
  // Highest first; among equals the earlier case first, so the order does not depend on arrival.
  const auto at = std::find_if(v.begin(), v.end(), [&](const CorpusEntry& x) {
    return x.ratio < e.ratio || (x.ratio == e.ratio && x.index > e.index);
  });
  v.insert(at, e);
  if (v.size() > kSlotSize) v.pop_back();
  return true;
}

bool GuidedCorpus::offer(const Case& c, int64_t index, const std::map<CorpusSlot, double>& ratios) {
  bool entered = false;
  for (const auto& [slot, ratio] : ratios)
    if (ratio > 0 && ratio <= 1 && std::isfinite(ratio)) entered = insert(slot, CorpusEntry{c, ratio, index}) || entered;
  return entered;
}

std::optional<CorpusParent> GuidedCorpus::pick(uint64_t draw) const {
  if (slots_.empty()) return std::nullopt;
  auto slot = slots_.begin();
  std::advance(slot, static_cast<long>(draw % slots_.size()));
  const std::vector<CorpusEntry>& v = slot->second;
  const uint64_t second = splitmix64(draw);
  const size_t i = second % 2 == 0 ? 0 : static_cast<size_t>((second >> 1) % v.size());
  return CorpusParent{slot->first, v[i]};
}

size_t GuidedCorpus::entries() const {
  size_t n = 0;
  for (const auto& [slot, v] : slots_) n += v.size();
  return n;
}

json GuidedCorpus::to_json() const {
  json slots = json::array();
  for (const auto& [slot, v] : slots_) {
    json entries = json::array();
    for (const CorpusEntry& e : v) entries.push_back({{"ratio", e.ratio}, {"index", e.index}, {"case", attnfuzz::to_json(e.c)}});
    slots.push_back({{"backend", slot.backend}, {"tensor", name_of(slot.tensor)}, {"entries", entries}});
  }
  return {{"slots", slots}, {"mutants", counts.mutants}, {"raised", counts.raised}, {"steered", counts.steered}};
}

GuidedCorpus GuidedCorpus::from_json(const json& j) {
  GuidedCorpus c;
  c.counts.mutants = count_at(j, "mutants", "");
  c.counts.raised = count_at(j, "raised", "");
  c.counts.steered = count_at(j, "steered", "");  // absent from a corpus written before steering built cases
  for (const json& s : j.at("slots")) {
    const std::string tensor = s.at("tensor").get<std::string>();
    const std::optional<TensorId> t = output_from_name(tensor);
    if (!t) throw std::invalid_argument("slots: unknown tensor '" + message_safe(tensor, 40) + "'");
    const CorpusSlot slot{s.at("backend").get<std::string>(), *t};
    for (const json& e : s.at("entries")) {
      const double ratio = e.at("ratio").get<double>();
      if (!(ratio > 0 && ratio <= 1)) throw std::invalid_argument("slots: a ratio outside (0, 1]");
      // Checked against the memory budget where it runs, as a worker's request is.
      c.insert(slot, CorpusEntry{case_from_json(e.at("case"), kNoMemoryBudget), ratio, e.at("index").get<int64_t>()});
    }
  }
  return c;
}

void GuidedCorpus::add(const GuidedCorpus& other) {
  for (const auto& [slot, v] : other.slots_)
    for (const CorpusEntry& e : v) insert(slot, e);
  counts.add(other.counts);
}

}  // namespace attnfuzz
