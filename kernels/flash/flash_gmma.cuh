#pragma once
// wgmma (sm_90a) pieces the forward and the backward share: the views of a wgmma accumulator,
// issuing and waiting for a batch of products, and 2^x on the special-function unit.
#include <cutlass/arch/barrier.h>

#include "kernels/flash/flash_traits.h"

namespace attnfuzz::flash {

// ---- layouts of a wgmma accumulator ((2, 2, N / 8), M, N') ----
// As (rows, columns): ((2, M), (2, N / 8, N')). Each row's values sit in four neighbouring
// threads (a quad), as with mma.sync, so quad_max and quad_sum reduce a row.
template <class L>
CUTE_HOST_DEVICE auto rowcol_gmma(L acc) {
  using namespace cute;
  return make_layout(make_layout(get<0, 1>(acc), get<1>(acc)), make_layout(get<0, 0>(acc), get<0, 2>(acc), get<2>(acc)));
}
// As the register A operand of a 64 x n x 16 wgmma: ((2, 2, 2), M, N / 16): a k-slice of 16
// columns is two neighbouring 8-column groups of the accumulator.
template <class L>
CUTE_HOST_DEVICE auto as_operand_a_gmma(L acc) {
  using namespace cute;
  auto v = logical_divide(get<0>(acc), Shape<Underscore, Underscore, _2>{});  // (2, 2, (2, N / 16))
  return make_layout(make_layout(get<0>(v), get<1>(v), get<2, 0>(v)), get<1>(acc), coalesce(make_layout(get<2, 1>(v), get<2>(acc))));
}

// acc (+)= A B on the tensor cores, issued by the whole warpgroup (wgmma_issue), then waited
// for (wgmma_wait).
template <bool kZeroInit, class Mma, class A, class B, class C>
__device__ __forceinline__ void wgmma_issue(Mma& mma, const A& a, const B& b, C& c) {
  using namespace cute;
  warpgroup_fence_operand(c);
  warpgroup_arrive();
  if constexpr (kZeroInit) mma.accumulate_ = GMMA::ScaleOut::Zero;
#pragma unroll
  for (int k = 0; k < size<2>(a); ++k) {
    cute::gemm(mma, a(_, _, k), b(_, _, k), c);
    mma.accumulate_ = GMMA::ScaleOut::One;
  }
  warpgroup_commit_batch();
}
template <class C>
__device__ __forceinline__ void wgmma_wait(C& c) {
  cute::warpgroup_wait<0>();
  cute::warpgroup_fence_operand(c);
}

// 2^x on the special-function unit (ex2.approx, relative error about 2^-22; results below
// 2^-126 flush to 0, far below a probability's rounding next to the row maximum's 1).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Every cp.async this thread issued has landed, and every thread's: the tiles (and the zero
// fills of rows past the sequences) are in shared memory and visible to wgmma (the async
// proxy), and every warp is past the products that read the stage about to be refilled.
__device__ __forceinline__ void landed() {
  cute::cp_async_wait<0>();
  cutlass::arch::fence_view_async_shared();
  __syncthreads();
}

// A 4-byte global -> shared copy, asynchronous like the tiles' (cp.async).
__device__ __forceinline__ void cp_async_4(float* smem_dst, const float* gmem_src) {
  const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(d), "l"(gmem_src) : "memory");
}

}  // namespace attnfuzz::flash
