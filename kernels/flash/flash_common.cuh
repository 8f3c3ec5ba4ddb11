#pragma once
// Device pieces every flash kernel shares: the mask (band or dense, by tile class), the
// global -> shared copies with out-of-range rows zeroed, quad reductions, the tile store.
// (The wgmma pieces are in flash_gmma.cuh.)
#include <cutlass/numeric_conversion.h>
#include <cute/tensor.hpp>

#include <cmath>
#include <cstdint>

#include "kernels/flash/flash.h"
#include "kernels/flash/flash_hooks.cuh"

namespace attnfuzz::flash {

// Device-side kernel parameters: Problem and Mask with plain pointers.
struct TensorRef {
  const void* ptr;
  Strides s;
};

// Whether (query i, key j) is visible, and which class a tile is, for one (batch, head) plane.
struct MaskView {
  int64_t left, right, diagonal;
  const uint8_t* dense;  // this plane's [Sq][Skv], or nullptr (band)
  const uint8_t* tiles;  // this plane's [tiles_q][tiles_kv] (dense only)
  int64_t sq, skv, tiles_kv;

  __device__ __forceinline__ bool visible(int64_t i, int64_t j) const {
    if (i >= sq || j >= skv) return false;
    if (dense) return dense[i * skv + j] != 0;
    const int64_t d = j - i - diagonal;
    return (left < 0 || d >= -left + Planted::window_edge) && (right < 0 || d <= right);
  }
  // Tile [q0, q0 + nq) x [k0, k0 + nk), of index (tq, tk) in tiles of that shape.
  __device__ __forceinline__ uint8_t tile_class(int64_t q0, int nq, int64_t k0, int nk, int64_t tq, int64_t tk) const {
    uint8_t c;
    if (dense) {
      c = tiles[tq * tiles_kv + tk];
    } else {
      const int64_t q1 = q0 + nq - 1, k1 = k0 + nk - 1;
      const int64_t dmin = k0 - q1 - diagonal, dmax = k1 - q0 - diagonal;  // of j - i - diagonal over the tile
      if ((left >= 0 && dmax < -left) || (right >= 0 && dmin > right))
        c = kTileEmpty;
      else
        c = ((left < 0 || dmin >= -left) && (right < 0 || dmax <= right)) ? kTileFull : kTilePartial;
    }
    // A tile reaching past the sequences is checked element by element.
    if (c == kTileFull && (q0 + nq > sq || k0 + nk > skv)) c = kTilePartial;
    return c;
  }
};

// The band test of one tile in 32-bit offsets (dr, dc) from a thread's first element
// (q, k) = (q0 + r0, k0 + c0) of the tile: with d = j - i - diagonal = (k - q - diagonal) + dc - dr,
//   visible iff lo <= dc - dr <= hi,  dr < rows,  dc < cols
// (lo, hi, rows, cols clamped to +-2^30, which no in-tile offset reaches). The same test as
// MaskView::visible's band case, without its int64 arithmetic per element: dr and dc are
// compile-time constants in an unrolled loop over a thread's accumulator.
struct BandTile {
  int lo, hi, rows, cols;
  __device__ __forceinline__ bool visible(int dr, int dc) const {
    const int d = dc - dr;
    return d >= lo && d <= hi && dr < rows && dc < cols;
  }
};

__device__ __forceinline__ int clamp_offset(int64_t x) {
  constexpr int64_t kBig = int64_t{1} << 30;
  return static_cast<int>(x < -kBig ? -kBig : (x > kBig ? kBig : x));
}

// mask: a band (dense == nullptr).
__device__ __forceinline__ BandTile band_tile(const MaskView& mask, int64_t q, int64_t k) {
  const int64_t base = k - q - mask.diagonal;
  return {mask.left < 0 ? -(1 << 30) : clamp_offset(-mask.left + Planted::window_edge - base), mask.right < 0 ? (1 << 30) : clamp_offset(mask.right - base),
          clamp_offset(mask.sq - q), clamp_offset(mask.skv - k)};
}

// The mask of plane (b, h) = b * heads_q + h of batch entry b, whose sequences are sq x skv
// (kRagged: a ragged batch's kernels, which read Mask::diagonals).
template <bool kRagged>
__device__ __forceinline__ MaskView mask_view(const Mask& m, int64_t b, int64_t plane, int64_t sq, int64_t skv, const uint8_t* tiles,
                                              int tile_q, int tile_kv) {
  const int64_t diagonal = kRagged && m.diagonals ? m.diagonals[b] : m.diagonal;
  MaskView v{m.left, m.right, diagonal, nullptr, nullptr, sq, skv, (skv + tile_kv - 1) / tile_kv};
  if (m.dense) {
    const int64_t p = m.one_plane ? 0 : plane;
    v.dense = m.dense + p * sq * skv;
    v.tiles = tiles + p * ((sq + tile_q - 1) / tile_q) * v.tiles_kv;
  }
  return v;
}

// Batch entry b's rows: where its queries and keys start in their tensors (q_start, kv_start),
// and how many there are (sq, skv): a dense batch's are 0, 0, seq_q, seq_kv, a ragged one's
// Ragged's. Each kernel is instantiated for dense and ragged batches (kRagged) so that a dense
// batch's reads them from the parameters where it uses them, as it did before ragged batches
// existed: the forward at D = 128 runs at 248 of 255 registers, and these held in registers made
// it (and the dQ kernel) spill.
template <bool kRagged>
struct SequenceRows;
template <>
struct SequenceRows<false> {
  const Problem& p;
  __device__ __forceinline__ SequenceRows(const Problem& problem, int64_t) : p(problem) {}
  __device__ __forceinline__ int64_t q_start() const { return 0; }
  __device__ __forceinline__ int64_t kv_start() const { return 0; }
  __device__ __forceinline__ int64_t sq() const { return p.seq_q; }
  __device__ __forceinline__ int64_t skv() const { return p.seq_kv; }
};
template <>
struct SequenceRows<true> {
  int64_t q_start_, kv_start_, sq_, skv_;
  __device__ __forceinline__ SequenceRows(const Problem& p, int64_t b)
      : q_start_(p.ragged.starts_q[b]), kv_start_(p.ragged.starts_kv ? p.ragged.starts_kv[b] : 0), sq_(p.ragged.lens_q[b]), skv_(p.ragged.lens_kv[b]) {}
  __device__ __forceinline__ int64_t q_start() const { return q_start_; }
  __device__ __forceinline__ int64_t kv_start() const { return kv_start_; }
  __device__ __forceinline__ int64_t sq() const { return sq_; }
  __device__ __forceinline__ int64_t skv() const { return skv_; }
};

// ---- the order blocks run in: heaviest first, a few (head, batch) planes at a time ----
// Blocks start in launch order (blockIdx.x fastest). Under a causal mask a block's work grows
// with its row tile (forward, dQ: the last query tiles see the most keys) or shrinks with it
// (dK/dV), and the plain order (tiles of one plane, then the next plane) leaves the heavy
// tiles of the last planes for the tail of the grid, where few SMs are busy. Here the grid
// (tiles, heads, batch) is walked in groups of `group` planes; inside a group the heaviest
// tile of every plane goes first, then the next heaviest, and so on (longest-processing-time
// first), and the group's planes are few enough that their K/V stay in L2 while their blocks
// run. group = 1 is the plain order (schedule_group() on the host picks it).
struct BlockTile {
  int tile, head, batch;  // 32 bits (grid limits): fewer registers held through the kernel
};
__device__ __forceinline__ BlockTile block_tile(int group, bool heavy_last) {
  const int64_t tiles = gridDim.x, heads = gridDim.y, planes = heads * gridDim.z;
  const int64_t linear = blockIdx.x + tiles * (blockIdx.y + heads * static_cast<int64_t>(blockIdx.z));
  const int64_t per_group = group * tiles, g = linear / per_group, within = linear - g * per_group;
  const int64_t in_group = planes - g * group < group ? planes - g * group : group;  // the last group may be smaller
  const int64_t rank = within / in_group, plane = g * group + within % in_group;
  return {static_cast<int>(heavy_last ? tiles - 1 - rank : rank), static_cast<int>(plane % heads), static_cast<int>(plane / heads)};
}

// ---- global -> shared, rows at or past `rows` zeroed (their values must not reach a product) ----
template <class Copy, class S, class D, class C>
__device__ __forceinline__ void load_rows(Copy copy, const S& src, D& dst, const C& coords, int64_t rows) {
  using namespace cute;
#pragma unroll
  for (int m = 0; m < size<1>(src); ++m) {
    if (Planted::row_copied(get<0>(coords(0, m, 0)), rows)) {
#pragma unroll
      for (int k = 0; k < size<2>(src); ++k) cute::copy(copy, src(_, m, k), dst(_, m, k));
    } else {
#pragma unroll
      for (int k = 0; k < size<2>(src); ++k) cute::clear(dst(_, m, k));
    }
  }
}

// The same with each row at its own address: row r of the tile (r < rows) at row_ptr(r) (an
// element pointer to its column 0), as a paged cache's rows are. `layout_src` is the tile's
// partition in any strided view, read for its layout only: a copy vector lies within one row, so
// its layout holds at any row's address.
template <class Copy, class S, class D, class C, class RowPtr>
__device__ __forceinline__ void load_rows_gathered(Copy copy, const S& layout_src, D& dst, const C& coords, int64_t rows,
                                                   RowPtr row_ptr) {
  using namespace cute;
#pragma unroll
  for (int m = 0; m < size<1>(layout_src); ++m) {
    const int r = get<0>(coords(0, m, 0));
    if (Planted::row_copied(r, rows)) {
      auto* row = row_ptr(r);
#pragma unroll
      for (int k = 0; k < size<2>(layout_src); ++k)
        cute::copy(copy, make_tensor(make_gmem_ptr(row + get<1>(coords(0, m, k))), layout_src(_, m, k).layout()), dst(_, m, k));
    } else {
#pragma unroll
      for (int k = 0; k < size<2>(layout_src); ++k) cute::clear(dst(_, m, k));
    }
  }
}

// The same for a tile of kTileRows rows: a tile wholly inside the sequence is copied without
// the per-row checks (straight-line address arithmetic, no branch per row).
template <int kTileRows, class Copy, class S, class D, class C>
__device__ __forceinline__ void load_tile(Copy copy, const S& src, D& dst, const C& coords, int64_t rows) {
  if (rows >= kTileRows)
    cute::copy(copy, src, dst);
  else
    load_rows(copy, src, dst, coords, rows);
}

// Reductions over the four threads that share a row of an m16n8 accumulator.
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 2);
  return x + __shfl_xor_sync(0xffffffffu, x, 1);
}

