#pragma once
// The fused forward on sm_90a (wgmma): one block of two warpgroups per (128-query tile,
// query head, batch); each warpgroup owns 64 query rows. Q stays in shared memory; K and V
// tiles of 128 keys stream through two-stage cp.async pipelines, skipping tiles the mask
// hides. Per tile: S = Q K^T (SS wgmma), the online softmax in registers, O += P V (RS wgmma,
// P from registers), software-pipelined so that a tile's softmax runs while the previous
// tile's P V is on the tensor cores (the loop below). Online softmax on the logits S = unit * u, where u is the raw product
// Q K^T (unit = scale; a positive scale keeps the maximum where it is) or, under a softcap c,
// u = c tanh(Q K^T scale / c) (unit = 1):
//   m' = max(m, rowmax u),  l' = l e^(unit (m - m')) + rowsum e^(unit (u - m')),  O' likewise
// with m = -inf treated as 0 in the exponents, so a row that has seen no visible key keeps
// l = 0 and O = 0; at the end LSE = unit m + ln l (in double, once per row), or -inf when
// l = 0. Each e^x is 2^x' with x' = u (unit log2 e) - m (unit log2 e), one fma: the row
// maximum and the LSE never go through the log2 domain, whose two extra roundings at the
// LSE's magnitude made the softcapped LSE miss its fp32 contract (docs/kernels.md).
// A ragged batch (Problem::ragged): a block past its sequence's queries returns at once; the
// sequence's rows are offset into the packed tensors. A paged cache (Problem::pages): each K and V
// row is copied from its page (load_rows_gathered), the rest as above.
#include <cutlass/arch/barrier.h>

#include "kernels/flash/flash_common.cuh"
#include "kernels/flash/flash_gmma.cuh"
#include "kernels/flash/flash_traits.h"

