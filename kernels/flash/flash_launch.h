#pragma once
// Between the plain API (flash_launch.cu, the one dispatch point) and the kernel
// instantiations (flash_fwd.cu, flash_bwd.cu): each run_* is explicitly instantiated there
// for every (head dim, element type) the launcher dispatches to.
#include <cuda_runtime.h>

#include "kernels/flash/flash_bwd.cuh"
#include "kernels/flash/flash_fwd.cuh"

namespace attnfuzz::flash {

void check_launch(const char* what);

template <int D, class E>
void run_forward(const ForwardParams& params, cudaStream_t stream);
template <int D, class E>
void run_backward(const BackwardParams& params, cudaStream_t stream);

}  // namespace attnfuzz::flash