constexpr float kLog2e = 1.4426950408889634f;

// A global [S][D] view of head (b, h) of a strided tensor, from row `row0` (a ragged batch's
// sequence start; 0 in a dense batch).
template <int D, class E>
__device__ __forceinline__ auto head_view(const void* base, const Strides& s, int64_t b, int64_t h, int64_t row0, int64_t rows) {
  using namespace cute;
  E* p = const_cast<E*>(static_cast<const E*>(base)) + b * s.batch + h * s.head + row0 * s.row;
  return make_tensor(make_gmem_ptr(p), make_shape(rows, Int<D>{}), make_stride(s.row, _1{}));
}

// Stores a (rows x D) fp32 accumulator as E at (row0 + r, c) of a strided head view, rows < limit.
template <class E, class Acc, class Coords>
__device__ __forceinline__ void store_tile(const Acc& acc, const Coords& coords, E* head, int64_t row_stride, int64_t row0, int64_t limit,
                                           float factor) {
#pragma unroll
  for (int i = 0; i < cute::size(acc); i += 2) {
    const int64_t r = row0 + cute::get<0>(coords(i));
    const int c = cute::get<1>(coords(i));
    if (r < limit) {
      // Two neighbouring columns (the accumulator's innermost pair) in one 4-byte store.
      cutlass::Array<E, 2> pair;
      pair[0] = static_cast<E>(acc(i) * factor);
      pair[1] = static_cast<E>(acc(i + 1) * factor);
      *reinterpret_cast<cutlass::Array<E, 2>*>(head + r * row_stride + c) = pair;
    }
  }
}

}  // namespace attnfuzz::flash
