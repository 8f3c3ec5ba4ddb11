#include "backends/plugin_packed.h"

#include <algorithm>
#include <limits>
#include <stdexcept>

#include "harness/case.h"

namespace attnfuzz {

namespace {

int32_t af_dtype_of(ElementType t) { return t == ElementType::f16 ? AF_F16 : t == ElementType::bf16 ? AF_BF16 : AF_F32; }

af_tensor host_tensor(ElementType type, int32_t ndim, std::array<int64_t, 4> shape, std::array<int64_t, 4> strides) {
  af_tensor t{};
  t.dtype = af_dtype_of(type);
  t.device = AF_CPU;
  t.ndim = ndim;
  for (size_t i = 0; i < 4; ++i) t.shape[i] = shape[i], t.strides[i] = strides[i];
  return t;
}

}  // namespace

PackedSide packed_side(std::vector<int64_t> lens, int64_t gap, int64_t tail) {
  Ragged r;  // the offsets are Ragged's: one formula for every varlen interface
  r.lens_q = lens;
  r.gap_q = gap;
  PackedSide s;
  s.starts = r.starts_q();
  s.total = s.starts.back() + tail;
  for (int64_t l : lens) s.longest = std::max(s.longest, l);
  s.lens = std::move(lens);
  return s;
}

PackedGeometry packed_geometry(const Problem& p, bool paged, int64_t default_page_size) {
  std::vector<int64_t> lq, lkv;
  for (int64_t b = 0; b < p.shape.batch; ++b) {
    lq.push_back(p.call_len_q(b));
    lkv.push_back(p.call_len_kv(b));
  }
  PackedGeometry g;
  g.q = packed_side(lq, p.gap_q, p.tail);
  g.kv = packed_side(lkv, p.gap_kv, p.tail);
  g.max_q = std::max<int64_t>(1, g.q.longest) + p.max_slack;
  g.max_kv = std::max<int64_t>(1, g.kv.longest) + p.max_slack;
  g.lead = p.misaligned ? 1 : 0;
  const int64_t page_size = p.page_size > 0 ? p.page_size : default_page_size;
  if (paged && page_size > 0) {
    const PageTable t = page_table(lkv, page_size, p.page_seed);  // a call gets the table of its own keys
    g.page_size = page_size;
    g.pages = t.pages;
    g.pages_per_seq = std::max<int64_t>(1, t.max_pages_per_seq);
    g.table.assign(static_cast<size_t>(p.shape.batch * g.pages_per_seq), -1);
    for (int64_t b = 0; b < p.shape.batch; ++b)
      for (int64_t i = 0; i < t.max_pages_per_seq; ++i) g.table[static_cast<size_t>(b * g.pages_per_seq + i)] = t.at(b, i);
  }
  return g;
}

std::optional<std::string> packed_geometry_refusal(const PackedGeometry& g) {
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  if (g.q.total > kMax || g.kv.total > kMax || g.pages > kMax)
    return "the call's " + std::to_string(std::max(g.q.total, g.kv.total)) + " packed rows (or " + std::to_string(g.pages) +
           " pages) do not fit the plugin ABI's int32 offsets";
  return std::nullopt;
}

PieceBuffer PieceBuffer::packed(const PackedSide& side, int64_t heads, int64_t width, ElementType type, int64_t lead, bool output) {
  PieceBuffer buf;
  buf.type_ = type;
  buf.lead_ = lead;
  const int64_t w = std::max<int64_t>(width, 1);
  buf.extent_ = lead + side.total * heads * w;
  buf.mem_.assign(static_cast<size_t>(buf.extent_) * element_type_size(type), 0);
  if (output)
    poison_elements(buf.mem_.data(), static_cast<size_t>(buf.extent_), type);
  else
    fill_surround(buf.mem_.data(), static_cast<size_t>(buf.extent_), type, Surround::Fill::nan);
  // Token-major [total][heads][width]; the LSE head-major [heads][total], as FlashAttention's varlen LSE.
  const int32_t ndim = width > 0 ? 4 : 3;
  const std::array<int64_t, 4> strides = width > 0 ? std::array<int64_t, 4>{side.total * heads * w, w, heads * w, 1}
                                                   : std::array<int64_t, 4>{heads * side.total, side.total, 1, 0};
  const int64_t row_stride = strides[2];
  buf.t_ = host_tensor(type, ndim, {1, heads, side.total, width > 0 ? width : 1}, strides);
  for (size_t b = 0; b < side.lens.size(); ++b) {
    if (side.lens[b] == 0) continue;
    Piece piece;
    piece.b = static_cast<int64_t>(b);
    piece.pl.ndim = ndim;
    piece.pl.sizes = {1, heads, side.lens[b], width > 0 ? width : 1};
    piece.pl.strides = strides;
    piece.pl.offset = lead + side.starts[b] * row_stride;
    piece.pl.extent = buf.extent_;
    buf.pieces_.push_back(piece);
  }
  return buf;
}

PieceBuffer PieceBuffer::pool(const PackedGeometry& g, int64_t heads, int64_t width, ElementType type) {
  if (g.page_size <= 0) throw std::logic_error("PieceBuffer::pool: the call has no pages");
  PieceBuffer buf;
  buf.type_ = type;
  buf.lead_ = g.lead;
  const int64_t P = g.page_size, page_elements = P * heads * width;
  buf.extent_ = g.lead + g.pages * page_elements;
  buf.mem_.assign(static_cast<size_t>(buf.extent_) * element_type_size(type), 0);
  fill_surround(buf.mem_.data(), static_cast<size_t>(buf.extent_), type, Surround::Fill::nan);
  // Each page's rows whole, [page_size][heads][width] (vLLM's cache, cuDNN's paged K/V).
  const std::array<int64_t, 4> strides{page_elements, width, heads * width, 1};
  buf.t_ = host_tensor(type, 4, {g.pages, heads, P, width}, strides);
  for (size_t b = 0; b < g.kv.lens.size(); ++b)
    for (int64_t row0 = 0; row0 < g.kv.lens[b]; row0 += P) {
      Piece piece;
      piece.b = static_cast<int64_t>(b);
      piece.row0 = row0;
      piece.pl.ndim = 4;
      piece.pl.sizes = {1, heads, std::min(P, g.kv.lens[b] - row0), width};
      piece.pl.strides = strides;
      piece.pl.offset = g.lead + g.table[b * static_cast<size_t>(g.pages_per_seq) + static_cast<size_t>(row0 / P)] * page_elements;
      piece.pl.extent = buf.extent_;
      buf.pieces_.push_back(piece);
    }
  return buf;
}

void PieceBuffer::store(const Tensor& dense) {
  const bool rows = dense.shape.size() == 4;
  const int64_t w = rows ? dense.dim(3) : 1;
  for (const Piece& piece : pieces_) {
    const int64_t heads = piece.pl.sizes[1], n = piece.pl.sizes[2];
    Tensor part(rows ? std::vector<int64_t>{1, heads, n, w} : std::vector<int64_t>{1, heads, n});
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < n; ++i) std::copy_n(dense.at(piece.b, h, piece.row0 + i), w, part.at(0, h, i));
    store_placed(mem_.data(), piece.pl, type_, part);
  }
}

Tensor PieceBuffer::load(const std::vector<int64_t>& shape, double fill, size_t* unwritten) const {
  Tensor out(shape, fill);
  const int64_t w = shape.size() == 4 ? shape[3] : 1;
  size_t poisoned = 0;
  for (const Piece& piece : pieces_) {
    size_t n_poisoned = 0;
    const Tensor part = load_placed(mem_.data(), piece.pl, type_, &n_poisoned);
    poisoned += n_poisoned;
    for (int64_t h = 0; h < piece.pl.sizes[1]; ++h)
      for (int64_t i = 0; i < piece.pl.sizes[2]; ++i) std::copy_n(part.at(0, h, i), w, out.at(piece.b, h, piece.row0 + i));
  }
  if (unwritten) *unwritten = poisoned;
  return out;
}

size_t PieceBuffer::written_outside() const {
  std::vector<Placement> placements;
  for (const Piece& piece : pieces_) placements.push_back(piece.pl);
  return attnfuzz::written_outside(mem_.data(), extent_, placements, type_);
}

}  // namespace attnfuzz
