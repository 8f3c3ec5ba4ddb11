#pragma once
// Cases aimed at the backends under test (docs/fuzzing.md, "Aimed cases"), from their support
// envelopes (harness/envelope.h).
//
//   case g of a campaign aims at target t = targets[g mod n], the backends under test in the
//   order given, so each gets an equal share of the stream. It starts as random_case's draw for g
//   (every field as varied as the blind mix), then, from a stream of its own:
//     with probability edge_share, and where t's envelope leaves a clause that a case can break
//     (every clause but grid) to the library, it is fitted inside and then put just past the edge
//     of one such clause, chosen uniformly (step_outside: an unaligned row, a head dim of 8k +- 1
//     or past the largest, an LSE not packed, GQA, ...): reject or correct.
//     An enforced clause gets no edge: the adapter refuses such a call before any library sees it;
//     otherwise it is fitted inside every clause (fit_inside).
//   A target whose envelope restricts nothing gets the blind draw unchanged.
//   Last, the shape fits the memory budget (fit_budget).
//
// fit_inside changes as little as it can: a dtype, head dim or length outside is replaced, a
// softcap dropped, a mask the envelope does not take becomes none or causal (and then only
// compositions whose every call keeps it, none for causal), layouts move onto the alignment, the
// LSE is packed. Every call of the fitted case's composition is inside the envelope
// (tests/test_envelope.cpp holds that on random cases).
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "generators/random_case.h"
#include "harness/envelope.h"
#include "harness/feature_cell.h"

namespace attnfuzz {

// A backend under test as the case mix sees it.
struct CaseTarget {
  std::string backend;
  SupportEnvelope envelope;
  bool on_gpu = false;
};

// What a run of a case of this shape keeps in host memory (harness/case.h, HostWork): where the
// campaign's workers will judge it. Unset: everything counts (HostWork{}).
using HostWorkOf = std::function<HostWork(const Shape&)>;

struct CaseMix {
  RandomCaseOptions gen;
  std::vector<CaseTarget> targets;  // empty: every case blind
  double edge_share = 0.12;
  uint64_t memory_budget_bytes = uint64_t{8} << 30;
  HostWorkOf host_work;
};

// The default share of cases just outside an envelope.
inline constexpr double kDefaultEdgeShare = 0.12;

Case fit_inside(Case c, const SupportEnvelope& e, const RandomCaseOptions& opt, SplitMix& r);
// Clauses a generated case is put just outside of: those `e` restricts and leaves to the
// library, but grid.
std::vector<EnvelopeClause> breakable_clauses(const SupportEnvelope& e);
// fit_inside, then `clause` broken just past its edge (the clause must be breakable).
Case step_outside(Case c, const SupportEnvelope& e, EnvelopeClause clause, const RandomCaseOptions& opt, SplitMix& r);
// Halves B, then Hkv, then the group, while the host estimate for the work of its shape
// (host_work; unset: everything) is over the budget.
Case fit_budget(Case c, uint64_t budget_bytes, const HostWorkOf& host_work = {});

// A case of `cell` (harness/feature_cell.h) that runs inside envelope e through the cell's
// composition, for a guided campaign's steering toward the cells thinnest for a backend
// (campaign/campaign.h). Built from `drawn`, deterministic in (drawn, seed):
//   dtype        the cell's
//   head dim     max(Dqk, Dv) drawn in the cell's class, on the envelope's step, up to the tier's
//                largest and the envelope's (Dv below Dqk a quarter of the time, where e takes both)
//   mask         none; causal (top-left over a square call where e takes causal or none, else either
//                alignment); a sliding window; a structured mask (random_mask's draws until one is)
//   composition  single; a query split at 1 to 3 interior rows; merged: a key split at 1 to 3
//                interior keys (each part at least e.min_seq_kv long), or for a window mask, half
//                the time, the band and the rest (mask_partition)
//   causal split where e takes causal only on square calls: the one shape whose parts all are
//                inside, a tall top-left causal case (Sq > Skv) cut at row Skv: the first part is
//                square causal and the rest sees every key (for merged, that rest is cut at a key).
//                Its single call breaks the mask clause: reject or correct where the library decides.
// then fitted inside every other clause (fit_inside), into the tier's lengths and the memory
// budget, and validated. Nothing when the cell is outside e, or none of kCellTries builds lands in it.
inline constexpr int kCellTries = 8;
std::optional<Case> case_in_cell(const Case& drawn, const FeatureCell& cell, const SupportEnvelope& e, const CaseMix& mix,
                                 uint64_t seed);

// A drawn case, the index-th of its stream, aimed as the mix says (formula above).
AimedCase aim_case(Case drawn, uint64_t index, const CaseMix& mix);
// The index-th case of a campaign's stream under the mix: campaign_case's draw, aimed.
AimedCase aimed_campaign_case(uint64_t seed, uint64_t index, const CaseMix& mix);

}  // namespace attnfuzz
