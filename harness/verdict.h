#pragma once
// Verdicts: per tensor, the error against float64, the tolerance bound, a precision
// fingerprint; and the findings, each with its divergence signature (docs/verdicts.md,
// "Findings and their classes"; docs/semantics.md, "Numerics contracts and precision fingerprints").
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "harness/contract.h"
#include "harness/dtype.h"
#include "harness/metrics.h"
#include "harness/tensors.h"
#include "harness/tolerance.h"

namespace attnfuzz {

enum class FindingClass {
  mismatch,            // error beyond the tolerance, not explained by a coarser contract
  contract_violation,  // error matches a coarser contract than the declared one (e.g. tf32 for fp32)
  nan_inf,             // NaN or Inf where the reference is finite
  semantic,            // fully masked rows not following the convention (O = 0, LSE = -inf, no gradient)
  nondeterministic,    // two runs on the same inputs differ bitwise
  batch_variant,       // a backend that declares itself batch invariant gives other bits for the same
                       // problems inside a larger batch
  unwritten,           // output elements left holding the harness's poison
  consistency,         // two backends with the same contract compute at different precisions
  backend_error,       // the backend failed on a case it said it supports
  out_of_bounds,       // the backend wrote into an input, or outside its outputs' elements
  crash,               // the worker died (signal, abort)
  timeout,             // the worker hung past the watchdog
};
std::string to_string(FindingClass c);
std::optional<FindingClass> finding_class_from_string(const std::string& s);

// The composition part of a divergence signature: the single call, queries cut with no merge,
// or some LSE merge; `none` ("-") for a finding no composition owns (a worker's death).
enum class CompositionClass { none, single, q_split, merged };
std::string_view to_string(CompositionClass c);
std::optional<CompositionClass> composition_class_from_string(std::string_view s);

struct Signature {
  // What a finding about no mask (a death: one finding per dtype, not per mask) records there.
  static constexpr const char* kAnyMask = "-";
  std::string backend;
  CompositionClass composition = CompositionClass::none;
  std::optional<TensorId> tensor;  // none: a finding about no tensor (a backend error, a death)
  FindingClass cls = FindingClass::mismatch;
  DType dtype = DType::f32;
  std::string mask;               // the mask's kind (harness/mask.h signature_kind), or kAnyMask
  std::string to_string() const;  // backend/composition/tensor/class/dtype/mask
  // A consistency finding blames a pair, spelled "a~b" in `backend`: the one place that knows it.
  static std::string pair(const std::string& a, const std::string& b) { return a + "~" + b; }
  // The backends the finding is about: one, or the two of a consistency pair.
  std::vector<std::string> blamed_backends() const;
  bool names_a_tensor() const { return tensor.has_value(); }
  // The tensor's report name, or "-" for none: the reproducer's field, the bucket's part.
  std::string tensor_name() const { return tensor ? name_of(*tensor) : "-"; }
  bool operator==(const Signature&) const = default;
  auto operator<=>(const Signature&) const = default;
};

// What a finding measured, spelled by its name in a reproducer's "metrics": a failing
// tensor's error, bound, baseline, worst block and condition number (failure_metrics); a
// consistency pair's two errors; the elements never written; the masked rows that break the
// convention.
#define ATTNFUZZ_FINDING_METRICS(X)                                                                                    \
  X(rms) X(max_abs) X(bound_rms) X(bound_max) X(baseline_rms) X(baseline_max) X(worst_ratio) X(worst_limit) X(kappa) \
      X(rms_a) X(rms_b) X(count) X(rows)
enum class FindingMetric {
#define ATTNFUZZ_METRIC_ENUM(m) m,
  ATTNFUZZ_FINDING_METRICS(ATTNFUZZ_METRIC_ENUM)
#undef ATTNFUZZ_METRIC_ENUM
};
std::string_view to_string(FindingMetric m);
std::optional<FindingMetric> finding_metric_from_string(std::string_view s);

struct Finding {
  Signature signature;
  std::string detail;
  std::map<FindingMetric, double> metrics;
  // The metric's value, or nothing where this finding did not measure it.
  std::optional<double> metric(FindingMetric m) const {
    const auto it = metrics.find(m);
    return it == metrics.end() ? std::nullopt : std::optional<double>(it->second);
  }
};
// The metrics by name, in the names' order: a reproducer's "metrics", check's report.
std::map<std::string, double> metrics_by_name(const Finding& f);

// Precision fingerprint: which contract of the ladder an error looks like.
enum class FingerprintLabel {
  none,     // not fingerprinted (a tensor not compared, or judged without a ladder)
  unknown,  // no ladder to compare with
  exact,    // no error, and none on the finest rung
  finer,    // finer than the finest rung
  rung,     // like `rung`
  coarser,  // coarser than any rung
};
struct Fingerprint {
  FingerprintLabel label = FingerprintLabel::none;
  std::optional<Contract> rung;  // with FingerprintLabel::rung
  double rung_rms = 0;  // the (floored) error of that rung
  // The coarsest rung's error over the finest's: how far apart this tensor's ladder puts the
  // precisions at all. Below the band the rungs cannot be told apart here (a bf16 output's own
  // rounding can dominate every rung), and a label is a coin toss between near-equal numbers.
  double spread = 1;
  // For reports: the rung's contract name, "exact", "finer", "coarser", "?" (no ladder) or "" (none).
  std::string name() const;
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

// The blocks a tensor is judged in (harness/tolerance.h), finest first.
enum class Granularity {
  element,           // one element, where a row is one element (LSE, D = 1)
  row,               // a row's RMS statistic
  row_along_itself,  // a row's error projected on the row itself (verdict.cpp, row_projection)
  tile,
  head,
  tensor,
};
std::string_view to_string(Granularity g);  // "element", "row", "row along itself", "tile", "head", "tensor"

// The block of a tensor whose error statistic came closest to (or went furthest past)
// its limit (harness/tolerance.h).
struct WorstBlock {
  std::optional<Granularity> granularity;  // none: no block was judged (no element to compare)
  std::string_view granularity_name() const { return granularity ? to_string(*granularity) : std::string_view(); }
  std::string where;        // e.g. "b0 h1 s37" or "b0 h1 s16-31 d0-15"
  double ratio = 0;         // sqrt(sum err^2 / sum sigma'^2) over the block
  double limit = 0;         // c * (1 + k / sqrt(dof))
  double n = 0;             // elements in the block
  double dof = 0;           // their independent errors (harness/error_model.h): n, or fewer where rows share sources
};

struct TensorVerdict {
  TensorId tensor = TensorId::O;
  ErrorStats err, baseline;
  double bound_rms = 0;     // the whole-tensor test in error units: limit(N) * rms(sigma')
  double bound_max = 0;     // the per-element bound at the element with the largest error
  double kappa = 0;         // the error model's scale fitted on the baselines
  double model_rms = 0;     // rms of the error model's sigma (unscaled) over the judged elements
  double tensor_ratio = 0;  // sqrt(sum err^2 / sum sigma'^2) over the whole tensor
  WorstBlock worst;
  // The largest ratio / limit per granularity: the margin a correct backend leaves, for
  // calibration (bench/calibrate_rule).
  std::map<Granularity, double> margin;
  Fingerprint print;
  bool compared = true;  // false: not produced by this backend (LSE without one)
  bool pass = true;
  // A failing tensor's class: nan_inf, contract_violation (its error spreads like a coarser
  // rung's than its contract, in RMS and in max) or mismatch. Absent while it passes.
  std::optional<FindingClass> failure;
};

// What judging one tensor needs, all shaped alike ([B][H][S][D] or [B][H][S]).
struct SharedAcrossRows;  // harness/error_model.h
struct JudgeInput {
  const Tensor* impl = nullptr;
  const Tensor* ref = nullptr;                      // float64
  const Tensor* baseline_fwd = nullptr;             // the two naive computations
  const Tensor* baseline_rev = nullptr;             // under the declared contract
  const Tensor* sigma = nullptr;                    // the error model (may be null: baselines only)
  const std::vector<uint8_t>* skip_rows = nullptr;  // rows left out (fully masked)
  const Tensor* row_dof = nullptr;                  // per row: its independent errors (may be null: every element)
  // The share of each tile's, head's and the tensor's variance whose sources reach several of its
  // rows, and their number (error_model.h, "D's error across key rows"): the block's dof is that
  // of both parts (dof_with_shared_part). Null or empty: the rows' dof alone.
  const SharedAcrossRows* shared = nullptr;
  double tiny = 0;                                  // the storage type's smallest subnormal
  // Where the storage type rounds to infinity (harness/metrics.h, compare): an infinity of the
  // reference's sign there is the correctly stored value, judged equal and left out of the blocks.
  double overflow = std::numeric_limits<double>::infinity();
  // Whether the case's intermediates may leave the storage type's range (a gradient's dP or dS:
  // harness/differential.cpp, gradient_intermediates_bound): then every NaN or Inf is the type's
  // range met by a correct implementation's intermediate, not judged (the run notes how many).
  bool intermediates_overflow = false;
  // The relative variance of a scale error shared by a whole row from its fp32 (accumulation
  // precision) quantities, u_acc^2 L: the row projection's floor (verdict.cpp, row_projection).
  double row_scale_variance = 0;
  // The fingerprint ladder: the error of each rung's emulation, finest first (none: no
  // fingerprint, and no contract_violation), and the contract the backend declares.
  const std::vector<std::pair<Contract, ErrorStats>>* rungs = nullptr;
  Contract declared = Contract::fp32;
  // The coarsest contract the backend may hold: the coarser of its declaration and the coarsest a
  // kernel of the case's dtype may declare (contract.h, coarsest_declarable). An error a band
  // beyond that rung's, and beyond the expected error, is a wrong result.
  Contract coarsest_held = Contract::bf16;
};
// The verdict of one tensor, all of it (docs/verdicts.md):
//   pass   = every block within the rule of harness/tolerance.h, every element finite where the
//            reference is, and an RMS error within a band of the `coarsest_held` rung's, or
//            within the expected error (tensor_ratio <= 1);
//   failure = nan_inf        where NaN/Inf elements appear,
//             contract_violation where the fingerprint is a rung coarser than `declared` and
//                            max|err| <= band * that rung's max (coarser rounding spreads its
//                            error like the rung, a localized bug has a far larger max),
//             mismatch       otherwise.
//
// `reducer`, where given, computes the sums over elements (VerdictReducer: on the GPU); the blocks,
// the limits and the class are decided here either way.
class VerdictReducer;
TensorVerdict judge_tensor(TensorId tensor, const JudgeInput& in, const ToleranceRule& rule, VerdictReducer* reducer = nullptr);

// ---- the verdict's sums over elements, computed elsewhere (oracles/gpu_verdict.h) ----
// judge_tensor's blocks are sums over elements of err^2 and sigma'^2 (harness/tolerance.h). A
// reducer computes them where the tensors are and hands back one record per row and per tile;
// the blocks above them (a head, the tensor), the dof of copied rows, the limits, the worst
// block, the fingerprint and the class are then decided by the same code as on the host.
//
// A row is one (b, h, s) of a [B][H][S][D] tensor (one element of a [B][H][S] one); the rows are
// in that order, heads = B * H of S rows each.
struct RowSums {
  // The row's block: sum err^2, sum sigma'^2, its judged elements, and those not exact (the
  // ones that carry an error: verdict.cpp, Elementwise::exact).
  double err2 = 0, allow2 = 0, n = 0, can_err = 0;
  // The row projected on itself (verdict.cpp, row_projection), a block of one dof or empty.
  double along_err2 = 0, along_allow2 = 0, along_n = 0, along_dof = 0;
  // The row's first element of the largest err^2 (-1: none judged), and its sigma'^2.
  double max_err2 = -1, allow2_at_max = 0;
  uint64_t hash = 0;  // FNV-1a over the bits of the reference's row
};
// One tile of rule.tile rows x rule.tile columns, its rows' dof counted as judge_tensor does
// (copies of a row in the tile count once). Tiles in [head][row tile][column tile] order.
struct TileSums {
  double err2 = 0, allow2 = 0, n = 0, dof = 0;
};
struct VerdictSums {
  ErrorStats err;                                   // compare(impl, ref, ...)
  std::optional<ErrorStats> baseline_fwd, baseline_rev;
  double kappa = 0, model_rms = 0;                  // as TensorVerdict's
  std::vector<RowSums> rows;
  std::vector<TileSums> tiles;
};

// Computes the sums over elements. Every tensor a call names but sums()'s `impl` may be kept
// where the reducer computes, found again by its address: it must stay unchanged for the
// reducer's life (a DifferentialSession's reference, baselines, ladder rungs and error model do).
// Sums in a fixed order: the same inputs give the same bits. They may differ from the host's
// in rounding (a different order), never in what is summed.
class VerdictReducer {
 public:
  virtual ~VerdictReducer() = default;
  // As harness/metrics.h's compare.
  virtual ErrorStats compare(const Tensor& a, const Tensor& ref, const std::vector<uint8_t>* skip_rows, double overflow) = 0;
  // Nothing where the host must judge the tensor itself: NaN or Inf where the reference is
  // finite (the host decides, element by element, which the contract excuses), or a tile
  // larger than the reducer handles.
  virtual std::optional<VerdictSums> sums(const JudgeInput& in, const ToleranceRule& rule) = 0;
};
// A failing tensor's finding: its one-line detail and its metrics (rms, bounds, the worst block).
std::string failure_detail(const TensorVerdict& v, Contract declared);
std::map<FindingMetric, double> failure_metrics(const TensorVerdict& v);

}  // namespace attnfuzz
