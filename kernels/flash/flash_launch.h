#pragma once
// Between the plain API (flash_launch.cu, the one dispatch point) and the kernel
// instantiations (flash_fwd.cu, flash_bwd.cu): each run_* is explicitly instantiated there
// for every (head dim, element type) the launcher dispatches to.
#include <cuda_runtime.h>

#include "kernels/flash/flash_bwd.cuh"
#include "kernels/flash/flash_fwd.cuh"

namespace attnfuzz::flash {

void check_launch(const char* what);

// The planes per group of a kernel's block order (block_tile, flash_common.cuh): 1, the plain
// order, when every block has the same work (no mask); else as many of the `planes` as keep
// the tiles they stream (stream_bytes_per_plane each) within 16 MiB of L2, at least one.
// The environment variable ATTNFUZZ_FLASH_GROUP (a positive number) overrides it, to
// benchmark the orders against each other in one build.
int schedule_group(const Problem& p, int64_t planes, int64_t stream_bytes_per_plane);

template <int D, class E>
void run_forward(const ForwardParams& params, cudaStream_t stream);
template <int D, class E>
void run_backward(const BackwardParams& params, cudaStream_t stream);

}  // namespace attnfuzz::flash
