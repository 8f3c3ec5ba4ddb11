// Forward instantiations (sm_90a, wgmma): D in {64, 128} x {fp16, bf16}.
#include "kernels/flash/flash_launch.h"

namespace attnfuzz::flash {

template <int D, class E>
void run_forward(const ForwardParams& params, cudaStream_t stream) {
  using T = ForwardTraits<D, E>;
  const Problem& p = params.p;
  constexpr size_t smem = T::kSmemBytes;
  // A dense batch's kernel and a ragged one's (sequence_rows, flash_common.cuh).
  const auto kernel = p.ragged.lens_q ? forward_kernel<T, true> : forward_kernel<T, false>;
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  const dim3 grid(static_cast<unsigned>((p.seq_q + T::kRows - 1) / T::kRows), static_cast<unsigned>(p.heads_q),
                  static_cast<unsigned>(p.batch));
  ForwardParams ordered = params;
  ordered.group = schedule_group(p, p.batch * p.heads_q, 2 * p.seq_kv * D * static_cast<int64_t>(sizeof(E)));  // K and V
  kernel<<<grid, T::kThreads, smem, stream>>>(ordered);
  check_launch("flash forward");
}

// A planted-bug build (kernels/flash/flash_hooks.cuh) compiles bf16 only: half the compile time.
#if !ATTNFUZZ_FLASH_PLANTED_BUILD
template void run_forward<64, cutlass::half_t>(const ForwardParams&, cudaStream_t);
template void run_forward<128, cutlass::half_t>(const ForwardParams&, cudaStream_t);
#endif
template void run_forward<64, cutlass::bfloat16_t>(const ForwardParams&, cudaStream_t);
template void run_forward<128, cutlass::bfloat16_t>(const ForwardParams&, cudaStream_t);

}  // namespace attnfuzz::flash
