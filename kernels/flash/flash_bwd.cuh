#pragma once
// The fused backward, deterministic (no atomics): a preprocessing pass, then two kernels that
// each own what they write.
//   rows:  D'_i = rowsum(dO * O)_i - dLSE_i,  L2_i = LSE_i log2 e (+inf where LSE = -inf, so
//          that P = 2^(S log2 e - L2) = 0 on a row with no visible key: no gradient flows)
//   dK dV: one block per (key tile, kv head, batch), looping over the group's query heads and
//          their query tiles in a fixed order:  S^T = K Q^T,  dP^T = V dO^T,
//          P^T = 2^(S^T log2 e - L2),  dS^T = P^T (dP^T - D') [(1 - tanh^2)],
//          dV += P^T dO,  dK += dS^T Q;  at the end dK *= scale.
//   dQ:    one block per (query tile, query head, batch), looping over key tiles:
//          the same S, P, dP, dS, and dQ += dS K;  at the end dQ *= scale.
// The scores are computed twice (once per kernel): the price of having no atomics.
#include "kernels/flash/flash_common.cuh"
#include "kernels/flash/flash_traits.h"

namespace attnfuzz::flash {

struct BackwardParams {
  Problem p;
  BackwardArgs a;
  float* rows_l2;     // [B][Hq][Sq]
  float* rows_delta;  // [B][Hq][Sq]
};

// One warp per row: D' and L2.
template <int kD, class E>
__global__ void backward_rows_kernel(const BackwardParams params) {
  const Problem& p = params.p;
  const BackwardArgs& a = params.a;
  const int64_t rows = p.batch * p.heads_q * p.seq_q;
  const int64_t r = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  const int64_t i = r % p.seq_q, h = (r / p.seq_q) % p.heads_q, b = r / (p.seq_q * p.heads_q);
  const E* o = static_cast<const E*>(a.o) + b * a.o_strides.batch + h * a.o_strides.head + i * a.o_strides.row;
  const E* d_out = static_cast<const E*>(a.d_out) + b * a.d_out_strides.batch + h * a.d_out_strides.head + i * a.d_out_strides.row;
  float acc = 0.f;
  for (int d = lane; d < kD; d += 32) acc += static_cast<float>(o[d]) * static_cast<float>(d_out[d]);
  for (int off = 16; off; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (lane == 0) {
    const float g = a.d_lse ? a.d_lse[b * a.d_lse_strides.batch + h * a.d_lse_strides.head + i * a.d_lse_strides.row] : 0.f;
    const float lse = a.lse[b * a.lse_strides.batch + h * a.lse_strides.head + i * a.lse_strides.row];
#if ATTNFUZZ_FLASH_MUTANT == 1
    params.rows_delta[r] = acc;
    (void)g;
#else
    params.rows_delta[r] = acc - g;
#endif
    params.rows_l2[r] = lse == -INFINITY ? INFINITY : lse * kLog2e;
  }
}

// Scores -> P and dS in place (acc_s becomes P, acc_dp becomes dS), given the L2 and D' of
// each element's query and whether the element is visible.
struct ScoreGrad {
  float score_factor, cap_factor;
  bool cap;
  __device__ __forceinline__ void apply(float& s, float& dp, float l2, float delta, bool visible) const {
    float x = s * score_factor, dtanh = 1.f;
    if (cap) {
      const float t = tanhf(x);
      dtanh = 1.f - t * t;
      x = t * cap_factor;
    }
    const float pr = visible ? exp2f(x - l2) : 0.f;
    s = pr;
    dp = pr * (dp - delta) * dtanh;
  }
};

__device__ __forceinline__ ScoreGrad score_grad(const Problem& p) {
  const bool cap = p.softcap > 0.f;
  return {cap ? p.scale / p.softcap : p.scale * kLog2e, p.softcap * kLog2e, cap};
}

// ---- dK, dV: rows = keys, columns = queries ----
template <class T>
__global__ void __launch_bounds__(T::kThreads, T::kMinBlocks) backward_dkdv_kernel(const BackwardParams params) {
  using namespace cute;
  using E = typename T::Element;
  constexpr int kN = T::kRows, kM = T::kCols, kD = T::kHeadDim;  // kN keys per block, kM queries per step
  const Problem& p = params.p;
  const BackwardArgs& a = params.a;
  const int tid = threadIdx.x;
  const int64_t n_block = blockIdx.x, h_kv = blockIdx.y, b = blockIdx.z, group = p.heads_q / p.heads_kv;
  const int64_t k0 = n_block * kN;

  extern __shared__ __align__(1024) char smem_raw[];
  E* smem = reinterpret_cast<E*>(smem_raw);
  Tensor sK = make_tensor(make_smem_ptr(smem), typename T::SmemRows{});
  Tensor sV = make_tensor(make_smem_ptr(smem + T::kRowTileElems), typename T::SmemRows{});
  E* col_base = smem + 2 * T::kRowTileElems;  // stages: [Q0][dO0][Q1][dO1]

  typename T::GmemCopy gcopy;
  auto gthr = gcopy.get_thread_slice(tid);
  Tensor cRows = make_identity_tensor(Shape<Int<kN>, Int<kD>>{});
  Tensor cCols = make_identity_tensor(Shape<Int<kM>, Int<kD>>{});
  Tensor tRc = gthr.partition_S(cRows);
  Tensor tCc = gthr.partition_S(cCols);
  {
    Tensor gK = local_tile(head_view<kD, E>(p.k, p.k_strides, b, h_kv, p.seq_kv), Shape<Int<kN>, Int<kD>>{}, make_coord(n_block, 0));
    Tensor gV = local_tile(head_view<kD, E>(p.v, p.v_strides, b, h_kv, p.seq_kv), Shape<Int<kN>, Int<kD>>{}, make_coord(n_block, 0));
    Tensor dK = gthr.partition_D(sK);
    Tensor dV = gthr.partition_D(sV);
    load_rows(gcopy, gthr.partition_S(gK), dK, tRc, p.seq_kv - k0);
    load_rows(gcopy, gthr.partition_S(gV), dV, tRc, p.seq_kv - k0);
  }

  // Steps: (query head of the group, query tile), in order.
  const int64_t m_blocks = (p.seq_q + kM - 1) / kM, steps = group * m_blocks;
  auto head_of = [&](int64_t step) { return h_kv * group + step / m_blocks; };
  auto view_of = [&](int64_t step) {
    return mask_view(p.mask, b * p.heads_q + head_of(step), p.seq_q, p.seq_kv, p.mask.tiles_bwd, kM, kN);
  };
  auto next_step = [&](int64_t s) {
    for (; s < steps; ++s) {
      const int64_t m = s % m_blocks;
      if (view_of(s).tile_class(m * kM, kM, k0, kN, m, n_block) != kTileEmpty) break;
    }
    return s;
  };
  auto load_cols = [&](int64_t step, int stage) {
    const int64_t h = head_of(step), m = step % m_blocks;
    Tensor sQ = make_tensor(make_smem_ptr(col_base + (2 * stage) * T::kColTileElems), typename T::SmemCols{});
    Tensor sdO = make_tensor(make_smem_ptr(col_base + (2 * stage + 1) * T::kColTileElems), typename T::SmemCols{});
    Tensor gQ = local_tile(head_view<kD, E>(p.q, p.q_strides, b, h, p.seq_q), Shape<Int<kM>, Int<kD>>{}, make_coord(m, 0));
    Tensor gdO = local_tile(head_view<kD, E>(a.d_out, a.d_out_strides, b, h, p.seq_q), Shape<Int<kM>, Int<kD>>{}, make_coord(m, 0));
    Tensor dQ = gthr.partition_D(sQ);
    Tensor ddO = gthr.partition_D(sdO);
    load_rows(gcopy, gthr.partition_S(gQ), dQ, tCc, p.seq_q - m * kM);
    load_rows(gcopy, gthr.partition_S(gdO), ddO, tCc, p.seq_q - m * kM);
  };

  int64_t step = next_step(0);
  if (step < steps) load_cols(step, 0);
  cute::cp_async_fence();

  typename T::TiledMma mma;
  auto thr = mma.get_thread_slice(tid);
  Tensor acc_dk = partition_fragment_C(mma, Shape<Int<kN>, Int<kD>>{});
  Tensor acc_dv = partition_fragment_C(mma, Shape<Int<kN>, Int<kD>>{});
  clear(acc_dk);
  clear(acc_dv);
  Tensor cS = make_identity_tensor(Shape<Int<kN>, Int<kM>>{});
  Tensor tScS = thr.partition_C(cS);
  Tensor tScS_rc = make_tensor(tScS.data(), rowcol(tScS.layout()));
  constexpr int kColsPerThread = decltype(size<1>(rowcol(tScS.layout())))::value;

  auto load_a = make_tiled_copy_A(typename T::LoadAtom{}, mma);
  auto load_b = make_tiled_copy_B(typename T::LoadAtom{}, mma);
  auto load_bt = make_tiled_copy_B(typename T::LoadAtomT{}, mma);
  auto thr_a = load_a.get_thread_slice(tid);
  auto thr_b = load_b.get_thread_slice(tid);
  auto thr_bt = load_bt.get_thread_slice(tid);
  Tensor tSsK = thr_a.partition_S(sK);
  Tensor tSsV = thr_a.partition_S(sV);
  Tensor tSrK = thr.partition_fragment_A(sK);
  Tensor tSrV = thr.partition_fragment_A(sV);
  const ScoreGrad sg = score_grad(p);

  int stage = 0;
  while (step < steps) {
    const int64_t step_next = next_step(step + 1);
    if (step_next < steps) load_cols(step_next, stage ^ 1);
    cute::cp_async_fence();
    cute::cp_async_wait<1>();
    __syncthreads();

    const int64_t h = head_of(step), m = step % m_blocks, q0 = m * kM;
    E* stage_q = col_base + (2 * stage) * T::kColTileElems;
    E* stage_do = col_base + (2 * stage + 1) * T::kColTileElems;
    Tensor sQ = make_tensor(make_smem_ptr(stage_q), typename T::SmemCols{});
    Tensor sdO = make_tensor(make_smem_ptr(stage_do), typename T::SmemCols{});

    Tensor acc_s = partition_fragment_C(mma, Shape<Int<kN>, Int<kM>>{});
    Tensor acc_dp = partition_fragment_C(mma, Shape<Int<kN>, Int<kM>>{});
    clear(acc_s);
    clear(acc_dp);
    Tensor tSrQ = thr.partition_fragment_B(sQ);
    gemm_ss(acc_s, tSrK, tSrQ, tSsK, thr_b.partition_S(sQ), mma, load_a, load_b, thr_a, thr_b);
    Tensor tSrdO = thr.partition_fragment_B(sdO);
    gemm_ss(acc_dp, tSrV, tSrdO, tSsV, thr_b.partition_S(sdO), mma, load_a, load_b, thr_a, thr_b);

    // Per query column: its L2 and D'.
    const int64_t row_base = (b * p.heads_q + h) * p.seq_q;
    float col_l2[kColsPerThread], col_delta[kColsPerThread];
#pragma unroll
    for (int c = 0; c < kColsPerThread; ++c) {
      const int64_t i = q0 + get<1>(tScS_rc(0, c));
      col_l2[c] = i < p.seq_q ? params.rows_l2[row_base + i] : INFINITY;
      col_delta[c] = i < p.seq_q ? params.rows_delta[row_base + i] : 0.f;
    }
    const MaskView mask = view_of(step);
    const bool full = mask.tile_class(q0, kM, k0, kN, m, n_block) == kTileFull;
    Tensor s = make_tensor(acc_s.data(), rowcol(acc_s.layout()));
    Tensor dp = make_tensor(acc_dp.data(), rowcol(acc_dp.layout()));
#pragma unroll
    for (int r = 0; r < size<0>(s); ++r)
#pragma unroll
      for (int c = 0; c < size<1>(s); ++c) {
        const bool vis = full || mask.visible(q0 + get<1>(tScS_rc(r, c)), k0 + get<0>(tScS_rc(r, c)));
        sg.apply(s(r, c), dp(r, c), col_l2[c], col_delta[c], vis);
      }

    // dV += P^T dO, dK += dS^T Q (16-bit operands, fp32 accumulation).
    Tensor rP = converted<E>(acc_s);
    Tensor rdS = converted<E>(acc_dp);
    Tensor sdOt = make_tensor(make_smem_ptr(stage_do), typename T::SmemColsT{});
    Tensor sQt = make_tensor(make_smem_ptr(stage_q), typename T::SmemColsT{});
    Tensor tOrdOt = thr.partition_fragment_B(make_tensor(make_smem_ptr(stage_do), typename T::SmemColsTNoSwizzle{}));
    Tensor tOrQt = thr.partition_fragment_B(make_tensor(make_smem_ptr(stage_q), typename T::SmemColsTNoSwizzle{}));
    gemm_rs(acc_dv, make_tensor(rP.data(), as_operand_a(rP.layout())), tOrdOt, thr_bt.partition_S(sdOt), mma, load_bt, thr_bt);
    gemm_rs(acc_dk, make_tensor(rdS.data(), as_operand_a(rdS.layout())), tOrQt, thr_bt.partition_S(sQt), mma, load_bt, thr_bt);
    __syncthreads();
    stage ^= 1;
    step = step_next;
  }
  cute::cp_async_wait<0>();

  Tensor cO = make_identity_tensor(Shape<Int<kN>, Int<kD>>{});
  Tensor tOcO = thr.partition_C(cO);
  E* dk = static_cast<E*>(a.dk) + b * a.dk_strides.batch + h_kv * a.dk_strides.head;
  E* dv = static_cast<E*>(a.dv) + b * a.dv_strides.batch + h_kv * a.dv_strides.head;
  store_tile(acc_dk, tOcO, dk, a.dk_strides.row, k0, p.seq_kv, p.scale);
  store_tile(acc_dv, tOcO, dv, a.dv_strides.row, k0, p.seq_kv, 1.f);
}

// ---- dQ: rows = queries, columns = keys ----
template <class T>
__global__ void __launch_bounds__(T::kThreads, T::kMinBlocks) backward_dq_kernel(const BackwardParams params) {
  using namespace cute;
  using E = typename T::Element;
  constexpr int kM = T::kRows, kN = T::kCols, kD = T::kHeadDim;
  const Problem& p = params.p;
  const BackwardArgs& a = params.a;
  const int tid = threadIdx.x;
  const int64_t m_block = blockIdx.x, h = blockIdx.y, b = blockIdx.z, h_kv = h / (p.heads_q / p.heads_kv);
  const int64_t q0 = m_block * kM;

  extern __shared__ __align__(1024) char smem_raw[];
  E* smem = reinterpret_cast<E*>(smem_raw);
  Tensor sQ = make_tensor(make_smem_ptr(smem), typename T::SmemRows{});
  Tensor sdO = make_tensor(make_smem_ptr(smem + T::kRowTileElems), typename T::SmemRows{});
  E* col_base = smem + 2 * T::kRowTileElems;  // stages: [K0][V0][K1][V1]

  typename T::GmemCopy gcopy;
  auto gthr = gcopy.get_thread_slice(tid);
  Tensor cRows = make_identity_tensor(Shape<Int<kM>, Int<kD>>{});
  Tensor cCols = make_identity_tensor(Shape<Int<kN>, Int<kD>>{});
  Tensor tRc = gthr.partition_S(cRows);
  Tensor tCc = gthr.partition_S(cCols);
  {
    Tensor gQ = local_tile(head_view<kD, E>(p.q, p.q_strides, b, h, p.seq_q), Shape<Int<kM>, Int<kD>>{}, make_coord(m_block, 0));
    Tensor gdO = local_tile(head_view<kD, E>(a.d_out, a.d_out_strides, b, h, p.seq_q), Shape<Int<kM>, Int<kD>>{}, make_coord(m_block, 0));
    Tensor dQ = gthr.partition_D(sQ);
    Tensor ddO = gthr.partition_D(sdO);
    load_rows(gcopy, gthr.partition_S(gQ), dQ, tRc, p.seq_q - q0);
    load_rows(gcopy, gthr.partition_S(gdO), ddO, tRc, p.seq_q - q0);
  }
  Tensor mK = head_view<kD, E>(p.k, p.k_strides, b, h_kv, p.seq_kv);
  Tensor mV = head_view<kD, E>(p.v, p.v_strides, b, h_kv, p.seq_kv);
  const MaskView mask = mask_view(p.mask, b * p.heads_q + h, p.seq_q, p.seq_kv, p.mask.tiles_bwd, kM, kN);
  const int64_t n_blocks = (p.seq_kv + kN - 1) / kN;
  auto next_block = [&](int64_t n) {
    while (n < n_blocks && mask.tile_class(q0, kM, n * kN, kN, m_block, n) == kTileEmpty) ++n;
    return n;
  };
  auto load_kv = [&](int64_t n, int stage) {
    Tensor sK = make_tensor(make_smem_ptr(col_base + (2 * stage) * T::kColTileElems), typename T::SmemCols{});
    Tensor sV = make_tensor(make_smem_ptr(col_base + (2 * stage + 1) * T::kColTileElems), typename T::SmemCols{});
    Tensor dK = gthr.partition_D(sK);
    Tensor dV = gthr.partition_D(sV);
    load_rows(gcopy, gthr.partition_S(local_tile(mK, Shape<Int<kN>, Int<kD>>{}, make_coord(n, 0))), dK, tCc, p.seq_kv - n * kN);
    load_rows(gcopy, gthr.partition_S(local_tile(mV, Shape<Int<kN>, Int<kD>>{}, make_coord(n, 0))), dV, tCc, p.seq_kv - n * kN);
  };
  int64_t n = next_block(0);
  if (n < n_blocks) load_kv(n, 0);
  cute::cp_async_fence();

  typename T::TiledMma mma;
  auto thr = mma.get_thread_slice(tid);
  Tensor acc_dq = partition_fragment_C(mma, Shape<Int<kM>, Int<kD>>{});
  clear(acc_dq);
  Tensor cS = make_identity_tensor(Shape<Int<kM>, Int<kN>>{});
  Tensor tScS = thr.partition_C(cS);
  Tensor tScS_rc = make_tensor(tScS.data(), rowcol(tScS.layout()));
  constexpr int kRowsPerThread = decltype(size<0>(rowcol(tScS.layout())))::value;
  float row_l2[kRowsPerThread], row_delta[kRowsPerThread];
  const int64_t row_base = (b * p.heads_q + h) * p.seq_q;
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) {
    const int64_t i = q0 + get<0>(tScS_rc(r, 0));
    row_l2[r] = i < p.seq_q ? params.rows_l2[row_base + i] : INFINITY;
    row_delta[r] = i < p.seq_q ? params.rows_delta[row_base + i] : 0.f;
  }

  auto load_a = make_tiled_copy_A(typename T::LoadAtom{}, mma);
  auto load_b = make_tiled_copy_B(typename T::LoadAtom{}, mma);
  auto load_bt = make_tiled_copy_B(typename T::LoadAtomT{}, mma);
  auto thr_a = load_a.get_thread_slice(tid);
  auto thr_b = load_b.get_thread_slice(tid);
  auto thr_bt = load_bt.get_thread_slice(tid);
  Tensor tSsQ = thr_a.partition_S(sQ);
  Tensor tSsdO = thr_a.partition_S(sdO);
  Tensor tSrQ = thr.partition_fragment_A(sQ);
  Tensor tSrdO = thr.partition_fragment_A(sdO);
  const ScoreGrad sg = score_grad(p);

  int stage = 0;
  while (n < n_blocks) {
    const int64_t n_next = next_block(n + 1);
    if (n_next < n_blocks) load_kv(n_next, stage ^ 1);
    cute::cp_async_fence();
    cute::cp_async_wait<1>();
    __syncthreads();

    E* stage_k = col_base + (2 * stage) * T::kColTileElems;
    E* stage_v = col_base + (2 * stage + 1) * T::kColTileElems;
    Tensor sK = make_tensor(make_smem_ptr(stage_k), typename T::SmemCols{});
    Tensor sV = make_tensor(make_smem_ptr(stage_v), typename T::SmemCols{});
    Tensor acc_s = partition_fragment_C(mma, Shape<Int<kM>, Int<kN>>{});
    Tensor acc_dp = partition_fragment_C(mma, Shape<Int<kM>, Int<kN>>{});
    clear(acc_s);
    clear(acc_dp);
    Tensor tSrK = thr.partition_fragment_B(sK);
    gemm_ss(acc_s, tSrQ, tSrK, tSsQ, thr_b.partition_S(sK), mma, load_a, load_b, thr_a, thr_b);
    Tensor tSrV = thr.partition_fragment_B(sV);
    gemm_ss(acc_dp, tSrdO, tSrV, tSsdO, thr_b.partition_S(sV), mma, load_a, load_b, thr_a, thr_b);

    const bool full = mask.tile_class(q0, kM, n * kN, kN, m_block, n) == kTileFull;
    Tensor s = make_tensor(acc_s.data(), rowcol(acc_s.layout()));
    Tensor dp = make_tensor(acc_dp.data(), rowcol(acc_dp.layout()));
#pragma unroll
    for (int r = 0; r < size<0>(s); ++r)
#pragma unroll
      for (int c = 0; c < size<1>(s); ++c) {
        const bool vis = full || mask.visible(q0 + get<0>(tScS_rc(r, c)), n * kN + get<1>(tScS_rc(r, c)));
        sg.apply(s(r, c), dp(r, c), row_l2[r], row_delta[r], vis);
      }

    // dQ += dS K.
    Tensor rdS = converted<E>(acc_dp);
    Tensor sKt = make_tensor(make_smem_ptr(stage_k), typename T::SmemColsT{});
    Tensor tOrKt = thr.partition_fragment_B(make_tensor(make_smem_ptr(stage_k), typename T::SmemColsTNoSwizzle{}));
    gemm_rs(acc_dq, make_tensor(rdS.data(), as_operand_a(rdS.layout())), tOrKt, thr_bt.partition_S(sKt), mma, load_bt, thr_bt);
    __syncthreads();
    stage ^= 1;
    n = n_next;
  }
  cute::cp_async_wait<0>();

  Tensor cO = make_identity_tensor(Shape<Int<kM>, Int<kD>>{});
  Tensor tOcO = thr.partition_C(cO);
  E* dq = static_cast<E*>(a.dq) + b * a.dq_strides.batch + h * a.dq_strides.head;
  store_tile(acc_dq, tOcO, dq, a.dq_strides.row, q0, p.seq_q, p.scale);
}

}  // namespace attnfuzz::flash
