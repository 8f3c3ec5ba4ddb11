// Backward instantiations: D in {64, 128} x {fp16, bf16}; rows pass, dK/dV kernel, dQ kernel.
#include "kernels/flash/flash_launch.h"

namespace attnfuzz::flash {

template <int D, class E>
void run_backward(const BackwardParams& params, cudaStream_t stream) {
  using T = BackwardTraits<D, E>;
  const Problem& p = params.p;
  const int64_t rows = p.batch * p.heads_q * p.seq_q;
  backward_rows_kernel<D, E><<<static_cast<unsigned>((rows * 32 + 255) / 256), 256, 0, stream>>>(params);
  check_launch("flash backward rows");
  constexpr size_t smem = T::kSmemBytes;
  // A dense batch's kernels and a ragged one's (sequence_rows, flash_common.cuh).
  const bool ragged = p.ragged.lens_q != nullptr;
  const auto dkdv = ragged ? backward_dkdv_kernel<T, true> : backward_dkdv_kernel<T, false>;
  const auto dq = ragged ? backward_dq_kernel<T, true> : backward_dq_kernel<T, false>;
  cudaFuncSetAttribute(dkdv, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  cudaFuncSetAttribute(dq, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  const dim3 grid_kv(static_cast<unsigned>((p.seq_kv + T::kRows - 1) / T::kRows), static_cast<unsigned>(p.heads_kv),
                     static_cast<unsigned>(p.batch));
  BackwardParams ordered = params;
  const int64_t tile_bytes = D * static_cast<int64_t>(sizeof(E));
  ordered.group_dkdv = schedule_group(p, p.batch * p.heads_kv, 2 * p.seq_q * tile_bytes * (p.heads_q / p.heads_kv));  // Q, dO of the group
  ordered.group_dq = schedule_group(p, p.batch * p.heads_q, 2 * p.seq_kv * tile_bytes);                               // K, V
  dkdv<<<grid_kv, T::kThreads, smem, stream>>>(ordered);
  check_launch("flash backward dK dV");
  const dim3 grid_q(static_cast<unsigned>((p.seq_q + T::kRows - 1) / T::kRows), static_cast<unsigned>(p.heads_q),
                    static_cast<unsigned>(p.batch));
  dq<<<grid_q, T::kThreads, smem, stream>>>(ordered);
  check_launch("flash backward dQ");
}

// A planted-bug build (kernels/flash/flash_hooks.cuh) compiles bf16 only: half the compile time.
#if !ATTNFUZZ_FLASH_PLANTED_BUILD
template void run_backward<64, cutlass::half_t>(const BackwardParams&, cudaStream_t);
template void run_backward<128, cutlass::half_t>(const BackwardParams&, cudaStream_t);
#endif
template void run_backward<64, cutlass::bfloat16_t>(const BackwardParams&, cudaStream_t);
template void run_backward<128, cutlass::bfloat16_t>(const BackwardParams&, cudaStream_t);

}  // namespace attnfuzz::flash
