#pragma once
// The float64 reference (Eigen): DESIGN.md's formulas, matrix products per
// (batch, head). It is the yardstick every other backend is measured against.
#include "harness/backend.h"

namespace attnfuzz {

Forward reference_forward(const Problem& p);
Gradients reference_backward(const Problem& p, const Forward& fwd, const Tensor& d_out, const Tensor& d_lse);

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
