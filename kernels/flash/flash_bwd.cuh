#pragma once
// The fused backward on sm_90a (wgmma), deterministic (no atomics): a preprocessing pass,
// then two kernels that each own what they write (tile shapes: BackwardTraits).
//   rows:  D'_i = rowsum(dO * O)_i - dLSE_i,  L2_i = LSE_i log2 e (+inf where LSE = -inf, so
//          that P = 2^(S log2 e - L2) = 0 on a row with no visible key: no gradient flows)
//   dK dV: one block per (key tile, kv head, batch), looping over the group's query heads and
//          their query tiles in a fixed order:  S^T = K Q^T,  dP^T = V dO^T,
//          P^T = 2^(S^T log2 e - L2),  dS^T = P^T (dP^T - D') [(1 - tanh^2)],
//          dV += P^T dO,  dK += dS^T Q;  at the end dK *= scale.
//   dQ:    one block per (query tile, query head, batch), looping over key tiles:
//          the same S, P, dP, dS, and dQ += dS K;  at the end dQ *= scale.
// The scores are computed twice (once per kernel): the price of having no atomics.
// A ragged batch (Problem::ragged): rows and blocks past a sequence's lengths return at once, and
// the workspace keeps the dense [B][Hq][seq_q] indexing (seq_q: the longest). No paged cache.
#include "kernels/flash/flash_common.cuh"
#include "kernels/flash/flash_gmma.cuh"
#include "kernels/flash/flash_traits.h"

#include <type_traits>