namespace attnfuzz::flash {

struct ForwardParams {
  Problem p;
  ForwardArgs a;
  int group = 1;  // planes per group of the block order (block_tile; schedule_group on the host)
};

// Ping-pong between the block's two warpgroups (named barriers 1 and 2; __syncthreads is 0):
// a warpgroup issues its products only in its turn and then hands the turn over, so one
// warpgroup's softmax runs while the other's products occupy the tensor cores.
#ifndef ATTNFUZZ_FLASH_FWD_PINGPONG
#define ATTNFUZZ_FLASH_FWD_PINGPONG 1
#endif
struct PingPong {
  int mine, other;  // barrier ids
  __device__ explicit PingPong(int warpgroup) : mine(1 + warpgroup), other(2 - warpgroup) {}
  __device__ __forceinline__ void wait_turn() const {
    if (ATTNFUZZ_FLASH_FWD_PINGPONG) asm volatile("bar.sync %0, 256;" ::"r"(mine) : "memory");
  }
  __device__ __forceinline__ void pass_turn() const {
    if (ATTNFUZZ_FLASH_FWD_PINGPONG) asm volatile("bar.arrive %0, 256;" ::"r"(other) : "memory");
  }
};

template <class T, bool kRagged>
__global__ void __launch_bounds__(T::kThreads, 1) forward_kernel(const ForwardParams params) {
  using namespace cute;
  using E = typename T::Element;
  constexpr int kM = T::kRows, kN = T::kCols, kD = T::kHeadDim;
  const Problem& p = params.p;
  const int tid = threadIdx.x;
  // The last query tiles first: under a causal mask they have the most keys, so the long
  // blocks start early and the short ones fill the tail.
  const BlockTile bt = block_tile(params.group, true);
  const int64_t m_block = bt.tile, h = bt.head, b = bt.batch, h_kv = h / (p.heads_q / p.heads_kv);
  const int64_t q0 = m_block * kM;
  const SequenceRows<kRagged> seq(p, b);
  if (kRagged && q0 >= seq.sq()) return;  // past a ragged batch entry's queries (the grid is sized by the longest)

  extern __shared__ __align__(1024) char smem_raw[];
  E* smem = reinterpret_cast<E*>(smem_raw);
  Tensor sQ = make_tensor(make_smem_ptr(smem), typename T::SmemQ{});
  E* kv_base = smem + T::kRowTileElems;  // [K0][K1][V0][V1]: K and V stages advance separately
  auto k_tile = [&](int stage) { return kv_base + stage * T::kColTileElems; };
  auto v_tile = [&](int stage) { return kv_base + (2 + stage) * T::kColTileElems; };

  Tensor mQ = head_view<kD, E>(p.q, p.q_strides, b, h, seq.q_start(), seq.sq());
  // A paged cache's K and V: these views (page 0) give the tiles' layouts; the rows come from the table.
  const bool paged = kRagged && p.pages.table != nullptr;
  Tensor mK = head_view<kD, E>(p.k, p.k_strides, paged ? 0 : b, h_kv, seq.kv_start(), seq.skv());
  Tensor mV = head_view<kD, E>(p.v, p.v_strides, paged ? 0 : b, h_kv, seq.kv_start(), seq.skv());
  Tensor gQ = local_tile(mQ, Shape<Int<kM>, Int<kD>>{}, make_coord(m_block, 0));

  typename T::GmemCopy gcopy;
  auto gthr = gcopy.get_thread_slice(tid);
  Tensor tQcQ = gthr.partition_S(make_identity_tensor(Shape<Int<kM>, Int<kD>>{}));
  Tensor tKcK = gthr.partition_S(make_identity_tensor(Shape<Int<kN>, Int<kD>>{}));

  const MaskView mask = mask_view<kRagged>(p.mask, b, b * p.heads_q + h, seq.sq(), seq.skv(), p.mask.tiles_fwd, kM, kN);
  const int64_t n_blocks = (seq.skv() + kN - 1) / kN;
  auto next_block = [&](int64_t n) {
    while (n < n_blocks && mask.tile_class(q0, kM, n * kN, kN, m_block, n) == kTileEmpty) ++n;
    return n;
  };
  // Key j of this sequence in a paged cache: row j % page_size of page table[b][j / page_size].
  auto paged_row = [&](const void* base, const Strides& s, int64_t j) {
    const int64_t page = p.pages.table[b * p.pages.table_stride + j / p.pages.page_size];
    return const_cast<E*>(static_cast<const E*>(base)) + page * s.batch + h_kv * s.head + (j % p.pages.page_size) * s.row;
  };
  auto load_kv_tile = [&](const auto& mX, const void* base, const Strides& s, auto& dst, int64_t n) {
    auto src = gthr.partition_S(local_tile(mX, Shape<Int<kN>, Int<kD>>{}, make_coord(n, 0)));
    if (paged)
      load_rows_gathered(gcopy, src, dst, tKcK, seq.skv() - n * kN, [&](int r) { return paged_row(base, s, n * kN + r); });
    else
      load_tile<kN>(gcopy, src, dst, tKcK, seq.skv() - n * kN);
  };
  auto load_k = [&](int64_t n, int stage) {
    Tensor dK = gthr.partition_D(make_tensor(make_smem_ptr(k_tile(stage)), typename T::SmemK{}));
    load_kv_tile(mK, p.k, p.k_strides, dK, n);
  };
  auto load_v = [&](int64_t n, int stage) {
    Tensor dV = gthr.partition_D(make_tensor(make_smem_ptr(v_tile(stage)), typename T::SmemV{}));
    load_kv_tile(mV, p.v, p.v_strides, dV, n);
  };
  // Every copy this thread issued, but for its last `pending` commit groups, is in shared
  // memory, and everyone's is.
  auto landed = [](auto pending) {
    cute::cp_async_wait<decltype(pending)::value>();
    cutlass::arch::fence_view_async_shared();  // cp.async's (and the zero fills') writes, seen by wgmma
    __syncthreads();
  };

  typename T::MmaS mma_s;
  typename T::MmaO mma_o;
  auto thr_s = mma_s.get_thread_slice(tid);
  auto thr_o = mma_o.get_thread_slice(tid);
  Tensor tSrQ = thr_s.partition_fragment_A(sQ);  // wgmma descriptors, not registers
  Tensor acc_o = partition_fragment_C(mma_o, Shape<Int<kM>, Int<kD>>{});
  clear(acc_o);
  Tensor acc_s = partition_fragment_C(mma_s, Shape<Int<kM>, Int<kN>>{});
  Tensor rP = make_tensor<E>(acc_s.layout());  // P of the tile whose P V is in flight
  Tensor tOrP = make_tensor(rP.data(), as_operand_a_gmma(rP.layout()));
  Tensor tScS = thr_s.partition_C(make_identity_tensor(Shape<Int<kM>, Int<kN>>{}));
  Tensor tScS_rc = make_tensor(tScS.data(), rowcol_gmma(tScS.layout()));
  constexpr int kRowsPerThread = decltype(size<0>(rowcol_gmma(tScS.layout())))::value;
  float row_max[kRowsPerThread], row_sum[kRowsPerThread], correction[kRowsPerThread];
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) row_max[r] = -INFINITY, row_sum[r] = 0.f;

