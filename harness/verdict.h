#pragma once
// Verdicts: per tensor, the error against float64, the tolerance bound, a precision
// fingerprint; and the findings, each with its divergence signature (DESIGN.md,
// "Oracles and verdicts").
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "harness/contract.h"
#include "harness/metrics.h"
#include "harness/tolerance.h"

namespace attnfuzz {

enum class FindingClass {
  mismatch,            // error beyond the tolerance, not explained by a coarser contract
  contract_violation,  // error matches a coarser contract than the declared one (e.g. tf32 for fp32)
  nan_inf,             // NaN or Inf where the reference is finite
  semantic,            // fully masked rows not following the convention (O = 0, LSE = -inf, no gradient)
  nondeterministic,    // two runs on the same inputs differ bitwise
  unwritten,           // output elements left holding the harness's poison
  consistency,         // two backends with the same contract compute at different precisions
  backend_error,       // the backend failed on a case it said it supports
  crash,               // the worker died (signal, abort)
  timeout,             // the worker hung past the watchdog
};
std::string to_string(FindingClass c);
std::optional<FindingClass> finding_class_from_string(const std::string& s);

struct Signature {
  std::string backend, composition, tensor;
  FindingClass cls = FindingClass::mismatch;
  std::string dtype, mask;
  std::string to_string() const;  // backend/composition/tensor/class/dtype/mask
  bool operator==(const Signature&) const = default;
  auto operator<=>(const Signature&) const = default;
};

struct Finding {
  Signature signature;
  std::string detail;
  std::map<std::string, double> metrics;
};

// Precision fingerprint: which contract of the ladder an error looks like.
struct Fingerprint {
  std::string label;  // a contract name, "exact", "finer" (than the finest rung) or "coarser" (than any)
  std::optional<Contract> rung;
};
// `rung_errors`: RMS error of the emulation under each ladder contract, finest first.
Fingerprint fingerprint(double impl_rms, const std::vector<std::pair<Contract, double>>& rung_errors, double band);

struct TensorVerdict {
  std::string tensor;
  ErrorStats err, baseline;
  double bound_rms = 0, bound_max = 0;
  Fingerprint print;
  bool compared = true;  // false: not produced by this backend (LSE without one)
  bool pass = true;
};

// The scale the floor multiplies: the magnitude of the terms behind the tensor
// (rms and max over elements) and the storage type's smallest subnormal.
struct FloorScale {
  double rms = 0, max = 0, tiny = 0;
  double sens_rms = 0, sens_max = 0, sens_u = 0;  // score-sensitivity terms at the accumulation precision
};
// Applies the rule; `u` is the unit roundoff of the tensor's storage type.
TensorVerdict judge_tensor(const std::string& name, const ErrorStats& impl, const ErrorStats& baseline, double u,
                           const FloorScale& scale, const ToleranceRule& rule);

}  // namespace attnfuzz
