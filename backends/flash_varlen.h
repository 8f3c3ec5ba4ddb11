#pragma once
// The project's fused kernels (kernels/flash/) through their varlen interface (flash::Ragged,
// flash::Pages), device "cuda":
//   cuda.flash.varlen  Q, K, V, O, LSE (and dO, dLSE, dQ, dK, dV) packed token-major, each
//                      sequence's rows at its start with its length: the layout of
//                      FlashAttention's varlen entry points ([tokens][H][D], the LSE [H][tokens]);
//                      forward and the deterministic backward, which honours dLSE.
//   cuda.flash.paged   the forward with K and V in a page pool [pages][page_size][Hkv][D] read
//                      through a page table (the decode step of a serving engine); the backward
//                      takes no page table, so it runs cuda.flash.varlen's on packed K and V.
// Why: `cuda.flash` sees a ragged batch only as padded tensors and a dense mask; these hand the
// kernels each sequence's offsets, lengths and pages, so their per-sequence bookkeeping (early
// exits past a sequence, offsets into the packed rows, each sequence's bottom-right diagonal,
// empty sequences, page lookups, the NaN rows between and after the sequences and past each
// sequence's last key that no kernel may read) is tested.
//
// The memory of a call is the plugin ABI's varlen layout (backends/plugin_packed.h,
// packed_geometry and PieceBuffer): gaps and tail NaN in the inputs, the poison in the outputs,
// writes outside the sequences an out-of-bounds finding. A call without pages of its own
// (page_size 0) is paged with kFlashDefaultPageSize. Outputs are kernel-dim wide (64 or 128, the
// case's dims zero-padded up to it); their unwritten counts cover the padded columns too.
//
// What each declines, and why:
//   - what cuda.flash declines (dtype, head dim, heads), with the same envelope;
//   - a misaligned case (Problem::misaligned): the kernels load 16 bytes at a time;
//   - a mask that is not, in every sequence's block and for every head alike, a band (none,
//     causal, a sliding window) whose diagonal is the case's top-left or bottom-right one for
//     that sequence, with nothing visible outside the blocks (flash_varlen_band): the kernels
//     take no dense mask with a ragged batch;
//   - more packed rows or pages than int32 offsets hold.
// Compiled only by the gpu preset (ATTNFUZZ_WITH_CUDA); flash_varlen_band runs without a GPU.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "harness/backend.h"

namespace attnfuzz {

std::unique_ptr<Backend> make_flash_varlen_backend();
std::unique_ptr<Backend> make_flash_paged_backend();

inline constexpr int64_t kFlashDefaultPageSize = 16;

// The band the kernels compute for every sequence of the call: key j visible to query i of
// sequence b (the call's coordinates) iff
//   i < Lq_b,  j < Lkv_b  and  -left <= j - i - diagonals[b] <= right   (-1: that side unbounded)
// with Lq_b, Lkv_b the call's lengths (Problem::call_len_q, call_len_kv).
struct FlashBand {
  int64_t left = -1, right = -1;
  std::vector<int64_t> diagonals;  // [B]
};
// The call's mask as such a band, checked element for element against the dense mask, or why
// it is not one (the decline).
struct FlashBandOrWhy {
  std::optional<FlashBand> band;
  std::string why;
};
FlashBandOrWhy flash_varlen_band(const Problem& p);

}  // namespace attnfuzz
