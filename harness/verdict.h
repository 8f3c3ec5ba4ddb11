#pragma once
// Verdicts: per tensor, the error against float64, the tolerance bound, a precision
// fingerprint; and the findings, each with its divergence signature (docs/verdicts.md,
// "Findings and their classes"; docs/semantics.md, "Numerics contracts and precision fingerprints").
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
  out_of_bounds,       // the backend wrote into an input, or outside its outputs' elements
  crash,               // the worker died (signal, abort)
  timeout,             // the worker hung past the watchdog
};
std::string to_string(FindingClass c);
std::optional<FindingClass> finding_class_from_string(const std::string& s);

struct Signature {
  // What a finding about no tensor (a backend error, a death) or no composition (a death) or
  // no mask (a death: one finding per dtype, not per mask) records in that field.
  static constexpr const char* kNoTensor = "-";
  static constexpr const char* kNoComposition = "-";
  static constexpr const char* kAnyMask = "-";
  std::string backend, composition, tensor;
  FindingClass cls = FindingClass::mismatch;
  std::string dtype, mask;
  std::string to_string() const;  // backend/composition/tensor/class/dtype/mask
  // A consistency finding blames a pair, spelled "a~b" in `backend`: the one place that knows it.
  static std::string pair(const std::string& a, const std::string& b) { return a + "~" + b; }
  // The backends the finding is about: one, or the two of a consistency pair.
  std::vector<std::string> blamed_backends() const;
  bool names_a_tensor() const { return tensor != kNoTensor; }
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
  double rung_rms = 0;  // the (floored) error of that rung
  // The coarsest rung's error over the finest's: how far apart this tensor's ladder puts the
  // precisions at all. Below the band the rungs cannot be told apart here (a bf16 output's own
  // rounding can dominate every rung), and a label is a coin toss between near-equal numbers.
  double spread = 1;
};
// `rung_errors`: RMS error of the emulation under each ladder contract, finest first, floored
// by floor_rungs.
Fingerprint fingerprint(double impl_rms, const std::vector<std::pair<Contract, double>>& rung_errors, double band);

// A rung's error is one sample: where the naive computation happens to be accurate (ties, exact
// sums, lucky cancellation) it understates the rung, and a correct kernel's ordinary error
// reads as a coarser rung's (or `coarser`). So each rung is taken as at least
//   contract_floor  for rungs at least as coarse as the declared contract: the differential
//                   passes kappa_min times the error model's RMS for that contract (the floor
//                   sigma' has, which a coarser computation also reaches);
//   storage_floor   for finer rungs: the differential passes the error of storing the
//                   reference in fp32 (2^-24 rms(ref) / sqrt(3)), which no fp32 computation
//                   that rounds its result escapes.
std::vector<std::pair<Contract, double>> floor_rungs(std::vector<std::pair<Contract, double>> rung_errors, Contract declared,
                                                     double contract_floor, double storage_floor);

// The block of a tensor whose error statistic came closest to (or went furthest past)
// its limit (harness/tolerance.h).
struct WorstBlock {
  std::string granularity;  // "element", "row", "tile", "head" or "tensor"
  std::string where;        // e.g. "b0 h1 s37" or "b0 h1 s16-31 d0-15"
  double ratio = 0;         // sqrt(sum err^2 / sum sigma'^2) over the block
  double limit = 0;         // c * (1 + k / sqrt(dof))
  double n = 0;             // elements in the block
  double dof = 0;           // their independent errors (harness/error_model.h): n, or fewer where rows share sources
};

struct TensorVerdict {
  std::string tensor;
  ErrorStats err, baseline;
  double bound_rms = 0;     // the whole-tensor test in error units: limit(N) * rms(sigma')
  double bound_max = 0;     // the per-element bound at the element with the largest error
  double kappa = 0;         // the error model's scale fitted on the baselines
  double model_rms = 0;     // rms of the error model's sigma (unscaled) over the judged elements
  double tensor_ratio = 0;  // sqrt(sum err^2 / sum sigma'^2) over the whole tensor
  WorstBlock worst;
  // The largest ratio / limit per granularity (element, row, tile, head, tensor): the
  // margin a correct backend leaves, for calibration (bench/calibrate_rule).
  std::map<std::string, double> margin;
  Fingerprint print;
  bool compared = true;  // false: not produced by this backend (LSE without one)
  bool pass = true;
};

// What judging one tensor needs, all shaped alike ([B][H][S][D] or [B][H][S]).
struct JudgeInput {
  const Tensor* impl = nullptr;
  const Tensor* ref = nullptr;                      // float64
  const Tensor* baseline_fwd = nullptr;             // the two naive computations
  const Tensor* baseline_rev = nullptr;             // under the declared contract
  const Tensor* sigma = nullptr;                    // the error model (may be null: baselines only)
  const std::vector<uint8_t>* skip_rows = nullptr;  // rows left out (fully masked)
  const Tensor* row_dof = nullptr;                  // per row: its independent errors (may be null: every element)
  double tiny = 0;                                  // the storage type's smallest subnormal
  // The relative variance of a scale error shared by a whole row from its fp32 (accumulation
  // precision) quantities, u_acc^2 L: the row projection's floor (verdict.cpp, row_projection).
  double row_scale_variance = 0;
};
// Applies the rule of harness/tolerance.h.
TensorVerdict judge_tensor(const std::string& name, const JudgeInput& in, const ToleranceRule& rule);

}  // namespace attnfuzz
