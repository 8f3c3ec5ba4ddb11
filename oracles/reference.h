#pragma once
// The float64 reference (Eigen): DESIGN.md's formulas, matrix products per
// (batch, head). It is the yardstick every other backend is measured against.
#include "harness/backend.h"

namespace attnfuzz {

Forward reference_forward(const Problem& p);
Gradients reference_backward(const Problem& p, const Forward& fwd, const Tensor& d_out, const Tensor& d_lse);

// First-order magnitudes of the terms behind each output element, propagated with
// absolute values (|P V|, P^T |dO|, s P.(|dO||V|^T + |D| + |g|) |K|, ...). Rounding error
// is proportional to these, not to the result, which can cancel to ~0; the tolerance
// floor uses them. `sens_*` weigh each probability by 1 + |S|_terms (scale |Q||K|^T): an
// error of u |S| in a score moves P by that relative amount (large logits), at the
// accumulation precision (fp32) rather than the storage type's. Order: O, dQ, dK, dV.
struct Magnitudes {
  Tensor o, dq, dk, dv;
  Tensor sens_o, sens_dq, sens_dk, sens_dv;
};
Magnitudes reference_magnitudes(const Problem& p, const Forward& fwd, const Tensor& d_out, const Tensor& d_lse);

class ReferenceBackend final : public Backend {
 public:
  std::string name() const override { return "reference"; }
  std::string version() const override;
  Forward forward(const Problem& p) override { return reference_forward(p); }
  Gradients backward(const Problem& p, const Forward& f, const Tensor& d_out, const Tensor& d_lse) override {
    return reference_backward(p, f, d_out, d_lse);
  }
};

}  // namespace attnfuzz
