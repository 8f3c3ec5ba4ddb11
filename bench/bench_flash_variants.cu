// Forward tile configurations the benchmark times beside the library's (bench_flash.cpp):
// 8 warps with the registers capped for 2 blocks per SM (spills a little) or uncapped (1 block).
#include <cuda_runtime.h>

#include "kernels/flash/flash_fwd.cuh"

namespace attnfuzz::flash {

template <class T>
void launch_variant(const ForwardParams& params) {
  using E = typename T::Element;
  const Problem& p = params.p;
  constexpr size_t smem = (T::kRowTileElems + 4 * T::kColTileElems) * sizeof(E);
  cudaFuncSetAttribute(forward_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  const dim3 grid(static_cast<unsigned>((p.seq_q + T::kRows - 1) / T::kRows), static_cast<unsigned>(p.heads_q),
                  static_cast<unsigned>(p.batch));
  forward_kernel<T><<<grid, T::kThreads, smem, static_cast<cudaStream_t>(p.stream)>>>(params);
}

// variant: minimum blocks per SM (1 or 2) of an 8-warp bf16 forward.
void forward_variant(int min_blocks, const Problem& p, const ForwardArgs& a) {
  const ForwardParams params{p, a};
  using B = cutlass::bfloat16_t;
  if (p.head_dim == 64) {
    if (min_blocks == 2) launch_variant<Traits<64, 128, 128, 8, B, 2>>(params);
    else launch_variant<Traits<64, 128, 128, 8, B, 1>>(params);
  } else {
    if (min_blocks == 2) launch_variant<Traits<128, 128, 64, 8, B, 2>>(params);
    else launch_variant<Traits<128, 128, 64, 8, B, 1>>(params);
  }
}

}  // namespace attnfuzz::flash
