#pragma once
// `attnfuzz report RUN_DIR`: one self-contained HTML page (inline CSS and SVG, no network):
// the summary, the findings table, and for each finding its minimized case, the replay
// command, and pictures: the error histogram against the tolerance, and the error profile
// along the sequence and along the head dimension (where the error lives).
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "campaign/repro.h"

namespace attnfuzz {

struct ErrorProfile {
  std::vector<double> abs_errors;   // every element of the diverging tensor
  std::vector<double> by_position;  // max error per sequence position (q for O/LSE/dQ, kv for dK/dV)
  std::vector<double> by_feature;   // max error per head-dimension index
  double bound_max = 0;             // the tolerance rule's bound on the max error
  std::string tensor;
};

// Re-runs a finding to get its error tensor; nothing for crashes, timeouts or on failure.
using ProfileFn = std::function<std::optional<ErrorProfile>(const Reproducer&)>;

// Writes RUN_DIR/report.html; returns its path.
std::string write_report(const std::string& run_dir, const ProfileFn& profile);

}  // namespace attnfuzz
