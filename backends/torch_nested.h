#pragma once
// LibTorch's scaled_dot_product_attention on nested tensors: the ragged batch as a model holding
// torch.nested tensors hands it to F.scaled_dot_product_attention, each sequence a component with
// its own length, no padding, no mask tensor.
//   torch.nested.math       at::scaled_dot_product_attention with only the math kernel enabled,
//                           CPU (torch.nested.math.cuda: CUDA); components [H][L_b][D]
//   torch.nested.flash      at::scaled_dot_product_attention with only the flash kernel enabled,
//                           CUDA; components [L_b][H][D] (the packed THD rows) seen as
//                           [H][L_b][D] by a transpose, which is what LibTorch's nested flash
//                           path takes without a copy
//   torch.nested.cudnn      at::_scaled_dot_product_cudnn_attention on the same nested tensors:
//                           the op SDPA calls for nested inputs once its experimental gate is
//                           open (TORCH_CUDNN_SDPA_NESTED_TENSOR_ENABLED=1), called directly so
//                           that no environment variable is set for the process
// Backward: LibTorch's autograd through the call, as a training step gets it (flash: the nested
// _scaled_dot_product_flash_attention_backward; math: the composed nested ops). cuDNN: its nested
// backward op called directly with what its forward returned, because autograd rejects the
// gradients that op returns (packed buffers where nested tensors are expected: docs/findings,
// s61-torch-nested-cudnn-autograd-gradient). No LSE is returned (the public entry point returns
// none), no dLSE taken.
// The memory-efficient kernel has a nested forward but no nested backward in LibTorch 2.11, so it
// is not a backend here (torch.efficient.varlen tests its varlen forward and backward).
// What each declines and why: backends/torch_nested.cpp and docs/gpu.md, "Varlen backends".
#include <memory>
#include <optional>
#include <string>

#include "harness/backend.h"

namespace attnfuzz {

enum class NestedSdpaKernel { math, flash, cudnn };

std::unique_ptr<Backend> make_torch_nested_backend(NestedSdpaKernel kernel, Device device);

// The adapter's own part of unsupported_reason: the dense mask must be, in every sequence and
// head alike, all visible or causal with the diagonal top-left over that sequence's queries and
// keys in this call (what is_causal means for scaled_dot_product_attention; its documentation:
// "upper left causal bias" where the lengths differ); and the known LibTorch bugs of the fused
// kernels' nested path (docs/findings/LEDGER.md, s61-torch-nested-*), declined so that campaigns
// judge the rest. Host code only: it needs no GPU.
std::optional<std::string> torch_nested_refusal(NestedSdpaKernel kernel, const Problem& p);

}  // namespace attnfuzz
