#pragma once
// The differential check of one case: every backend, through the single call and
// the case's composition, against the float64 reference, judged by the tolerance
// rule with baselines under each backend's declared contract; plus the other
// checks (NaN/Inf, fully masked rows, determinism, unwritten output, contracts,
// consistency). Produces a table and a list of findings with signatures.
#include <array>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "harness/backend.h"
#include "harness/case.h"
#include "harness/compose.h"
#include "harness/error_model.h"
#include "harness/inputs.h"
#include "harness/oracle_set.h"
#include "harness/verdict.h"

namespace attnfuzz {

struct DiffOptions {
  bool include_single = true;     // also run the single call when the case has a composition
  // The repeat checks: run every backend twice and compare bitwise, and run a backend that
  // declares batch invariance (Backend::batch_invariant) once more with the case inside a
  // larger batch (batch_invariance_batch), its problems' outputs compared bitwise.
  bool check_determinism = true;
  // With the repeat checks: put the backends that do not declare batch invariance through that
  // check too, their result a note (a measurement, not a broken promise): `run
  // --batch-invariance-all`.
  bool batch_invariance_undeclared = false;
  ToleranceRule rule;
  // Called before each backend runs (a worker reports it, so a crash names the backend).
  std::function<void(const std::string&)> on_backend;
  // Called after each GPU backend: the error a now unusable device gives, or nothing. A
  // kernel fault can surface after the call that caused it returned (or inside a check
  // that only asked whether a problem is supported); this pins it on the backend that ran.
  std::function<std::optional<std::string>()> gpu_health;
};

struct BackendRun {
  std::string backend, version;
  std::string composition;  // the composition tree, described (harness/case.h describe)
  CompositionClass composition_class = CompositionClass::single;
  std::string contract;
  std::string api;               // Backend::api: consistency compares runs of one API only
  double lse_unit_roundoff = 0;  // the backend's declared LSE accuracy for the case dtype
  bool skipped = false;
  std::string skip_reason;
  std::vector<std::string> notes;
  std::vector<TensorVerdict> tensors;
  int backend_calls = 0;
};

struct DiffReport {
  uint64_t input_checksum = 0;
  ToleranceRule rule;
  std::vector<BackendRun> runs;
  std::vector<Finding> findings;
  // A backend on a GPU raised an error: the process's CUDA context may be unusable, so later
  // GPU backends of this case were not run and the process should not run another case.
  bool gpu_error = false;
};

// single, q_split (queries cut, no merge) or merged (some LSE merge).
CompositionClass composition_class(const Composition& c);

// The batch the batch-invariance check puts a case's problems in: 2B + 1 at least, and enough
// (b, h, 64-query tile) work items to fill the machine the backend computes on (a split
// heuristic keyed on occupancy then sees a full machine where the case alone left it idle): 512
// on a GPU (a few waves of a 132-SM H100), up to kBatchInvarianceMaxBatch; on the CPU, which
// pays the larger run in full, 64 but at most kBatchInvarianceCpuFactor times the case's batch. The case's problems are its first B batches: every input element is
// drawn from its index (harness/inputs.h) and the batch is the outermost dimension, so the
// larger case's inputs begin with the case's own, and its masks are the same expressions.
inline constexpr int64_t kBatchInvarianceGpuWorkItems = 512, kBatchInvarianceCpuWorkItems = 64, kBatchInvarianceMaxBatch = 1024,
                         kBatchInvarianceCpuFactor = 4;
int64_t batch_invariance_batch(const Shape& s, Device device);

DiffReport run_differential(const Case& c, const std::vector<Backend*>& backends, const OracleSet& oracles, const DiffOptions& opt = {});

// One case's judging machinery, computed once: inputs, the float64 reference, its error
// model and the baselines (cached per contract and composition). run_differential is one
// session; the sensitivity measurement (bench/sensitivity) judges many perturbed outputs
// against one session.
class DifferentialSession {
 public:
  DifferentialSession(const Case& c, const OracleSet& oracles, const DiffOptions& opt = {});
  ~DifferentialSession();
  DifferentialSession(const DifferentialSession&) = delete;
  DifferentialSession& operator=(const DifferentialSession&) = delete;

  const Inputs& inputs() const;
  // The float64 reference through the single call.
  const ComposedResult& reference() const;
  // Runs `be` through the single call and the case's composition, with every check.
  void run_backend(Backend& be);
  // Judges outputs computed elsewhere as if `be` had returned them through `comp`: the
  // numeric verdicts and their findings only (no determinism, poison or convention checks).
  BackendRun judge(const Backend& be, const Composition& comp, const ComposedResult& outputs, std::vector<Finding>* findings);
  // The report so far, with the cross-backend consistency check; ends the session.
  DiffReport finish();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace attnfuzz
