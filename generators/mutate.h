#pragma once
// Error-guided mutation (docs/campaigns.md, "Guided campaigns"): a case near its limit on some
// backend, changed a little, to push that backend's error further. A mutant is one to three of
// these steps, each drawn with the weight given, from the seed alone:
//
//   shape     Sq, Skv or the head dim moved to a tile corner: the nearest multiple of 16, 64 or
//             128 (a tile no larger than the size itself, or 16, and a multiple up to the
//             tier's largest), plus 0, 0, +1 or -1: corners near the size, so that guidance
//             does not drift toward the largest (and slowest) cases                       (3)
//   relation  Sq and Skv swapped, or one of them moved so Sq > Skv, Sq < Skv or Sq = Skv (2)
//   layout    every tensor dense, every tensor its own random layout, or one tensor's offset
//             or row padding changed                                                      (1)
//   values    larger logits (large_logit, its sigma doubled), ties (near_constant, sigma 0),
//             outliers, one of the values that break kernels, or back to normal           (2)
//   compose   another composition, or none (half each, as the generator draws them)     (1)
//   mask      none, causal top-left or bottom-right, a sliding window, or any random mask (2)
//   dtype     another dtype the generator draws                                          (1)
//   extras    a softcap added or dropped, a dLSE added or dropped, the scale redrawn     (1)
//   reseed    new input values from the same distributions                               (1)
//
// A step that leaves the mask or the composition invalid for new lengths redraws the
// composition, then the mask. The mutant is then fitted inside the envelope it is meant for
// (generators/envelope_cases.h, fit_inside) and into the memory budget (fit_budget), and must
// validate; after kMutationTries mutants that do not, there is none.
#include <cstdint>
#include <optional>

#include "generators/envelope_cases.h"
#include "harness/case.h"
#include "harness/envelope.h"

namespace attnfuzz {

inline constexpr int kMutationTries = 8;

// A mutant of `parent` inside `envelope`, under the mix's generator bounds and memory budget;
// deterministic in (parent, seed). Nothing when no valid mutant came of kMutationTries tries.
std::optional<Case> mutate_case(const Case& parent, uint64_t seed, const SupportEnvelope& envelope, const CaseMix& mix);

}  // namespace attnfuzz
