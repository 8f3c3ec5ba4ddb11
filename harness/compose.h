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

struct ComposedResult {
  Forward fwd;
  Gradients grads;
  int backend_calls = 0;
  bool dlse_added_by_harness = false;  // the backend ignores dLSE; the engine added the term
  std::vector<std::string> notes;

  // The output `t` (O, LSE, dQ, dK, dV: harness/error_model.h).
  const Tensor& operator[](Output t) const;
};

// Throws UnsupportedError when a leaf is not supported by the backend (with its reason);
// whatever a backend throws otherwise passes through.
ComposedResult run_composition(Backend& backend, const Case& c, const Inputs& in, const Composition& comp);
inline ComposedResult run_composition(Backend& backend, const Case& c, const Inputs& in) {
  return run_composition(backend, c, in, c.composition);
}

}  // namespace attnfuzz
