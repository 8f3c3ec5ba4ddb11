#pragma once
// LibTorch's fused attention kernels on CUDA, one kernel forced at a time:
//   torch.sdpa.{flash,efficient,cudnn}  at::scaled_dot_product_attention with only that
//                                       kernel enabled (the public entry point; no LSE)
//   torch.{flash,efficient,cudnn}       the underlying ops (_scaled_dot_product_*_attention),
//                                       called as the public entry point calls them, which
//                                       also return the LSE
//   torch.{flash,efficient,cudnn}.deterministic
//                                       the same ops with LibTorch's deterministic algorithms on
//                                       (torch.use_deterministic_algorithms(True), warn_only
//                                       false) for the duration of each call: they declare no
//                                       output nondeterministic, so the determinism check holds
//                                       LibTorch to that mode's promise (docs/gpu.md,
//                                       "Deterministic mode")
// Whether a problem is supported is LibTorch's own decision (at::_fused_sdp_choice with
// only that kernel enabled); its reasons are the warnings it gives.
#include <memory>

#include "harness/backend.h"

namespace attnfuzz {

enum class CudaSdpaKernel { flash, efficient, cudnn };
enum class CudaSdpaEntry { public_api, op };
// What a backend asks of LibTorch's determinism: the library's default (nondeterministic
// algorithms allowed), or deterministic algorithms, on for each of its calls (its support
// check, forward and backward) and the process's previous setting restored after it.
enum class CudaSdpaDeterminism { library_default, deterministic_algorithms };

std::unique_ptr<Backend> make_torch_cuda_sdpa_backend(CudaSdpaKernel kernel, CudaSdpaEntry entry,
                                                      CudaSdpaDeterminism determinism = CudaSdpaDeterminism::library_default);

// LibTorch's process-wide determinism setting (at::Context: torch.use_deterministic_algorithms's
// mode and warn_only), to read and set without LibTorch's headers (the tests: a deterministic
// variant's call must leave it as it found it).
struct TorchDeterminismSetting {
  bool deterministic = false, warn_only = false;
  bool operator==(const TorchDeterminismSetting&) const = default;
};
TorchDeterminismSetting torch_determinism_setting();
void set_torch_determinism_setting(TorchDeterminismSetting s);

}  // namespace attnfuzz