namespace attnfuzz::flash {

struct BackwardParams {
  Problem p;
  BackwardArgs a;
  float* rows_l2;     // [B][Hq][Sq]
  float* rows_delta;  // [B][Hq][Sq]
  int group_dkdv = 1, group_dq = 1;  // planes per group of each kernel's block order (block_tile)
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
  if (p.ragged.lens_q && i >= p.ragged.lens_q[b]) return;  // past a ragged batch entry's queries
  const int64_t row = (p.ragged.lens_q ? p.ragged.starts_q[b] : 0) + i;  // in the tensors
  const E* o = static_cast<const E*>(a.o) + b * a.o_strides.batch + h * a.o_strides.head + row * a.o_strides.row;
  const E* d_out = static_cast<const E*>(a.d_out) + b * a.d_out_strides.batch + h * a.d_out_strides.head + row * a.d_out_strides.row;
  float acc = 0.f;
  for (int d = lane; d < Planted::delta_columns<kD>(); d += 32) acc += static_cast<float>(o[d]) * static_cast<float>(d_out[d]);
  for (int off = 16; off; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (lane == 0) {
    const float g = a.d_lse ? a.d_lse[b * a.d_lse_strides.batch + h * a.d_lse_strides.head + row * a.d_lse_strides.row] : 0.f;
    const float lse = a.lse[b * a.lse_strides.batch + h * a.lse_strides.head + row * a.lse_strides.row];
    params.rows_delta[r] = Planted::delta(acc, g);
    params.rows_l2[r] = lse == -INFINITY ? INFINITY : lse * kLog2e;
  }
}

// Scores -> P and dS in place (acc_s becomes P, acc_dp becomes dS), given the L2 and D' of
// each element's query and whether the element is visible.
struct ScoreGrad {
  float score_factor, cap_factor;
  bool cap;
  template <bool kCap>
  __device__ __forceinline__ void apply(float& s, float& dp, float l2, float delta, bool visible) const {
    float pr, dtanh = 1.f;
    if constexpr (kCap) {
      const float t = tanhf(s * score_factor);
      dtanh = 1.f - t * t;
      pr = fast_exp2(t * cap_factor - l2);
    } else {
      pr = fast_exp2(fmaf(s, score_factor, -l2));
    }
    pr = visible ? pr : 0.f;
    s = pr;
    dp = kCap ? pr * (dp - delta) * dtanh : pr * (dp - delta);
  }
  // f(masked, capped), both compile-time constants: the element loop is compiled once per
  // case, with no per-element branch on either (a full tile reads no mask).
  template <class F>
  __device__ __forceinline__ void dispatch(bool masked, F&& f) const {
    using Yes = std::true_type;
    using No = std::false_type;
    if (cap)
      masked ? f(Yes{}, Yes{}) : f(No{}, Yes{});
    else
      masked ? f(Yes{}, No{}) : f(No{}, No{});
  }
};

__device__ __forceinline__ ScoreGrad score_grad(const Problem& p) {
  const bool cap = p.softcap > 0.f;
  return {cap ? p.scale / p.softcap : p.scale * kLog2e, p.softcap * kLog2e, cap};
}

// The class of mask unit (tq, tk), kU x kU (the unit the host classified the dense mask in,
// backward_tile()); empty when it starts past either sequence (a block's last warpgroup).
template <int kU>
__device__ __forceinline__ uint8_t unit_class(const MaskView& mask, int64_t tq, int64_t tk) {
  if (tq * kU >= mask.sq || tk * kU >= mask.skv) return kTileEmpty;
  return mask.tile_class(tq * kU, kU, tk * kU, kU, tq, tk);
}
__device__ __forceinline__ bool visible_in(uint8_t cls, const MaskView& mask, int64_t i, int64_t j) {
  return cls == kTileFull || (cls == kTilePartial && mask.visible(i, j));
}

// The loop of both gradient kernels over their visible column tiles c_0, c_1, ... (tile c_j in
// shared-memory slot j mod kStages, kStages = 3; each tile loads while the previous one is
// computed).
//   next(t): the first visible tile at or after t (end: none);  load(t, slot);
//   scores(slot): S, dP issued (two commit groups);  elementwise(t, slot): P, dS in fp32;
//   round(): P, dS to 16-bit operands;  grads(slot): the gradient products issued (kGradGroups commit groups)
// kOverlap (software pipeline): iteration j issues the score products of c_j+1 and the
// gradient products of c_j back to back, loads c_j+2 into the slot that c_j-1 released, and
// runs c_j+1's element-wise step while c_j's gradient products are still on the tensor cores;
// then waits for them and rounds P, dS into the operands of c_j+1's gradient products. A slot
// is read by two iterations (scores, then gradients), hence three. The price is registers:
// the gradient operands of c_j stay live during c_j+1's element-wise step, which the dK/dV
// kernel at D = 128 cannot afford (it spilled, and ptxas serialized its wgmma), so it runs
// without: scores, element-wise step, gradients, one tile after the other.
template <int kStages, int kGradGroups, bool kOverlap, class Next, class Load, class Scores, class Elementwise, class Round, class Grads>
__device__ __forceinline__ void gradient_loop(int64_t end, Next next, Load load, Scores scores, Elementwise elementwise, Round round,
                                              Grads grads) {
  static_assert(kStages == 3, "c_j+2 goes into c_j-1's slot");
  auto next_slot = [](int slot) { return slot == kStages - 1 ? 0 : slot + 1; };
  int64_t cur = next(0);
  int64_t nxt = cur < end ? next(cur + 1) : end;
  if (cur < end) load(cur, 0);
  if (kOverlap && nxt < end) load(nxt, 1);
  cute::cp_async_fence();
  int slot = 0;
  if constexpr (kOverlap) {
    if (cur < end) {
      landed();
      scores(0);
      cute::warpgroup_wait<0>();
      elementwise(cur, 0);
      round();
    }
    while (nxt < end) {
      const int slot_nxt = next_slot(slot), slot_free = next_slot(slot_nxt);
      landed();  // c_j+1 is in; every product that read slot_free (c_j-1's) is done in both warpgroups
      scores(slot_nxt);
      grads(slot);
      // The next loads' address arithmetic runs while the tensor cores work.
      const int64_t nxt2 = next(nxt + 1);
      if (nxt2 < end) load(nxt2, slot_free);
      cute::cp_async_fence();
      cute::warpgroup_wait<kGradGroups>();  // the scores of c_j+1 are done; c_j's gradient products may still run
      elementwise(nxt, slot_nxt);
      cute::warpgroup_wait<0>();
      round();
      cur = nxt;
      nxt = nxt2;
      slot = slot_nxt;
    }
    if (cur < end) {
      grads(slot);
      cute::warpgroup_wait<0>();
    }
  } else {
    while (cur < end) {
      landed();  // c_j is in; the products of c_j-1 are done in both warpgroups
      scores(slot);
      if (nxt < end) load(nxt, next_slot(slot));
      cute::cp_async_fence();
      cute::warpgroup_wait<0>();
      elementwise(cur, slot);
      round();
      grads(slot);
      cute::warpgroup_wait<0>();
      cur = nxt;
      nxt = nxt < end ? next(nxt + 1) : end;
      slot = next_slot(slot);
    }
  }
  cute::cp_async_wait<0>();  // the row tile's copies, when no tile was visible
}

// ---- dK, dV: rows = keys (64 per warpgroup), columns = queries ----
template <class T, bool kRagged>
__global__ void __launch_bounds__(T::kThreads, 1) backward_dkdv_kernel(const BackwardParams params) {
  using namespace cute;
  using E = typename T::Element;
  constexpr int kN = T::kRows, kM = T::kCols, kD = T::kHeadDim, kU = T::kMaskTile, kStages = T::kStages;  // kN keys per block, kM queries per step
  static_assert(kM == kU && kN % kU == 0, "a step is one mask unit per warpgroup");
  const Problem& p = params.p;
  const BackwardArgs& a = params.a;
  const int tid = threadIdx.x;
  // The first key tiles first: under a causal mask they have the most queries.
  const BlockTile bt = block_tile(params.group_dkdv, false);
  const int64_t n_block = bt.tile, h_kv = bt.head, b = bt.batch, group = p.heads_q / p.heads_kv;
  const int64_t k0 = n_block * kN, tk_mine = Planted::dkdv_unit_column(n_block, kN / kU, tid / 128);  // this warpgroup's mask unit column
  const SequenceRows<kRagged> seq(p, b);
  if (kRagged && k0 >= seq.skv()) return;  // past a ragged batch entry's keys

  extern __shared__ __align__(1024) char smem_raw[];
  E* smem = reinterpret_cast<E*>(smem_raw);
  Tensor sK = make_tensor(make_smem_ptr(smem), typename T::SmemRows{});
  Tensor sV = make_tensor(make_smem_ptr(smem + T::kRowTileElems), typename T::SmemRows{});
  E* col_base = smem + 2 * T::kRowTileElems;  // slots: [Q][dO] each, then per slot [L2][D'] of the columns
  auto q_tile = [&](int slot) { return col_base + (2 * slot) * T::kColTileElems; };
  auto do_tile = [&](int slot) { return col_base + (2 * slot + 1) * T::kColTileElems; };
  float* col_rows = reinterpret_cast<float*>(col_base + 2 * kStages * T::kColTileElems);

  typename T::GmemCopy gcopy;
  auto gthr = gcopy.get_thread_slice(tid);
  Tensor tRc = gthr.partition_S(make_identity_tensor(Shape<Int<kN>, Int<kD>>{}));
  Tensor tCc = gthr.partition_S(make_identity_tensor(Shape<Int<kM>, Int<kD>>{}));
  {
    Tensor gK =
        local_tile(head_view<kD, E>(p.k, p.k_strides, b, h_kv, seq.kv_start(), seq.skv()), Shape<Int<kN>, Int<kD>>{}, make_coord(n_block, 0));
    Tensor gV =
        local_tile(head_view<kD, E>(p.v, p.v_strides, b, h_kv, seq.kv_start(), seq.skv()), Shape<Int<kN>, Int<kD>>{}, make_coord(n_block, 0));
    Tensor dK = gthr.partition_D(sK);
    Tensor dV = gthr.partition_D(sV);
    load_tile<kN>(gcopy, gthr.partition_S(gK), dK, tRc, seq.skv() - k0);
    load_tile<kN>(gcopy, gthr.partition_S(gV), dV, tRc, seq.skv() - k0);
  }

  // Steps: (query head of the group, query tile), in order; a step no warpgroup sees is skipped.
  const int64_t m_blocks = (seq.sq() + kM - 1) / kM, steps = group * m_blocks;  // no step: dK = dV = 0
  auto head_of = [&](int64_t step) { return h_kv * group + step / m_blocks; };
  auto view_of = [&](int64_t step) {
    return mask_view<kRagged>(p.mask, b, b * p.heads_q + head_of(step), seq.sq(), seq.skv(), p.mask.tiles_bwd, kU, kU);
  };
  auto next_step = [&](int64_t s) {
    for (; s < steps; ++s) {
      const MaskView v = view_of(s);
      bool seen = false;
#pragma unroll
      for (int w = 0; w < kN / kU; ++w) seen |= unit_class<kU>(v, s % m_blocks, n_block * (kN / kU) + w) != kTileEmpty;
      if (seen) break;
    }
    return s;
  };
  auto load_cols = [&](int64_t step, int slot) {
    const int64_t h = head_of(step), m = step % m_blocks, q0 = m * kM;
    Tensor gQ = local_tile(head_view<kD, E>(p.q, p.q_strides, b, h, seq.q_start(), seq.sq()), Shape<Int<kM>, Int<kD>>{}, make_coord(m, 0));
    Tensor gdO =
        local_tile(head_view<kD, E>(a.d_out, a.d_out_strides, b, h, seq.q_start(), seq.sq()), Shape<Int<kM>, Int<kD>>{}, make_coord(m, 0));
    Tensor dQ = gthr.partition_D(make_tensor(make_smem_ptr(q_tile(slot)), typename T::SmemCols{}));
    Tensor ddO = gthr.partition_D(make_tensor(make_smem_ptr(do_tile(slot)), typename T::SmemCols{}));
    load_tile<kM>(gcopy, gthr.partition_S(gQ), dQ, tCc, seq.sq() - q0);
    load_tile<kM>(gcopy, gthr.partition_S(gdO), ddO, tCc, seq.sq() - q0);
    if (tid < 2 * kM) {  // the columns' L2 (threads 0 .. kM-1) and D' (kM .. 2 kM-1)
      const int64_t i = q0 + tid % kM;
      float* dst = col_rows + slot * 2 * kM + tid;
      if (i < seq.sq())
        cp_async_4(dst, (tid < kM ? params.rows_l2 : params.rows_delta) + (b * p.heads_q + h) * p.seq_q + i);
      else
        *dst = tid < kM ? INFINITY : 0.f;  // P = 0 on a query past the sequence
    }
  };

  typename T::MmaS mma_s;
  typename T::MmaG mma_g;
  auto thr_s = mma_s.get_thread_slice(tid);
  auto thr_g = mma_g.get_thread_slice(tid);
  Tensor tSrK = thr_s.partition_fragment_A(sK);  // wgmma descriptors, not registers
  Tensor tSrV = thr_s.partition_fragment_A(sV);
  Tensor acc_dk = partition_fragment_C(mma_g, Shape<Int<kN>, Int<kD>>{});
  Tensor acc_dv = partition_fragment_C(mma_g, Shape<Int<kN>, Int<kD>>{});
  clear(acc_dk);
  clear(acc_dv);
  Tensor acc_s = partition_fragment_C(mma_s, Shape<Int<kN>, Int<kM>>{});
  Tensor acc_dp = partition_fragment_C(mma_s, Shape<Int<kN>, Int<kM>>{});
  Tensor rP = make_tensor<E>(acc_s.layout());
  Tensor rdS = make_tensor<E>(acc_dp.layout());
  Tensor tGrP = make_tensor(rP.data(), as_operand_a_gmma(rP.layout()));
  Tensor tGrdS = make_tensor(rdS.data(), as_operand_a_gmma(rdS.layout()));
  Tensor tScS = thr_s.partition_C(make_identity_tensor(Shape<Int<kN>, Int<kM>>{}));
  const ScoreGrad sg = score_grad(p);

  // S^T = K Q^T, dP^T = V dO^T.
  auto scores = [&](int slot) {
    wgmma_issue<true>(mma_s, tSrK, thr_s.partition_fragment_B(make_tensor(make_smem_ptr(q_tile(slot)), typename T::SmemCols{})), acc_s);
    wgmma_issue<true>(mma_s, tSrV, thr_s.partition_fragment_B(make_tensor(make_smem_ptr(do_tile(slot)), typename T::SmemCols{})), acc_dp);
  };
  // P^T and dS^T, per query column: its L2 and D' from the slot.
  auto elementwise = [&](int64_t step, int slot) {
    warpgroup_fence_operand(acc_s);
    warpgroup_fence_operand(acc_dp);
    const int64_t q0 = (step % m_blocks) * kM;
    const MaskView mask = view_of(step);
    const uint8_t cls = unit_class<kU>(mask, step % m_blocks, tk_mine);
    const float* l2 = col_rows + slot * 2 * kM;
    const float* delta = l2 + kM;
    auto loop = [&](auto masked, auto capped, auto visible) {  // visible(key r, query c), read when masked
#pragma unroll
      for (int i = 0; i < size(acc_s); ++i) {
        const int r = get<0>(tScS(i)), c = get<1>(tScS(i));
        const bool vis = !decltype(masked)::value || visible(r, c);
        sg.apply<decltype(capped)::value>(acc_s(i), acc_dp(i), l2[c], delta[c], vis);
      }
    };
    sg.dispatch(cls != kTileFull, [&](auto masked, auto capped) {
      if constexpr (decltype(masked)::value) {
        if (!mask.dense) {  // a band: 32-bit offsets from this thread's first element (key r0, query c0)
          const int r0 = get<0>(tScS(0)), c0 = get<1>(tScS(0));
          const BandTile band = band_tile(mask, q0 + c0, k0 + r0);
          const bool partial = cls == kTilePartial;
          loop(masked, capped, [&](int r, int c) { return partial && band.visible(c - c0, r - r0); });
          return;
        }
      }
      loop(masked, capped, [&](int r, int c) { return visible_in(cls, mask, q0 + c, k0 + r); });
    });
  };
  auto round = [&] {
    warpgroup_fence_operand(acc_dv);
    warpgroup_fence_operand(acc_dk);
    warpgroup_fence_operand(rP);
    warpgroup_fence_operand(rdS);
#pragma unroll
    for (int i = 0; i < size(acc_s); ++i) {
      rP(i) = static_cast<E>(acc_s(i));
      rdS(i) = static_cast<E>(acc_dp(i));
    }
  };
  // dV += P^T dO, dK += dS^T Q (16-bit operands from registers, fp32 accumulation).
  auto grads = [&](int slot) {
    wgmma_issue<false>(mma_g, tGrP, thr_g.partition_fragment_B(make_tensor(make_smem_ptr(do_tile(slot)), typename T::SmemColsT{})), acc_dv);
    wgmma_issue<false>(mma_g, tGrdS, thr_g.partition_fragment_B(make_tensor(make_smem_ptr(q_tile(slot)), typename T::SmemColsT{})), acc_dk);
  };
  gradient_loop<kStages, 2, false>(steps, next_step, load_cols, scores, elementwise, round, grads);
  warpgroup_fence_operand(acc_dv);
  warpgroup_fence_operand(acc_dk);

  Tensor tGcG = thr_g.partition_C(make_identity_tensor(Shape<Int<kN>, Int<kD>>{}));
  E* dk = static_cast<E*>(a.dk) + b * a.dk_strides.batch + h_kv * a.dk_strides.head + seq.kv_start() * a.dk_strides.row;
  E* dv = static_cast<E*>(a.dv) + b * a.dv_strides.batch + h_kv * a.dv_strides.head + seq.kv_start() * a.dv_strides.row;
  store_tile(acc_dk, tGcG, dk, a.dk_strides.row, k0, seq.skv(), p.scale);
  store_tile(acc_dv, tGcG, dv, a.dv_strides.row, k0, seq.skv(), 1.f);
}

// ---- dQ: rows = queries (64 per warpgroup), columns = keys ----
template <class T, bool kRagged>
__global__ void __launch_bounds__(T::kThreads, 1) backward_dq_kernel(const BackwardParams params) {
  using namespace cute;
  using E = typename T::Element;
  constexpr int kM = T::kRows, kN = T::kCols, kD = T::kHeadDim, kU = T::kMaskTile, kStages = T::kStages;
  static_assert(kN == kU && kM % kU == 0, "a step is one mask unit per warpgroup");
  const Problem& p = params.p;
  const BackwardArgs& a = params.a;
  const int tid = threadIdx.x;
  // The last query tiles first: under a causal mask they have the most keys.
  const BlockTile bt = block_tile(params.group_dq, true);
  const int64_t m_block = bt.tile, h = bt.head, b = bt.batch, h_kv = h / (p.heads_q / p.heads_kv);
  const int64_t q0 = m_block * kM, tq_mine = m_block * (kM / kU) + tid / 128;  // this warpgroup's mask unit row
  const SequenceRows<kRagged> seq(p, b);
  if (kRagged && q0 >= seq.sq()) return;  // past a ragged batch entry's queries

  extern __shared__ __align__(1024) char smem_raw[];
  E* smem = reinterpret_cast<E*>(smem_raw);
  Tensor sQ = make_tensor(make_smem_ptr(smem), typename T::SmemRows{});
  Tensor sdO = make_tensor(make_smem_ptr(smem + T::kRowTileElems), typename T::SmemRows{});
  E* col_base = smem + 2 * T::kRowTileElems;  // slots: [K][V] each
  auto k_tile = [&](int slot) { return col_base + (2 * slot) * T::kColTileElems; };
  auto v_tile = [&](int slot) { return col_base + (2 * slot + 1) * T::kColTileElems; };

  typename T::GmemCopy gcopy;
  auto gthr = gcopy.get_thread_slice(tid);
  Tensor tRc = gthr.partition_S(make_identity_tensor(Shape<Int<kM>, Int<kD>>{}));
  Tensor tCc = gthr.partition_S(make_identity_tensor(Shape<Int<kN>, Int<kD>>{}));
  {
    Tensor gQ =
        local_tile(head_view<kD, E>(p.q, p.q_strides, b, h, seq.q_start(), seq.sq()), Shape<Int<kM>, Int<kD>>{}, make_coord(m_block, 0));
    Tensor gdO = local_tile(head_view<kD, E>(a.d_out, a.d_out_strides, b, h, seq.q_start(), seq.sq()), Shape<Int<kM>, Int<kD>>{},
                            make_coord(m_block, 0));
    Tensor dQ = gthr.partition_D(sQ);
    Tensor ddO = gthr.partition_D(sdO);
    load_tile<kM>(gcopy, gthr.partition_S(gQ), dQ, tRc, seq.sq() - q0);
    load_tile<kM>(gcopy, gthr.partition_S(gdO), ddO, tRc, seq.sq() - q0);
  }
  Tensor mK = head_view<kD, E>(p.k, p.k_strides, b, h_kv, seq.kv_start(), seq.skv());
  Tensor mV = head_view<kD, E>(p.v, p.v_strides, b, h_kv, seq.kv_start(), seq.skv());
  const MaskView mask = mask_view<kRagged>(p.mask, b, b * p.heads_q + h, seq.sq(), seq.skv(), p.mask.tiles_bwd, kU, kU);
  const int64_t n_blocks = (seq.skv() + kN - 1) / kN;
  auto next_block = [&](int64_t n) {
    for (; n < n_blocks; ++n) {
      bool seen = false;
#pragma unroll
      for (int w = 0; w < kM / kU; ++w) seen |= unit_class<kU>(mask, m_block * (kM / kU) + w, n) != kTileEmpty;
      if (seen) break;
    }
    return n;
  };
  auto load_kv = [&](int64_t n, int slot) {
    Tensor dK = gthr.partition_D(make_tensor(make_smem_ptr(k_tile(slot)), typename T::SmemCols{}));
    Tensor dV = gthr.partition_D(make_tensor(make_smem_ptr(v_tile(slot)), typename T::SmemCols{}));
    load_tile<kN>(gcopy, gthr.partition_S(local_tile(mK, Shape<Int<kN>, Int<kD>>{}, make_coord(n, 0))), dK, tCc, seq.skv() - n * kN);
    load_tile<kN>(gcopy, gthr.partition_S(local_tile(mV, Shape<Int<kN>, Int<kD>>{}, make_coord(n, 0))), dV, tCc, seq.skv() - n * kN);
  };

  typename T::MmaS mma_s;
  typename T::MmaG mma_g;
  auto thr_s = mma_s.get_thread_slice(tid);
  auto thr_g = mma_g.get_thread_slice(tid);
  Tensor tSrQ = thr_s.partition_fragment_A(sQ);
  Tensor tSrdO = thr_s.partition_fragment_A(sdO);
  Tensor acc_dq = partition_fragment_C(mma_g, Shape<Int<kM>, Int<kD>>{});
  clear(acc_dq);
  Tensor acc_s = partition_fragment_C(mma_s, Shape<Int<kM>, Int<kN>>{});
  Tensor acc_dp = partition_fragment_C(mma_s, Shape<Int<kM>, Int<kN>>{});
  Tensor rdS = make_tensor<E>(acc_dp.layout());
  Tensor tGrdS = make_tensor(rdS.data(), as_operand_a_gmma(rdS.layout()));
  Tensor tScS = thr_s.partition_C(make_identity_tensor(Shape<Int<kM>, Int<kN>>{}));
  Tensor tScS_rc = make_tensor(tScS.data(), rowcol_gmma(tScS.layout()));
  constexpr int kRowsPerThread = decltype(size<0>(rowcol_gmma(tScS.layout())))::value;
  float row_l2[kRowsPerThread], row_delta[kRowsPerThread];
  const int64_t row_base = (b * p.heads_q + h) * p.seq_q;
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) {
    const int64_t i = q0 + get<0>(tScS_rc(r, 0));
    row_l2[r] = i < seq.sq() ? params.rows_l2[row_base + i] : INFINITY;
    row_delta[r] = i < seq.sq() ? params.rows_delta[row_base + i] : 0.f;
  }
  const ScoreGrad sg = score_grad(p);

