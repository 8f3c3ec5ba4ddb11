#pragma once
// LibTorch's fused attention kernels on CUDA, one kernel forced at a time:
//   torch.sdpa.{flash,efficient,cudnn}  at::scaled_dot_product_attention with only that
//                                       kernel enabled (the public entry point; no LSE)
//   torch.{flash,efficient,cudnn}       the underlying ops (_scaled_dot_product_*_attention),
//                                       called as the public entry point calls them, which
//                                       also return the LSE
// Whether a problem is supported is LibTorch's own decision (at::_fused_sdp_choice with
// only that kernel enabled); its reasons are the warnings it gives.
#include <memory>

#include "harness/backend.h"

namespace attnfuzz {

enum class CudaSdpaKernel { flash, efficient, cudnn };
enum class CudaSdpaEntry { public_api, op };

std::unique_ptr<Backend> make_torch_cuda_sdpa_backend(CudaSdpaKernel kernel, CudaSdpaEntry entry);

}  // namespace attnfuzz
