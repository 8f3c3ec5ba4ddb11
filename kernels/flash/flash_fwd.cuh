#pragma once
// The fused forward: one block per (query tile, query head, batch). Q stays in shared memory;
// K and V tiles stream through a two-stage cp.async pipeline, skipping tiles the mask hides.
// Online softmax in the log2 domain (scores times log2 e):
//   m' = max(m, rowmax S),  l' = l 2^(m - m') + rowsum 2^(S - m'),  O' = O 2^(m - m') + 2^(S - m') V
// with m = -inf treated as 0 in the exponents, so a row that has seen no visible key keeps
// l = 0 and O = 0; at the end LSE = (m + log2 l) ln 2, or -inf when l = 0.
#include "kernels/flash/flash_common.cuh"
#include "kernels/flash/flash_traits.h"

namespace attnfuzz::flash {

struct ForwardParams {
  Problem p;
  ForwardArgs a;
};

template <class T>
__global__ void __launch_bounds__(T::kThreads, T::kMinBlocks) forward_kernel(const ForwardParams params) {
  using namespace cute;
  using E = typename T::Element;
  constexpr int kM = T::kRows, kN = T::kCols, kD = T::kHeadDim;
  const Problem& p = params.p;
  const int tid = threadIdx.x;
  const int64_t m_block = blockIdx.x, h = blockIdx.y, b = blockIdx.z, h_kv = h / (p.heads_q / p.heads_kv);
  const int64_t q0 = m_block * kM;

  extern __shared__ __align__(1024) char smem_raw[];
  E* smem = reinterpret_cast<E*>(smem_raw);
  Tensor sQ = make_tensor(make_smem_ptr(smem), typename T::SmemRows{});
  E* kv_base = smem + T::kRowTileElems;  // stages: [K0][V0][K1][V1]

  Tensor mQ = head_view<kD, E>(p.q, p.q_strides, b, h, p.seq_q);
  Tensor mK = head_view<kD, E>(p.k, p.k_strides, b, h_kv, p.seq_kv);
  Tensor mV = head_view<kD, E>(p.v, p.v_strides, b, h_kv, p.seq_kv);
  Tensor gQ = local_tile(mQ, Shape<Int<kM>, Int<kD>>{}, make_coord(m_block, 0));

  typename T::GmemCopy gcopy;
  auto gthr = gcopy.get_thread_slice(tid);
  Tensor cRows = make_identity_tensor(Shape<Int<kM>, Int<kD>>{});
  Tensor cCols = make_identity_tensor(Shape<Int<kN>, Int<kD>>{});
  Tensor tQcQ = gthr.partition_S(cRows);
  Tensor tKcK = gthr.partition_S(cCols);

  const MaskView mask = mask_view(p.mask, b * p.heads_q + h, p.seq_q, p.seq_kv, p.mask.tiles_fwd, kM, kN);
  const int64_t n_blocks = (p.seq_kv + kN - 1) / kN;
  auto next_block = [&](int64_t n) {
    while (n < n_blocks && mask.tile_class(q0, kM, n * kN, kN, m_block, n) == kTileEmpty) ++n;
    return n;
  };
  auto load_kv = [&](int64_t n, int stage) {
    Tensor sK = make_tensor(make_smem_ptr(kv_base + (2 * stage) * T::kColTileElems), typename T::SmemCols{});
    Tensor sV = make_tensor(make_smem_ptr(kv_base + (2 * stage + 1) * T::kColTileElems), typename T::SmemCols{});
    Tensor gK = local_tile(mK, Shape<Int<kN>, Int<kD>>{}, make_coord(n, 0));
    Tensor gV = local_tile(mV, Shape<Int<kN>, Int<kD>>{}, make_coord(n, 0));
    Tensor dK = gthr.partition_D(sK);
    Tensor dV = gthr.partition_D(sV);
    load_rows(gcopy, gthr.partition_S(gK), dK, tKcK, p.seq_kv - n * kN);
    load_rows(gcopy, gthr.partition_S(gV), dV, tKcK, p.seq_kv - n * kN);
  };

  {
    Tensor dQ = gthr.partition_D(sQ);
    load_rows(gcopy, gthr.partition_S(gQ), dQ, tQcQ, p.seq_q - q0);
  }
  int64_t n = next_block(0);
  if (n < n_blocks) load_kv(n, 0);
  cute::cp_async_fence();

  typename T::TiledMma mma;
  auto thr = mma.get_thread_slice(tid);
  Tensor acc_o = partition_fragment_C(mma, Shape<Int<kM>, Int<kD>>{});
  clear(acc_o);
  Tensor cS = make_identity_tensor(Shape<Int<kM>, Int<kN>>{});
  Tensor tScS = thr.partition_C(cS);
  Tensor tScS_rc = make_tensor(tScS.data(), rowcol(tScS.layout()));
  constexpr int kRowsPerThread = decltype(size<0>(rowcol(tScS.layout())))::value;
  float row_max[kRowsPerThread], row_sum[kRowsPerThread];
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) row_max[r] = -INFINITY, row_sum[r] = 0.f;

