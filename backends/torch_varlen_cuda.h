#pragma once
// LibTorch's native variable-length (varlen) attention ops on CUDA, the interface a ragged batch
// is meant for (harness/case.h, Ragged): packed tokens [sum of lengths][H][D] with cumulative
// int32 offsets, no padding, no mask tensor.
//   torch.flash.varlen      at::_flash_attention_forward / at::_flash_attention_backward with
//                           cum_seq_q, cum_seq_k, max_q, max_k, and seqused_k where K and V have
//                           gaps between sequences (FlashAttention-2's mha_varlen_fwd/bwd: what
//                           torch.nn.attention.varlen.varlen_attn calls)
//   torch.efficient.varlen  at::_efficient_attention_forward / at::_efficient_attention_backward
//                           with cu_seqlens_q, cu_seqlens_k, max_seqlen_q/k, custom_mask_type and
//                           seqlen_k where K and V have gaps (the CUTLASS memory-efficient kernel's
//                           seqstart path)
// Why: the dense backends see a ragged batch only as its padded mask; these hand LibTorch the
// sequences' own offsets and lengths, so its kernels' per-sequence bookkeeping (the offsets, the
// per-sequence bottom-right diagonal, empty sequences, the NaN rows between and after the
// sequences that no kernel may read) is what is tested. What each declines and why:
// backends/torch_varlen_cuda.cpp and docs/gpu.md, "Varlen backends".
#include <memory>
#include <optional>
#include <string>

#include "harness/backend.h"

namespace attnfuzz {

enum class TorchVarlenOp { flash, efficient };

std::unique_ptr<Backend> make_torch_varlen_backend(TorchVarlenOp op);

// Why the op cannot express this call (the adapter's part of unsupported_reason: Q with gaps, a
// dense mask that is not what the op computes per sequence, for flash a head dim over its limit),
// or nothing. Host code only: it needs no GPU (the tests ask it everywhere).
std::optional<std::string> torch_varlen_refusal(TorchVarlenOp op, const Problem& p);

}  // namespace attnfuzz
