#pragma once
// How the CLI shows what a campaign really tested (campaign/coverage.h): coverage lines on
// stdout and warnings on stderr, and check's JUnit tests per backend.
#include <vector>

#include "campaign/coverage.h"
#include "campaign/junit.h"

namespace attnfuzz::cli {

// Per backend: "coverage  NAME: R ran, S skipped, E errored (per composition class)" on
// stdout; then, loudly on stderr, every backend that ran nothing, with its top reasons.
void print_coverage(const Coverage& c);
// One JUnit test per backend (classname attnfuzz.check.coverage), failing when it ran no
// case, with its counts and top reasons as output; one for unjudged cases, if any.
std::vector<JUnitCase> coverage_junit_cases(const Coverage& c);

}  // namespace attnfuzz::cli
