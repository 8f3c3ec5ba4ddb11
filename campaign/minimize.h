#pragma once
// The minimizer: shrinks a finding's case while its divergence signature still holds,
// with the generators' shrinkers (passed in, so the harness depends on interfaces only).
#include <functional>
#include <vector>

#include "harness/backend.h"
#include "harness/differential.h"
#include "campaign/repro.h"

namespace attnfuzz {

using CandidateFn = std::function<std::vector<Case>(const Case&)>;
using SizeFn = std::function<uint64_t(const Case&)>;

struct ShrinkReport {
  Case minimized;
  int steps = 0;     // accepted candidates
  int attempts = 0;  // predicate evaluations
  uint64_t size_before = 0, size_after = 0;
};

// Greedy: takes the first candidate (smaller by `size`) for which `keeps` holds and repeats
// until none does. Deterministic for a given case and predicate.
ShrinkReport shrink(const Case& c, const std::function<bool(const Case&)>& keeps, const CandidateFn& candidates,
                    const SizeFn& size, int max_attempts = 5000);

// Whether running `c` through `backends` still produces a finding with this signature.
bool signature_holds(const Case& c, const Signature& sig, const std::vector<Backend*>& backends, const OracleSet& oracles);

// Minimizes a reproducer; the result carries the finding as it shows on the minimized case.
Reproducer minimize(const Reproducer& r, const std::vector<Backend*>& backends, const OracleSet& oracles,
                    const CandidateFn& candidates, const SizeFn& size, ShrinkReport* report = nullptr);

}  // namespace attnfuzz
