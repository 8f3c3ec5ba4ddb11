#pragma once
// The memory of a plugin's varlen call (ABI version 3, AF_TAKES_PACKED and AF_TAKES_PAGED_KV;
// backends/attnfuzz_plugin.h): the Problem's dense tensors packed token-major with each
// sequence's rows at its cumulative offset, or K and V in the pages of a page pool, and the
// packed outputs unpacked back into the dense tensors the harness judges.
//
// A buffer is a list of pieces, each a strided box (harness/layout.h, Placement) holding rows
// [row0, row0 + n) of one sequence: one piece per sequence in a packed buffer, one per used page
// in a pool. Everything outside the pieces (the gaps between sequences, the tail, the rows of a
// page past its sequence's last key, the spare page, and the leading element of a misaligned
// buffer) holds NaN in an input and the poison in an output, where a write is out of bounds.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "backends/attnfuzz_plugin.h"
#include "backends/typed_buffers.h"
#include "harness/problem.h"

namespace attnfuzz {

// Where the sequences of one side (queries, or keys) of a call lie in its packed rows.
struct PackedSide {
  std::vector<int64_t> lens;    // [B] the call's rows of each sequence (Problem::call_len_q / call_len_kv)
  std::vector<int64_t> starts;  // [B + 1] each sequence's first row, then the end of the last one (Ragged::starts_q)
  int64_t total = 0;            // rows of the buffer: the sequences, the gaps after all but the last, the tail
  int64_t longest = 0;
};
PackedSide packed_side(std::vector<int64_t> lens, int64_t gap, int64_t tail);

// The varlen interface of one call: both sides, the maxima a kernel is told, the page table.
struct PackedGeometry {
  PackedSide q, kv;
  int64_t max_q = 1, max_kv = 1;  // max(1, longest) + Problem::max_slack
  int64_t lead = 0;               // elements before each buffer's first (Problem::misaligned)
  // Pages of K and V (page_size > 0): harness/case.h page_table over the call's key lengths with
  // the case's seed; pages_per_seq at least 1, so that the table is never empty.
  int64_t page_size = 0, pages = 0, pages_per_seq = 0;
  std::vector<int64_t> table;  // [B][pages_per_seq], -1 past a sequence's last page
};
// `paged`: lay out K and V in pages where the problem has them, or else in pages of
// `default_page_size` (0: not paged then).
PackedGeometry packed_geometry(const Problem& p, bool paged, int64_t default_page_size = 0);
// Why the ABI's int32 offsets cannot describe the call, or nothing.
std::optional<std::string> packed_geometry_refusal(const PackedGeometry& g);

// One buffer of a varlen call in host memory.
class PieceBuffer {
 public:
  // Rows of `side` packed token-major: [total][heads][width] (width 0: a float32 LSE laid out
  // [heads][total]). Inputs hold NaN outside the pieces, outputs the poison everywhere.
  static PieceBuffer packed(const PackedSide& side, int64_t heads, int64_t width, ElementType type, int64_t lead, bool output);
  // K or V of `g` in its page pool: [pages][page_size][heads][width]; NaN outside the pieces.
  static PieceBuffer pool(const PackedGeometry& g, int64_t heads, int64_t width, ElementType type);

  // The dense [B][heads][S][width] (or [B][heads][S]) tensor's rows into the pieces.
  void store(const Tensor& dense);
  // The pieces back as a dense tensor of `shape`, `fill` in every row no piece holds; *unwritten
  // counts the pieces' elements still holding the poison.
  Tensor load(const std::vector<int64_t>& shape, double fill, size_t* unwritten) const;
  // Elements outside every piece that no longer hold the poison (an output's writes out of bounds).
  size_t written_outside() const;

  unsigned char* base() { return mem_.data(); }
  const unsigned char* base() const { return mem_.data(); }
  size_t bytes() const { return mem_.size(); }
  ElementType type() const { return type_; }
  // The logical tensor the plugin is handed, in host memory (the loader points a CUDA plugin's
  // at the device copy of base(), lead() elements in).
  af_tensor tensor() {
    af_tensor t = t_;
    t.data = mem_.data() + static_cast<size_t>(lead_) * element_type_size(type_);
    return t;
  }
  // Element offset of the tensor's element (0, 0, 0, 0) from base().
  int64_t lead() const { return lead_; }

 private:
  struct Piece {
    int64_t b = 0, row0 = 0;  // rows [row0, row0 + pl.sizes[2]) of sequence b
    Placement pl;
  };
  ElementType type_ = ElementType::f32;
  int64_t lead_ = 0, extent_ = 0;
  std::vector<unsigned char> mem_;
  std::vector<Piece> pieces_;
  af_tensor t_{};
};

}  // namespace attnfuzz
