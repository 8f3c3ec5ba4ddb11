#pragma once
// The minimizer: shrinks a finding's case while its divergence signature still holds,
// with the generators' shrinkers (passed in, so the harness depends on interfaces only).
#include <functional>
#include <vector>

#include "campaign/repro.h"
#include "harness/backend.h"
#include "harness/differential.h"

namespace attnfuzz {

using CandidateFn = std::function<std::vector<Case>(const Case&)>;
using SizeFn = std::function<uint64_t(const Case&)>;

struct ShrinkReport {
  Case minimized;
  int steps = 0;     // accepted candidates
  int attempts = 0;  // predicate evaluations
  bool out_of_time = false;  // stopped by its time budget, not because no candidate kept the signature
  uint64_t size_before = 0, size_after = 0;
};

// Whether a minimization's time is spent: checked before each candidate, so a shrink stops with
// the smallest case found so far (none given: no limit).
using OutOfTime = std::function<bool()>;

// Greedy: takes the first candidate (smaller by `size`) for which `keeps` holds and repeats
// until none does, or until `out_of_time`. Deterministic for a given case and predicate.
ShrinkReport shrink(const Case& c, const std::function<bool(const Case&)>& keeps, const CandidateFn& candidates, const SizeFn& size,
                    int max_attempts = 5000, const OutOfTime& out_of_time = {});

// A judge: the findings a case produces now, in this process or in an isolated worker
// (campaign/campaign.h). The minimizer is one loop over whichever it is given.
using Judge = std::function<std::vector<Finding>(const Case&)>;

// Whether the judge must run the repeat checks (every backend twice, and a batch-invariant one
// once more inside a larger batch): only a nondeterminism or batch-variance finding needs them,
// whatever the finding's place in a case stream.
bool needs_determinism(const Signature& sig);
// Candidates a minimization may try: a death costs a whole watchdog per try, so fewer.
int minimize_attempts(const Signature& sig);
// Whether `judge` finds `sig` on `c`.
bool signature_holds(const Judge& judge, const Case& c, const Signature& sig);
// The judge that runs the differential here.
Judge in_process_judge(const std::vector<Backend*>& backends, const OracleSet& oracles, bool check_determinism);

// Shrinks a reproducer's case while `judge` still finds its signature; the result carries the
// finding as it shows on the minimized case and that case's input checksum.
Reproducer minimize(const Reproducer& r, const Judge& judge, const CandidateFn& candidates, const SizeFn& size,
                    ShrinkReport* report = nullptr, const OutOfTime& out_of_time = {});

}  // namespace attnfuzz