  // S = Q K^T, dP = dO V^T.
  auto scores = [&](int slot) {
    wgmma_issue<true>(mma_s, tSrQ, thr_s.partition_fragment_B(make_tensor(make_smem_ptr(k_tile(slot)), typename T::SmemCols{})), acc_s);
    wgmma_issue<true>(mma_s, tSrdO, thr_s.partition_fragment_B(make_tensor(make_smem_ptr(v_tile(slot)), typename T::SmemCols{})), acc_dp);
  };
  auto elementwise = [&](int64_t n, int) {
    warpgroup_fence_operand(acc_s);
    warpgroup_fence_operand(acc_dp);
    const uint8_t cls = unit_class<kU>(mask, tq_mine, n);
    Tensor s = make_tensor(acc_s.data(), rowcol_gmma(acc_s.layout()));
    Tensor dp = make_tensor(acc_dp.data(), rowcol_gmma(acc_dp.layout()));
    // The masked case reads the mask per element (MaskView, int64): the 32-bit band test the
    // forward and the dK/dV kernel use (BandTile) took this kernel past its registers (464-byte
    // stack frame, 586 spill instructions at D = 128), so it stays out.
    sg.dispatch(cls != kTileFull, [&](auto masked, auto capped) {
#pragma unroll
      for (int r = 0; r < size<0>(s); ++r)
#pragma unroll
        for (int c = 0; c < size<1>(s); ++c) {
          const bool vis = !decltype(masked)::value ||
                           visible_in(cls, mask, q0 + get<0>(tScS_rc(r, c)), n * kN + get<1>(tScS_rc(r, c)));
          sg.apply<decltype(capped)::value>(s(r, c), dp(r, c), row_l2[r], row_delta[r], vis);
        }
    });
  };
  auto round = [&] {
    warpgroup_fence_operand(acc_dq);
    warpgroup_fence_operand(rdS);
#pragma unroll
    for (int i = 0; i < size(acc_dp); ++i) rdS(i) = static_cast<E>(acc_dp(i));
  };
  // dQ += dS K.
  auto grads = [&](int slot) {
    wgmma_issue<false>(mma_g, tGrdS, thr_g.partition_fragment_B(make_tensor(make_smem_ptr(k_tile(slot)), typename T::SmemColsT{})), acc_dq);
  };
  gradient_loop<kStages, 1, true>(n_blocks, next_block, load_kv, scores, elementwise, round, grads);
  warpgroup_fence_operand(acc_dq);

  Tensor tGcG = thr_g.partition_C(make_identity_tensor(Shape<Int<kM>, Int<kD>>{}));
  E* dq = static_cast<E*>(a.dq) + b * a.dq_strides.batch + h * a.dq_strides.head + seq.q_start() * a.dq_strides.row;
  store_tile(acc_dq, tGcG, dq, a.dq_strides.row, q0, seq.sq(), p.scale);
}

}  // namespace attnfuzz::flash