  const bool cap = p.softcap > 0.f, raw = !cap && p.scale > 0.f;  // raw: u is the product itself
  const float pre = cap ? p.scale / p.softcap : p.scale;           // unless raw, u = pre QK^T (then c tanh)
  const float unit = raw ? p.scale : 1.f;
  const float exp_factor = unit * kLog2e;

  // The online softmax of tile n's scores in acc_s: P (fp32) left in acc_s, m and l updated,
  // O's factor e^(unit (m - m')) left in `correction` (O itself may still be in flight).
  auto softmax = [&](int64_t n) {
    Tensor s = make_tensor(acc_s.data(), rowcol_gmma(acc_s.layout()));
    if (!raw) {
#pragma unroll
      for (int i = 0; i < size(acc_s); ++i) {
        float x = acc_s(i) * pre;
        if (cap) x = tanhf(x) * p.softcap;
        acc_s(i) = x;
      }
    }
    if (mask.tile_class(q0, kM, n * kN, kN, m_block, n) != kTileFull) {
      if (mask.dense) {
#pragma unroll
        for (int i = 0; i < size(acc_s); ++i)
          if (!mask.visible(q0 + get<0>(tScS(i)), n * kN + get<1>(tScS(i)))) acc_s(i) = -INFINITY;
      } else {  // a band: 32-bit offsets from this thread's first element (the causal diagonal's tiles)
        const int r0 = get<0>(tScS(0)), c0 = get<1>(tScS(0));
        const BandTile band = band_tile(mask, q0 + r0, n * kN + c0);
#pragma unroll
        for (int i = 0; i < size(acc_s); ++i)
          if (!band.visible(get<0>(tScS(i)) - r0, get<1>(tScS(i)) - c0)) acc_s(i) = -INFINITY;
      }
    }
#pragma unroll
    for (int r = 0; r < kRowsPerThread; ++r) {
      float mx = row_max[r];
#pragma unroll
      for (int c = 0; c < size<1>(s); ++c) mx = fmaxf(mx, s(r, c));
      mx = quad_max(mx);
      const float base = mx == -INFINITY ? 0.f : mx;
      correction[r] = fast_exp2((row_max[r] - base) * exp_factor);  // 0 when nothing was seen yet
      row_max[r] = mx;
      const float base_log2 = base * exp_factor;
      float sum = 0.f;
#pragma unroll
      for (int c = 0; c < size<1>(s); ++c) {
        s(r, c) = fast_exp2(fmaf(s(r, c), exp_factor, -base_log2));
        sum += s(r, c);
      }
      row_sum[r] = row_sum[r] * correction[r] + sum;
      correction[r] = Planted::o_rescale(correction[r], n * kN);
    }
  };
  // O *= correction, then the next P V's operand: P rounded to the element type.
  auto rescale_and_round = [&] {
    Tensor o_rc = make_tensor(acc_o.data(), rowcol_gmma(acc_o.layout()));
#pragma unroll
    for (int r = 0; r < kRowsPerThread; ++r)
#pragma unroll
      for (int c = 0; c < size<1>(o_rc); ++c) o_rc(r, c) *= correction[r];
#pragma unroll
    for (int i = 0; i < size(acc_s); ++i) rP(i) = static_cast<E>(acc_s(i));
  };

  // Warpgroup 0 takes the first turn: warpgroup 1 hands it over up front, and warpgroup 0
  // takes the last hand-over after the loop, so every arrival is matched.
  const PingPong turn(tid / 128);
  if (tid >= 128) turn.pass_turn();

