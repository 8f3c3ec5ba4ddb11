#pragma once
// Tile sizes, element type and head dim of one kernel instantiation, and the CuTe types they
// imply: SM90 wgmma atoms (sm_90a) for the forward's `ForwardTraits` and the backward's
// `BackwardTraits`.
//
// Every kernel here has the same shape: a tile of kRows rows (two warpgroups of 64) stays in
// shared memory, tiles of kCols columns stream through cp.async stages. Scores (kRows x kCols)
// come from two shared-memory operands (SS wgmma); the second product takes the scores as its
// A operand straight from registers (RS wgmma) and the streamed tile as an MN-major B operand.
//   forward: rows = queries (Q), columns = keys (K, V)
//   dK, dV:  rows = keys (K, V), columns = queries (Q, dO)
//   dQ:      rows = queries (Q, dO), columns = keys (K, V)
#include <cutlass/bfloat16.h>
#include <cutlass/half.h>
#include <cutlass/numeric_conversion.h>
#include <cute/arch/mma_sm90.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cute/tensor.hpp>

#include <type_traits>

namespace attnfuzz::flash {

namespace GMMA = cute::SM90::GMMA;

// The forward on sm_90a (wgmma, flash_fwd.cuh): two warpgroups, 64 query rows each, share a
// kRows x kCols tile. Scores S = Q K^T from two shared operands (SS wgmma, both K-major);
// O += P V with P straight from registers (RS wgmma) and V read MN-major (its head dim is
// contiguous), so no transpose goes through registers. Shared memory uses the 128-byte
// swizzle atoms wgmma descriptors expect; every tile base is 1024-byte aligned.
template <int kHeadDim_, class Element_>
struct ForwardTraits {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_, kRows = 128, kCols = 128, kWarps = 8, kThreads = kWarps * 32;
  static_assert(kHeadDim % 64 == 0, "the 128-byte swizzle atom is 64 elements wide");
  using WarpGroups = cute::Layout<cute::Shape<cute::_2, cute::_1, cute::_1>>;  // along the rows
  using MmaS = decltype(cute::make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, cute::Shape<cute::_64, cute::Int<kCols>, cute::Int<kHeadDim>>>(), WarpGroups{}));
  using MmaO = decltype(cute::make_tiled_mma(
      GMMA::rs_op_selector<Element, Element, float, cute::Shape<cute::_64, cute::Int<kHeadDim>, cute::Int<kCols>>, GMMA::Major::K,
                           GMMA::Major::MN>(),
      WarpGroups{}));
  using SmemQ = decltype(cute::tile_to_shape(GMMA::Layout_K_SW128_Atom<Element>{}, cute::Shape<cute::Int<kRows>, cute::Int<kHeadDim>>{}));
  using SmemK = decltype(cute::tile_to_shape(GMMA::Layout_K_SW128_Atom<Element>{}, cute::Shape<cute::Int<kCols>, cute::Int<kHeadDim>>{}));
  // V as wgmma's B operand of O += P V: (head dim, keys), head dim contiguous.
  using SmemVt = decltype(cute::tile_to_shape(GMMA::Layout_MN_SW128_Atom<Element>{}, cute::Shape<cute::Int<kHeadDim>, cute::Int<kCols>>{}));
  // The same bytes as (keys, head dim), the shape the global -> shared copy writes.
  using SmemV = decltype(cute::composition(SmemVt{}, cute::make_layout(cute::Shape<cute::Int<kCols>, cute::Int<kHeadDim>>{}, cute::GenRowMajor{})));
  static constexpr int kRowTileElems = kRows * kHeadDim, kColTileElems = kCols * kHeadDim;
  static constexpr size_t kSmemBytes = (kRowTileElems + 4 * kColTileElems) * sizeof(Element);  // Q, two stages of K and V

  static constexpr int kThreadsPerRow = 64 / 8;
  using GmemThreads = cute::Layout<cute::Shape<cute::Int<kThreads / kThreadsPerRow>, cute::Int<kThreadsPerRow>>,
                                   cute::Stride<cute::Int<kThreadsPerRow>, cute::_1>>;
  using GmemCopy = decltype(cute::make_tiled_copy(cute::Copy_Atom<cute::SM80_CP_ASYNC_CACHEGLOBAL<cute::uint128_t>, Element>{},
                                                  GmemThreads{}, cute::Layout<cute::Shape<cute::_1, cute::_8>>{}));
};

