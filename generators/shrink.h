#pragma once
// Shrinking a Case toward the simplest problem that still shows a finding: B = H = 1,
// small Sq/Skv/D (never below generators/domain.h's floor), simpler masks, a single call,
// fp32, plain values, the default layouts (all, unpacked, one tensor at a time). Every candidate is
// valid (masks and compositions are refitted to the new sizes). The same candidates
// serve RapidCheck's shrinking (generators/rc_case.h) and `attnfuzz minimize`.
#include <string>
#include <vector>

#include "harness/case.h"

namespace attnfuzz {

// Simpler variants of c, most aggressive first, each passing validate().
std::vector<Case> shrink_candidates(const Case& c);
// Refits a mask / composition to new sizes (document segments, block rows, cut points).
MaskExpr fit_mask(const MaskExpr& m, int64_t sq, int64_t skv);
Composition fit_composition(const Composition& c, int64_t sq, int64_t skv);
// A size measure that every accepted step strictly decreases (for reports and termination).
uint64_t case_size(const Case& c);

}  // namespace attnfuzz
