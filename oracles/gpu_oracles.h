#pragma once
// The GPU oracle set as Backends (device "cuda"): the float64 reference and the contract
// baselines, computed by oracles/gpu_attention.cu. Compiled only by the gpu preset
// (ATTNFUZZ_WITH_CUDA); backends/registry.cpp registers them.
#include <string>

#include "harness/backend.h"
#include "harness/error_model.h"
#include "harness/verdict.h"
#include "oracles/gpu_attention.h"

namespace attnfuzz {

// Whether a CUDA device can run the project's kernels here, or why not.
bool cuda_kernels_available(std::string* why);

// The error model's magnitudes on the GPU (oracles/gpu_error_terms.h): the same TermTensors
// as oracles/error_terms.cpp's reference_error_terms, for OracleSet::error_terms. `t` gets
// where the time went (host: the output tensors and the mask's plane check).
ErrorTerms cuda_error_terms(const Problem& p, const Forward& fwd, const Tensor& d_out, const Tensor& d_lse, gpu::Timing* t = nullptr);
// Whether cuda_error_terms also computes dK's via blocks (TermTensors::via_tile_sum and the
// others; harness/error_model.h, "D's error across key rows"): ATTNFUZZ_GPU_VIA_BLOCKS=1, off
// until they have run on a GPU (docs/gpu.md).
bool gpu_via_blocks();

// The error model's sigma and row dof of one output on the GPU (oracles/gpu_model.h), the same
// bits as model_sigma_and_row_dof (harness/error_model.h), for OracleSet::output_model. Terms
// whose shapes the device path does not take are modelled on the host. backends/registry.cpp
// installs it with ATTNFUZZ_ERROR_MODEL=device.
ModelOfOutput cuda_output_model(TensorId t, const TermTensors& terms, const Tensor& ref, const RoundingUnits& u);

// The verdict's sums over elements on the GPU (oracles/gpu_verdict.h), for
// OracleSet::verdict_reducer. It keeps every tensor but a judged implementation's output on the
// device for its life, so one reducer serves one case (one DifferentialSession).
std::unique_ptr<VerdictReducer> make_cuda_verdict_reducer();

// The float64 reference on the GPU: same semantics as ReferenceBackend (oracles/reference.h),
// the score bias included; the backward computes no dBias (a problem asking for it is refused).
class CudaReference64Backend final : public Backend {
 public:
  std::string name() const override { return "cuda.reference64"; }
  std::string version() const override;
  Device device() const override { return Device::cuda; }
  bool accumulates_on_tensor_cores() const override { return false; }  // float64 on the CUDA cores
  SupportEnvelope envelope() const override {
    SupportEnvelope e = Backend::envelope();
    e.bias = true;
    e.ragged = true;
    return e;
  }
  Forward forward(const Problem& p) override;
  Gradients backward(const Problem& p, const Forward& fwd, const Tensor& d_out, const Tensor& d_lse) override;
  // Where the time of the last call went (host-timed: upload, kernels, download).
  const gpu::Timing& last_timing() const { return timing_; }

 private:
  gpu::Timing timing_;
};

// The naive computation under a contract on the GPU: same rounding points and accumulation
// order as EmulatedBackend (oracles/emulated.h), the score bias included; docs/gpu.md says where
// the two can differ. No dBias, as above.
class CudaEmulatedBackend final : public Backend {
 public:
  CudaEmulatedBackend(Contract contract, bool reversed_order) : contract_(contract), reversed_(reversed_order) {}
  std::string name() const override;
  std::string version() const override;
  Device device() const override { return Device::cuda; }
  bool accumulates_on_tensor_cores() const override { return false; }  // the contract's roundings, emulated in scalar code
  SupportEnvelope envelope() const override {
    SupportEnvelope e = Backend::envelope();
    e.bias = true;
    e.ragged = true;
    return e;
  }
  std::optional<Contract> contract(DType) const override { return contract_; }
  Forward forward(const Problem& p) override;
  Gradients backward(const Problem& p, const Forward& fwd, const Tensor& d_out, const Tensor& d_lse) override;

 private:
  gpu::Numerics numerics(const Problem& p) const { return {false, contract_, p.dtype, reversed_}; }
  Contract contract_;
  bool reversed_;
};

}  // namespace attnfuzz
