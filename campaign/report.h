#pragma once
// `attnfuzz report RUN_DIR`: one self-contained HTML page (inline CSS and SVG, no network):
// the summary, the findings table, and for each finding its minimized case, the replay
// command, and pictures: the error histogram against the tolerance, and the error profile
// along the sequence and along the head dimension (where the error lives).
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "campaign/repro.h"
#include "harness/backend.h"

namespace attnfuzz {

struct ErrorProfile {
  std::vector<double> abs_errors;   // every element of the diverging tensor
  std::vector<double> by_position;  // max error per sequence position (q for O/LSE/dQ, kv for dK/dV)
  std::vector<double> by_feature;   // max error per head-dimension index
  double bound_max = 0;             // the tolerance rule's bound on the max error
  std::string tensor;
};

// What the report needs from the layers above to re-run a finding for its pictures: the
// backend the finding blames, loaded from the reproducer's backend names (throws, with the
// reason, when it cannot be loaded here), and the float64 reference.
struct ReportServices {
  std::function<std::unique_ptr<Backend>(const Reproducer&)> load_blamed;
  std::function<std::unique_ptr<Backend>()> reference;
  // Each re-run happens in a forked child (harness/isolated_call.h) given this many seconds: a
  // backend that crashes or hangs there costs its finding's pictures, not the report. 0: in
  // this process (tests of the pictures themselves).
  double rerun_timeout_s = 300;
};

// The finding's error tensor against the reference, re-run here. Nothing, with the reason in
// `why`, for crashes, timeouts, findings about no tensor, or a re-run that fails, crashes or
// runs past services.rerun_timeout_s.
std::optional<ErrorProfile> error_profile(const Reproducer& r, const ReportServices& services, std::string* why);

// Writes RUN_DIR/report.html; returns its path. A finding file that cannot be read (damaged or
// edited after it was written) is left out of the report with a banner saying so, and one line
// per file is added to `left_out` (as merge warns about the same files).
std::string write_report(const std::string& run_dir, const ReportServices& services, std::vector<std::string>* left_out = nullptr);

}  // namespace attnfuzz
