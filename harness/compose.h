#pragma once
// The composition engine: evaluates a Case's composition tree with one backend
// at every leaf, forward and backward. Parts over disjoint keys are merged through
// their LSEs (harness/merge.h); query parts are concatenated. The result is
// comparable with the single call over the whole problem: equality of the two is
// the metamorphic relation that exposes LSE-gradient bugs (docs/semantics.md,
// "The metamorphic relation"; the dLSE adapter: "The dLSE adapter").
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/backend.h"
#include "harness/case.h"
#include "harness/error_model.h"
#include "harness/inputs.h"

namespace attnfuzz {

// A backend said it cannot run a part of the composition (with its reason).
class UnsupportedError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One backend call of a composition, as it ran: its problem (rows q_offset.. and keys
// kv_offset.. of the case), its outputs and the upstream gradients it was given.
struct CallRecord {
  Problem problem;
  Forward fwd;
  Gradients grads;
  Tensor d_out, d_lse;
};

struct ComposedResult {
  Forward fwd;
  Gradients grads;
  int backend_calls = 0;
  bool dlse_added_by_harness = false;  // the backend ignores dLSE; the engine added the term
  std::vector<std::string> notes;
  std::vector<CallRecord> calls;  // only when asked for (run_composition's record_calls)

  // The output `t` (one of kOutputs, harness/tensors.h).
  const Tensor& operator[](TensorId t) const;
};

// Whether the case has output t: every output but dBias, which only a bias that requires a
// gradient has (harness/case.h, ScoreBias::requires_grad).
inline bool case_has_output(const Case& c, TensorId t) { return t != TensorId::dBias || (c.bias && c.bias->requires_grad); }

// Throws UnsupportedError when a leaf is not supported by the backend (with its reason);
// whatever a backend throws otherwise passes through. `record_calls` keeps every leaf call
// (the error model of a composition is evaluated per call: harness/error_model.h).
ComposedResult run_composition(Backend& backend, const Case& c, const Inputs& in, const Composition& comp, bool record_calls = false);
inline ComposedResult run_composition(Backend& backend, const Case& c, const Inputs& in) {
  return run_composition(backend, c, in, c.composition);
}

}  // namespace attnfuzz
