#pragma once
// The float64 reference (Eigen): docs/semantics.md ("Forward", "Backward"), matrix products per
// (batch, head). It is the yardstick every other backend is measured against.
#include <Eigen/Dense>

#include "harness/backend.h"

namespace attnfuzz {

Forward reference_forward(const Problem& p);
Gradients reference_backward(const Problem& p, const Forward& fwd, const Tensor& d_out, const Tensor& d_lse);

// Scores, mask, LSE and P of one (batch, query head), in float64.
using Mat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using CMap = Eigen::Map<const Mat>;
using MMap = Eigen::Map<Mat>;
struct HeadScores {
  Mat s;       // scores after the softcap and the bias (masked entries included)
  Mat p;       // softmax probabilities, 0 where masked and on fully masked rows
  Mat tanh_t;  // tanh(S_pre / c) when softcapped (for the backward's chain rule)
  Eigen::VectorXd lse;
};
HeadScores head_scores(const Problem& p, int64_t b, int64_t h);

class ReferenceBackend final : public Backend {
 public:
  std::string name() const override { return "reference"; }
  HostScores host_scores() const override { return HostScores::one_head; }  // head_scores: Sq x Skv float64 matrices
  std::string version() const override;
  SupportEnvelope envelope() const override {  // the whole semantics
    SupportEnvelope e = Backend::envelope();
    e.bias = true;
    e.bias_grad = true;
    e.ragged = true;
    return e;
  }
  Forward forward(const Problem& p) override { return reference_forward(p); }
  Gradients backward(const Problem& p, const Forward& f, const Tensor& d_out, const Tensor& d_lse) override {
    return reference_backward(p, f, d_out, d_lse);
  }
};

}  // namespace attnfuzz
