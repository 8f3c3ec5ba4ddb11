#pragma once
// LibTorch's scaled_dot_product_attention on nested tensors: the ragged batch as a model holding
// torch.nested tensors hands it to F.scaled_dot_product_attention, each sequence a component with
// its own length, no padding, no mask tensor.
//   torch.nested.math       at::scaled_dot_product_attention with only the math kernel enabled,
//                           CPU (torch.nested.math.cuda: CUDA); components [H][L_b][D]
//   torch.nested.flash      at::scaled_dot_product_attention with only the flash kernel enabled,
//                           CUDA; components [L_b][H][D] (the packed THD rows) seen as
//                           [H][L_b][D] by a transpose, the layout LibTorch's nested flash
//                           preprocessing is written for
// Backward: LibTorch's autograd through the call, as a training step gets it (flash: the nested
// _scaled_dot_product_flash_attention_backward; math: the composed nested ops). No LSE is returned
// (the public entry point returns none), no dLSE taken.
// Not backends here: the memory-efficient kernel has a nested forward but no nested backward in
// LibTorch 2.11 (torch.efficient.varlen tests its varlen forward and backward). cuDNN's nested
// path is behind SDPA's experimental gate (TORCH_CUDNN_SDPA_NESTED_TENSOR_ENABLED=1), and autograd
// rejects the gradients of its nested backward op; called directly, that op's gradients disagreed
// with the reference in an adapter and agreed in a standalone probe, which is not triaged
// (docs/findings/LEDGER.md, s61-torch-nested-cudnn-*).
// What each declines and why: backends/torch_nested.cpp and docs/gpu.md, "Varlen backends".
#include <memory>
#include <optional>
#include <string>

#include "harness/backend.h"

namespace attnfuzz {

enum class NestedSdpaKernel { math, flash };

std::unique_ptr<Backend> make_torch_nested_backend(NestedSdpaKernel kernel, Device device);

// The adapter's own part of unsupported_reason: the dense mask must be, in every sequence and
// head alike, all visible or causal with the diagonal top-left over that sequence's queries and
// keys in this call (what is_causal means for scaled_dot_product_attention; its documentation:
// "upper left causal bias" where the lengths differ); and the known LibTorch bugs of the flash
// kernel's nested path (docs/findings/LEDGER.md, s61-torch-nested-*), declined so that campaigns
// judge the rest. Host code only: it needs no GPU.
std::optional<std::string> torch_nested_refusal(NestedSdpaKernel kernel, const Problem& p);

}  // namespace attnfuzz
