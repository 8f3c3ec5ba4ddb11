#pragma once
// The same-precision baseline of the tolerance rule: attention computed naively
// (no tiling, no online softmax) under a declared numerics contract, with every
// matmul operand rounded as the contract says, fp32 accumulation, and the outputs
// rounded to the case dtype. Two accumulation orders (forward and reversed, like
// FlashAttention's reorder_ops) give two baselines with independent rounding.
// The same code, run under each contract of a ladder, gives the precision fingerprint.
#include "harness/backend.h"

namespace attnfuzz {

class EmulatedBackend final : public Backend {
 public:
  EmulatedBackend(Contract contract, bool reversed_order) : contract_(contract), reversed_(reversed_order) {}
  std::string name() const override;
  std::optional<Contract> contract(DType) const override { return contract_; }
  HostScores host_scores() const override { return HostScores::one_head; }  // HeadState: Sq x Skv scores of one head
  SupportEnvelope envelope() const override {  // the whole semantics
    SupportEnvelope e = Backend::envelope();
    e.bias = true;
    e.bias_grad = true;
    e.ragged = true;
    return e;
  }
  Forward forward(const Problem& p) override;
  Gradients backward(const Problem& p, const Forward& fwd, const Tensor& d_out, const Tensor& d_lse) override;

 private:
  Contract contract_;
  bool reversed_;
};

// The LSE as a kernel on tensor cores computes it (harness/error_model.h, "truncation"): every
// visible score's Q K^T summed 16 products a step into an fp32 accumulator truncated toward zero
// after each step, the reference's LSE moved by those scores' errors (through the softcap's chain
// factor), stored in fp32. For 16-bit inputs, whose products and sums of 16 float64 holds exactly.
// A stand-in for the hardware where there is none: tests and bench_sensitivity --tensor-cores.
Tensor tensor_core_lse(const Problem& p);

}  // namespace attnfuzz
