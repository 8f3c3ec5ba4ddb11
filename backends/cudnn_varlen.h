#pragma once
// cuDNN's native interfaces for a ragged batch (harness/case.h, Ragged), through the same cuDNN
// frontend SDPA graphs as the `cudnn` backend (backends/cudnn_sdpa.h, cudnn_graph.h):
//   cudnn.varlen  Q, K, V, O (and dO, dQ, dK, dV) as packed THD buffers [tokens][H][D] that
//                 ragged offset tensors describe (Tensor_attributes::set_ragged_offset, offsets in
//                 elements), with cuDNN's padding mask giving each sequence's lengths
//                 (set_padding_mask, set_seq_len_q, set_seq_len_kv): forward and backward.
//   cudnn.paged   K and V in a paged cache: page pools [pages][page_size][Hkv][D] read through a
//                 page table (set_paged_attention_k_table, _v_table,
//                 set_paged_attention_max_seq_len_kv), Q and O dense [B][Hq][Sq][D] under the
//                 padding mask. FORWARD ONLY in cuDNN: the frontend's SDPA_backward_attributes takes
//                 no page table, so this backend's backward runs cudnn.varlen's (non-paged, packed)
//                 graphs; what it tests beyond cudnn.varlen is the forward through the page table.
// Why: the `cudnn` backend sees a ragged batch only as padded tensors and a mask; these hand cuDNN
// the sequences' own offsets, lengths and pages, so its per-sequence bookkeeping (the offsets,
// each sequence's bottom-right diagonal, empty sequences, page lookups, and the NaN rows between
// and after the sequences and past each sequence's last key that no kernel may read) is tested.
//
// Layout of a call (the call's lengths Problem::call_len_q(b), call_len_kv(b); its gaps and tail
// Problem::gap_q, gap_kv, tail): sequence b's rows start at Ragged::starts_q()[b] (starts_kv()) of
// a Ragged holding the call's lengths, gap rows between consecutive sequences and `tail` rows after
// the last one hold NaN. The page pool is page_table(Ragged of the call's keys with the problem's
// page size, Problem::page_seed): each sequence's keys in its pages in table order, NaN past its
// last key and in the spare page. Table entries past a sequence's pages point at the spare page.
// A problem without a page size (page_size 0: a dense batch, or a ragged one without a paged
// layout) is paged with kCudnnDefaultPageSize.
//
// What each declines, and why:
//   - the dtype (fp16 and bf16 only) and a softcap (the graph has none): enforced by the envelope;
//   - a score bias: the envelope's bias clause is false (the packed graphs are run without cuDNN's
//     bias input: not handed on, so refused);
//   - a mask that is not, in every sequence's block and for every head alike, one of cuDNN's
//     native masks relative to per-sequence lengths no longer than the call's (none, causal
//     top-left or bottom-right, a diagonal band: cudnn_varlen_mask_plans), with nothing visible
//     outside the blocks: these interfaces have no mask tensor, and a packed call no dense bias to
//     carry one ("declines the mask");
//   - anything cuDNN's graph build refuses (a head dim, an architecture, a version): cuDNN's
//     message, as for `cudnn`.
// Every output is scattered back into the dense [B][H][S][D] tensors: rows past each sequence's
// plan length O = 0, LSE = -inf and dQ = 0, keys past it dK = dV = 0; rows cuDNN computed with no
// visible key are cuDNN's own (masked_rows_zero is false, as for `cudnn`).
//
// This header needs no CUDA or cuDNN header; the pure helpers below run without a GPU.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "harness/backend.h"
#include "harness/case.h"
#include "harness/dtype.h"

namespace attnfuzz {

std::unique_ptr<Backend> make_cudnn_varlen_backend();
std::unique_ptr<Backend> make_cudnn_paged_backend();

inline constexpr int64_t kCudnnDefaultPageSize = 16;

// Where each sequence's rows lie in one packed buffer.
struct CudnnPacking {
  std::vector<int64_t> lens;    // B: the rows of each sequence
  std::vector<int64_t> starts;  // B + 1: Ragged::starts_q()-style (the last: the end of the last sequence)
  int64_t total = 0;            // the buffer's rows: the sequences, their gaps and the tail
  bool operator==(const CudnnPacking&) const = default;
};
CudnnPacking cudnn_packing(const std::vector<int64_t>& lens, int64_t gap, int64_t tail);

// cuDNN's ragged offsets of a THD buffer with `heads` heads of `dim` elements: starts[b] * heads *
// dim, B + 1 entries (in elements, as the frontend's tests and samples compute them).
std::vector<int64_t> cudnn_ragged_offsets(const CudnnPacking& k, int64_t heads, int64_t dim);

// The 16-bit pattern of NaN in the dtype (fp16 0x7e00, bf16 0x7fc0).
uint16_t cudnn_nan_bits(DType d);

// A dense [B][H][S][D] tensor's rows i < k.lens[b] of each batch entry as a packed [total][H][D]
// buffer of the dtype's bits, row starts[b] + i; every other row NaN.
std::vector<uint16_t> cudnn_pack_thd(const Tensor& dense, const CudnnPacking& k, DType d);
// The inverse for `keep[b]` <= k.lens[b] rows of each sequence: a dense [B][heads][seq][dim]
// tensor, zero in the rows past keep[b].
Tensor cudnn_unpack_thd(const std::vector<uint16_t>& packed, const CudnnPacking& k, const std::vector<int64_t>& keep, int64_t heads,
                        int64_t seq, int64_t dim, DType d);

// A paged K/V cache for keys of lengths `lens` (one per batch entry) in pages of `page_size`:
// the page table of harness/case.h (page_table, from `seed`), widened to `table_size` entries per
// sequence (at least ceil(seq_kv / page_size), so that every position up to the padded length has
// an entry), the entries past a sequence's pages pointing at the spare page.
// What a cache row no sequence owns holds. Finite: cuDNN's paged forward multiplies the masked
// keys' V rows by their zero probabilities, so NaN there reaches O (docs/findings/LEDGER.md,
// s56-cudnn-paged-nan-unused-page-rows) and would test that arithmetic, not the mask's reach; a row
// read as a visible key still shows, as a value far from every input's. FlexPaged's poison too.
constexpr double kUnusedPageRowValue = 1000.0;
struct CudnnPagePool {
  int64_t page_size = 0, pages = 0, table_size = 0;
  int64_t spare = 0;           // the physical page no sequence uses
  std::vector<int32_t> table;  // [B][table_size]
};
CudnnPagePool cudnn_page_pool(const std::vector<int64_t>& lens, int64_t page_size, int64_t seq_kv, uint64_t seed);
// A dense [B][H][S][D] tensor's first lens[b] keys of each batch entry in the pool's pages:
// [pages][page_size][H][D] of the dtype's bits, key j of sequence b at page table[b][j / P], row
// j % P; every other row (past a sequence's last key, the spare page) the finite poison
// kUnusedPageRowValue.
std::vector<uint16_t> cudnn_pack_pages(const Tensor& dense, const CudnnPagePool& pool, const std::vector<int64_t>& lens, DType d);

}  // namespace attnfuzz