  // Software pipeline over the visible key tiles t_0, t_1, ...: iteration j issues
  // S(t_j+1) = Q K^T and O += P(t_j) V(t_j) back to back, then runs t_j+1's softmax while
  // the tensor cores work on P(t_j) V(t_j). K(t_j+2) and V(t_j+1) load meanwhile, into the
  // stages that S(t_j) and P(t_j-1) V(t_j-1) have released.
  {
    Tensor dQ = gthr.partition_D(sQ);
    load_tile<kM>(gcopy, gthr.partition_S(gQ), dQ, tQcQ, seq.sq() - q0);
  }
  int64_t n = next_block(0);
  int64_t n1 = n < n_blocks ? next_block(n + 1) : n_blocks;
  // Two commit groups: the first product waits for Q and K(t_0) only, not for V(t_0), K(t_1).
  if (n < n_blocks) load_k(n, 0);
  cute::cp_async_fence();
  if (n < n_blocks) load_v(n, 0);
  if (n1 < n_blocks) load_k(n1, 1);
  cute::cp_async_fence();
  int stage_of_last = 0;  // the stages of the last visible tile's K and V
  if (n < n_blocks) {
    landed(Int<1>{});
    turn.wait_turn();
    wgmma_issue<true>(mma_s, tSrQ, thr_s.partition_fragment_B(make_tensor(make_smem_ptr(k_tile(0)), typename T::SmemK{})), acc_s);
    turn.pass_turn();
    wgmma_wait(acc_s);
    softmax(n);
    rescale_and_round();
  }
  for (int j = 0; n1 < n_blocks; ++j) {
    const int cur = j & 1, nxt = cur ^ 1;  // K(t_j+1) sits in K stage nxt, V(t_j) in V stage cur
    landed(Int<0>{});  // V(t_j), K(t_j+1) are in; S(t_j) and P(t_j-1) V(t_j-1) are done in both warpgroups
    turn.wait_turn();
    wgmma_issue<true>(mma_s, tSrQ, thr_s.partition_fragment_B(make_tensor(make_smem_ptr(k_tile(nxt)), typename T::SmemK{})), acc_s);
    wgmma_issue<false>(mma_o, tOrP, thr_o.partition_fragment_B(make_tensor(make_smem_ptr(v_tile(cur)), typename T::SmemVt{})), acc_o);
    turn.pass_turn();
    // The next loads' address arithmetic runs while the tensor cores work, not before.
    const int64_t n2 = next_block(n1 + 1);
    load_v(n1, nxt);
    if (n2 < n_blocks) load_k(n2, cur);
    cute::cp_async_fence();
    cute::warpgroup_wait<1>();  // S(t_j+1) is done; P(t_j) V(t_j) may still run
    cute::warpgroup_fence_operand(acc_s);
    softmax(n1);
    wgmma_wait(acc_o);
    cute::warpgroup_fence_operand(rP);  // P(t_j) was read by the tensor cores until here
    rescale_and_round();
    n = n1;
    n1 = n2;
    stage_of_last = nxt;
  }
  if (n < n_blocks) {  // the last tile's P V
    landed(Int<0>{});
    turn.wait_turn();
    wgmma_issue<false>(mma_o, tOrP, thr_o.partition_fragment_B(make_tensor(make_smem_ptr(v_tile(stage_of_last)), typename T::SmemVt{})), acc_o);
    turn.pass_turn();
    wgmma_wait(acc_o);
    cute::warpgroup_fence_operand(rP);
  }
  cute::cp_async_wait<0>();  // Q's copy, when every tile was empty
  if (tid < 128) turn.wait_turn();

  // Epilogue: O /= l, LSE = unit m + ln l.
  Tensor o_rc = make_tensor(acc_o.data(), rowcol_gmma(acc_o.layout()));
  const int lane = tid % 32;
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) {
    const float l = quad_sum(row_sum[r]);
    const float inv = l > 0.f ? 1.f / l : 0.f;
#pragma unroll
    for (int c = 0; c < size<1>(o_rc); ++c) o_rc(r, c) *= inv;
    const int64_t row = q0 + get<0>(tScS_rc(r, 0));
    if (lane % 4 == 0 && row < seq.sq()) {
      const float lse = l > 0.f ? static_cast<float>(static_cast<double>(row_max[r]) * unit + log(static_cast<double>(l))) : -INFINITY;
      params.a.lse[b * params.a.lse_strides.batch + h * params.a.lse_strides.head + (seq.q_start() + row) * params.a.lse_strides.row] = lse;
    }
  }
  Tensor tOcO = thr_o.partition_C(make_identity_tensor(Shape<Int<kM>, Int<kD>>{}));
  E* o_head = static_cast<E*>(params.a.o) + b * params.a.o_strides.batch + h * params.a.o_strides.head + seq.q_start() * params.a.o_strides.row;
  store_tile(acc_o, tOcO, o_head, params.a.o_strides.row, q0, seq.sq(), 1.f);
}

}  // namespace attnfuzz::flash
