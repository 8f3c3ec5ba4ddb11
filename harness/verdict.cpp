#include "harness/verdict.h"

#include <cmath>
#include <limits>

namespace attnfuzz {

std::string to_string(FindingClass c) {
  switch (c) {
    case FindingClass::mismatch: return "mismatch";
    case FindingClass::contract_violation: return "contract_violation";
    case FindingClass::nan_inf: return "nan_inf";
    case FindingClass::semantic: return "semantic";
    case FindingClass::nondeterministic: return "nondeterministic";
    case FindingClass::unwritten: return "unwritten";
    case FindingClass::consistency: return "consistency";
    case FindingClass::backend_error: return "backend_error";
    case FindingClass::crash: return "crash";
    case FindingClass::timeout: return "timeout";
  }
  return "?";
}

std::optional<FindingClass> finding_class_from_string(const std::string& s) {
  for (int i = 0; i <= static_cast<int>(FindingClass::timeout); ++i)
    if (to_string(static_cast<FindingClass>(i)) == s) return static_cast<FindingClass>(i);
  return std::nullopt;
}

std::string Signature::to_string() const {
  return backend + "/" + composition + "/" + tensor + "/" + attnfuzz::to_string(cls) + "/" + dtype + "/" + mask;
}

Fingerprint fingerprint(double impl_rms, const std::vector<std::pair<Contract, double>>& rung_errors, double band) {
  if (rung_errors.empty()) return {"?", std::nullopt};
  const double finest = rung_errors.front().second, coarsest = rung_errors.back().second;
  if (impl_rms == 0.0 && finest == 0.0) return {"exact", std::nullopt};
  if (coarsest > 0 && impl_rms > band * coarsest) return {"coarser", std::nullopt};
  if (finest > 0 && impl_rms * band < finest) return {"finer", std::nullopt};
  // Nearest rung in log space.
  double best = std::numeric_limits<double>::infinity();
  std::optional<Contract> rung;
  const double li = std::log(std::max(impl_rms, 1e-300));
  for (const auto& [c, e] : rung_errors) {
    const double d = std::fabs(li - std::log(std::max(e, 1e-300)));
    if (d < best) best = d, rung = c;
  }
  return {std::string(to_string(*rung)), rung};
}

TensorVerdict judge_tensor(const std::string& name, const ErrorStats& impl, const ErrorStats& baseline, double u,
                           const FloorScale& scale, const ToleranceRule& rule) {
  TensorVerdict v;
  v.tensor = name;
  v.err = impl;
  v.baseline = baseline;
  v.bound_rms = rule.c_rms * baseline.rms + rule.floor_units * (u * scale.rms + scale.sens_u * scale.sens_rms + scale.tiny);
  v.bound_max = rule.c_max * baseline.max_abs + rule.floor_units * (u * scale.max + scale.sens_u * scale.sens_max + scale.tiny);
  v.pass = impl.nonfinite_mismatch == 0 && impl.rms <= v.bound_rms && impl.max_abs <= v.bound_max;
  return v;
}

}  // namespace attnfuzz