  auto load_a = make_tiled_copy_A(typename T::LoadAtom{}, mma);
  auto load_b = make_tiled_copy_B(typename T::LoadAtom{}, mma);
  auto load_bt = make_tiled_copy_B(typename T::LoadAtomT{}, mma);
  auto thr_a = load_a.get_thread_slice(tid);
  auto thr_b = load_b.get_thread_slice(tid);
  auto thr_bt = load_bt.get_thread_slice(tid);
  Tensor tSsQ = thr_a.partition_S(sQ);
  Tensor tSrQ = thr.partition_fragment_A(sQ);

  const bool cap = p.softcap > 0.f;
  const float score_factor = cap ? p.scale / p.softcap : p.scale * kLog2e;
  const float cap_factor = p.softcap * kLog2e;

  int stage = 0;
  while (n < n_blocks) {
    const int64_t n_next = next_block(n + 1);
    if (n_next < n_blocks) load_kv(n_next, stage ^ 1);
    cute::cp_async_fence();
    cute::cp_async_wait<1>();
    __syncthreads();

    Tensor sK = make_tensor(make_smem_ptr(kv_base + (2 * stage) * T::kColTileElems), typename T::SmemCols{});
    Tensor sVt = make_tensor(make_smem_ptr(kv_base + (2 * stage + 1) * T::kColTileElems), typename T::SmemColsT{});
    Tensor sVtNoSwizzle = make_tensor(make_smem_ptr(kv_base + (2 * stage + 1) * T::kColTileElems), typename T::SmemColsTNoSwizzle{});

    Tensor acc_s = partition_fragment_C(mma, Shape<Int<kM>, Int<kN>>{});
    clear(acc_s);
    Tensor tSrK = thr.partition_fragment_B(sK);
    gemm_ss(acc_s, tSrQ, tSrK, tSsQ, thr_b.partition_S(sK), mma, load_a, load_b, thr_a, thr_b);

    // Scores in log2 units, masked to -inf.
    Tensor s = make_tensor(acc_s.data(), rowcol(acc_s.layout()));
    const uint8_t cls = mask.tile_class(q0, kM, n * kN, kN, m_block, n);
#pragma unroll
    for (int i = 0; i < size(acc_s); ++i) {
      float x = acc_s(i) * score_factor;
      if (cap) x = tanhf(x) * cap_factor;
      acc_s(i) = x;
    }
    if (cls != kTileFull) {
#pragma unroll
      for (int i = 0; i < size(acc_s); ++i)
        if (!mask.visible(q0 + get<0>(tScS(i)), n * kN + get<1>(tScS(i)))) acc_s(i) = -INFINITY;
    }
    Tensor o_rc = make_tensor(acc_o.data(), rowcol(acc_o.layout()));
#pragma unroll
    for (int r = 0; r < kRowsPerThread; ++r) {
      float mx = row_max[r];
#pragma unroll
      for (int c = 0; c < size<1>(s); ++c) mx = fmaxf(mx, s(r, c));
      mx = quad_max(mx);
      const float base = mx == -INFINITY ? 0.f : mx;
      const float correction = exp2f(row_max[r] - base);  // 0 when nothing was seen yet
      row_max[r] = mx;
      float sum = 0.f;
#pragma unroll
      for (int c = 0; c < size<1>(s); ++c) {
        s(r, c) = exp2f(s(r, c) - base);
        sum += s(r, c);
      }
      row_sum[r] = row_sum[r] * correction + sum;
#pragma unroll
      for (int c = 0; c < size<1>(o_rc); ++c) o_rc(r, c) *= correction;
    }

    // O += P V, P rounded to the element type.
    Tensor rP = converted<E>(acc_s);
    Tensor tOrP = make_tensor(rP.data(), as_operand_a(rP.layout()));
    Tensor tOrVt = thr.partition_fragment_B(sVtNoSwizzle);
    gemm_rs(acc_o, tOrP, tOrVt, thr_bt.partition_S(sVt), mma, load_bt, thr_bt);
    __syncthreads();  // this stage is refilled two tiles from now
    stage ^= 1;
    n = n_next;
  }
  cute::cp_async_wait<0>();

  // Epilogue: O /= l, LSE = (m + log2 l) ln 2.
  Tensor o_rc = make_tensor(acc_o.data(), rowcol(acc_o.layout()));
  const int lane = tid % 32;
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) {
    const float l = quad_sum(row_sum[r]);
    const float inv = l > 0.f ? 1.f / l : 0.f;
#pragma unroll
    for (int c = 0; c < size<1>(o_rc); ++c) o_rc(r, c) *= inv;
    const int64_t row = q0 + get<0>(tScS_rc(r, 0));
    if (lane % 4 == 0 && row < p.seq_q) {
      const float lse = l > 0.f ? (row_max[r] + log2f(l)) * kLn2 : -INFINITY;
      params.a.lse[b * params.a.lse_strides.batch + h * params.a.lse_strides.head + row * params.a.lse_strides.row] = lse;
    }
  }
  Tensor cO = make_identity_tensor(Shape<Int<kM>, Int<kD>>{});
  Tensor tOcO = thr.partition_C(cO);
  E* o_head = static_cast<E*>(params.a.o) + b * params.a.o_strides.batch + h * params.a.o_strides.head;
  store_tile(acc_o, tOcO, o_head, params.a.o_strides.row, q0, p.seq_q, 1.f);
}

}  // namespace attnfuzz::flash