// The backward on sm_90a (wgmma, flash_bwd.cuh): both kernels have the forward's shape, a
// tile of kRows = 128 rows (two warpgroups of 64) resident in shared memory and tiles of
// kCols = 64 columns streamed through kStages = 3 cp.async slots (flash_bwd.cuh's pipeline):
//   dK, dV: rows = keys (K, V), columns = queries (Q, dO);  dQ: rows = queries (Q, dO), columns = keys (K, V).
// The two score products (S, dP) are SS wgmma with both operands K-major (head dim
// contiguous); the gradient products take the scores from registers (RS wgmma) and the
// streamed tile as an MN-major B operand: the same bytes read through the transposed view
// SmemColsT, so each streamed tile is stored once and serves both products.
// The dense mask's tile classes come in kMaskTile x kMaskTile units (backward_tile()): each
// warpgroup's 64 x 64 part of a step is one unit.
template <int kHeadDim_, class Element_>
struct BackwardTraits {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_, kRows = 128, kCols = 64, kWarps = 8, kThreads = kWarps * 32, kMaskTile = 64,
                       kStages = 3;
  static_assert(kHeadDim % 64 == 0, "the 128-byte swizzle atom is 64 elements wide");
  using WarpGroups = cute::Layout<cute::Shape<cute::_2, cute::_1, cute::_1>>;  // along the rows
  // Scores (rows x columns) from the row tile and the streamed tile.
  using MmaS = decltype(cute::make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, cute::Shape<cute::_64, cute::Int<kCols>, cute::Int<kHeadDim>>>(), WarpGroups{}));
  // Gradients (rows x head dim) += scores (rows x columns) times the streamed tile (columns x head dim).
  using MmaG = decltype(cute::make_tiled_mma(
      GMMA::rs_op_selector<Element, Element, float, cute::Shape<cute::_64, cute::Int<kHeadDim>, cute::Int<kCols>>, GMMA::Major::K,
                           GMMA::Major::MN>(),
      WarpGroups{}));
  using SmemRows = decltype(cute::tile_to_shape(GMMA::Layout_K_SW128_Atom<Element>{}, cute::Shape<cute::Int<kRows>, cute::Int<kHeadDim>>{}));
  using SmemCols = decltype(cute::tile_to_shape(GMMA::Layout_K_SW128_Atom<Element>{}, cute::Shape<cute::Int<kCols>, cute::Int<kHeadDim>>{}));
  // A streamed tile read as (head dim, columns): the MN-major B operand of the gradient products.
  using SmemColsT =
      decltype(cute::composition(SmemCols{}, cute::make_layout(cute::Shape<cute::Int<kHeadDim>, cute::Int<kCols>>{}, cute::GenRowMajor{})));
  static constexpr int kRowTileElems = kRows * kHeadDim, kColTileElems = kCols * kHeadDim;
  // Two row tiles, kStages slots of two column tiles, and per slot the columns' L2 and D' (fp32).
  static constexpr size_t kSmemBytes =
      (2 * kRowTileElems + 2 * kStages * kColTileElems) * sizeof(Element) + kStages * 2 * kCols * sizeof(float);

  static constexpr int kThreadsPerRow = 64 / 8;
  using GmemThreads = cute::Layout<cute::Shape<cute::Int<kThreads / kThreadsPerRow>, cute::Int<kThreadsPerRow>>,
                                   cute::Stride<cute::Int<kThreadsPerRow>, cute::_1>>;
  using GmemCopy = decltype(cute::make_tiled_copy(cute::Copy_Atom<cute::SM80_CP_ASYNC_CACHEGLOBAL<cute::uint128_t>, Element>{},
                                                  GmemThreads{}, cute::Layout<cute::Shape<cute::_1, cute::_8>>{}));
};

}  // namespace attnfuzz::flash
