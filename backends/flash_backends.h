#pragma once
// The project's fused kernels (kernels/flash/) as Backends, device "cuda":
//  - cuda.flash: the fused forward and the deterministic fused backward, which honours dLSE;
//  - cuda.merge: the same leaves, with every LSE merge of a composition run by the fused
//    merge kernel on the GPU instead of the harness's float64 merge (harness/merge.h).
// Compiled only by the gpu preset (ATTNFUZZ_WITH_CUDA); backends/registry.cpp registers them.
#include <memory>
#include <string>

#include "harness/backend.h"
#include "harness/merge.h"

namespace attnfuzz {

class FlashBackend : public Backend {
 public:
  std::string name() const override { return "cuda.flash"; }
  std::string version() const override;
  Device device() const override { return Device::cuda; }
  // fp16 and bf16 inputs: 16-bit operands, fp32 accumulation, P and dS rounded to the input
  // type before their products (the natural contract). No fp32 path.
  std::optional<Contract> contract(DType d) const override;
  // Every clause enforced: fp16/bf16, head dims up to 128 (the instantiated tiles), any mask,
  // GQA/MQA, softcap, any layout, batch and heads within the grid.
  SupportEnvelope envelope() const override;
  std::optional<std::string> unsupported_reason(const Problem& p) const override;
  bool backward_takes_dlse() const override { return true; }
  // Batch invariant by construction: the grid is (query tile, head, batch) with one tile size per
  // head dim, no split of the keys and no atomics, so a (batch, head) problem's work and order
  // are the same in any batch (measured on the H100: no bit moved at S = 1088 in a batch of 4,
  // docs/gpu.md). The batch-invariance check holds it to that.
  bool batch_invariant() const override { return true; }
  Forward forward(const Problem& p) override;
  Gradients backward(const Problem& p, const Forward& fwd, const Tensor& d_out, const Tensor& d_lse) override;
};

// Merges through the GPU kernel (flash::merge_forward / merge_backward), in fp32.
class GpuMerger final : public Merger {
 public:
  Forward forward(const std::vector<Forward>& parts) const override;
  std::vector<PartGrad> backward(const std::vector<Forward>& parts, const Forward& merged, const Tensor& d_out,
                                 const Tensor& d_lse) const override;
};

class FlashMergeBackend final : public FlashBackend {
 public:
  std::string name() const override { return "cuda.merge"; }
  const Merger* merger() const override { return &merger_; }

 private:
  GpuMerger merger_;
};

}  // namespace attnfuzz
