#include "harness/problem.h"

#include <algorithm>
#include <deque>
#include <utility>
#include <vector>

namespace attnfuzz {

namespace {
bool in_band(const BandRestriction& r, int64_t q, int64_t kv, int64_t sq, int64_t skv) {
  return in_window(kv - (q + (r.align == Align::bottom_right ? skv - sq : 0)), r.left, r.right);
}
}  // namespace

namespace {

// The last few (b, h) planes evaluated, by everything a plane depends on. A case builds a
// Problem for every call of every oracle and backend (the reference, each baseline, each backend
// and its determinism rerun, each part of a composition), mostly over the same region: at real
// sizes each evaluation is one visible() per element (~40 ms a plane at S=1088), a copy is not.
struct PlaneKey {
  bool has_expr = false;
  MaskExpr expr;
  int64_t seq_q = 0, seq_kv = 0, q_offset = 0, kv_offset = 0, full_seq_q = 0, full_seq_kv = 0;
  std::vector<BandRestriction> restrictions;
  int64_t len_q = -1, len_kv = -1;  // a ragged sequence's lengths (-1: not ragged)
  bool operator==(const PlaneKey&) const = default;
};

// Planes below this many elements are evaluated each time (toy cases: cheaper than a lookup).
constexpr size_t kCachedPlaneMin = size_t{1} << 14;
constexpr size_t kCachedPlanes = 4;

struct PlaneCache {
  std::deque<std::pair<PlaneKey, std::vector<uint8_t>>> planes;  // most recent first
  const std::vector<uint8_t>* find(const PlaneKey& k) const {
    for (const auto& [key, plane] : planes)
      if (key == k) return &plane;
    return nullptr;
  }
  void add(PlaneKey k, std::vector<uint8_t> plane) {
    planes.emplace_front(std::move(k), std::move(plane));
    if (planes.size() > kCachedPlanes) planes.pop_back();
  }
};

// One (b, h) plane of the mask, into `out` (seq_q x seq_kv), in sequence b's coordinates: its own
// lengths align the diagonals, and nothing past them is visible.
void evaluate_plane(const Problem& p, int64_t b, int64_t h, uint8_t* out) {
  const Shape& s = p.shape;
  const int64_t sq = p.seq_len_q(b), skv = p.seq_len_kv(b);
  size_t idx = 0;
  for (int64_t i = 0; i < s.seq_q; ++i)
    for (int64_t j = 0; j < s.seq_kv; ++j, ++idx) {
      const int64_t q = i + p.q_offset, kv = j + p.kv_offset;
      bool vis = q < sq && kv < skv;
      if (vis && p.mask_expr) vis = visible(*p.mask_expr, b, h, q, kv, sq, skv);
      for (const auto& r : p.restrictions) vis = vis && (in_band(r, q, kv, sq, skv) == r.inside);
      out[idx] = vis;
    }
}

}  // namespace

void materialize_mask(Problem& p) {
  const Shape& s = p.shape;
  p.mask.assign(static_cast<size_t>(s.batch * s.heads_q * s.seq_q * s.seq_kv), 0);
  const size_t plane = static_cast<size_t>(s.seq_q * s.seq_kv);
  if (p.mask.empty()) return;
  // A mask with a random leaf differs per (b, h): every plane evaluated.
  if (p.mask_expr && varies_by_head(*p.mask_expr)) {
    for (int64_t b = 0; b < s.batch; ++b)
      for (int64_t h = 0; h < s.heads_q; ++h) evaluate_plane(p, b, h, p.mask.data() + static_cast<size_t>(b * s.heads_q + h) * plane);
    return;
  }
  // Otherwise every head's plane is the same: one evaluated (or found) per batch entry, then copied.
  // Only a ragged batch's entries differ.
  const size_t heads = static_cast<size_t>(s.heads_q);
  for (int64_t b = 0; b < s.batch; ++b) {
    uint8_t* first = p.mask.data() + static_cast<size_t>(b) * heads * plane;
    if (b > 0 && !p.ragged()) {
      std::copy_n(p.mask.data(), plane, first);
    } else if (plane >= kCachedPlaneMin) {
      thread_local PlaneCache cache;
      PlaneKey key{p.mask_expr != nullptr, p.mask_expr ? *p.mask_expr : MaskExpr{}, s.seq_q, s.seq_kv, p.q_offset, p.kv_offset,
                   p.full_seq_q, p.full_seq_kv, p.restrictions, p.ragged() ? p.seq_len_q(b) : -1, p.ragged() ? p.seq_len_kv(b) : -1};
      if (const std::vector<uint8_t>* found = cache.find(key)) {
        std::copy(found->begin(), found->end(), first);
      } else {
        evaluate_plane(p, b, 0, first);
        cache.add(std::move(key), std::vector<uint8_t>(first, first + plane));
      }
    } else {
      evaluate_plane(p, b, 0, first);
    }
    for (size_t h = 1; h < heads; ++h) std::copy_n(first, plane, first + h * plane);
  }
}

Tensor slice_bias(const Tensor& bias, int64_t q0, int64_t q1, int64_t k0, int64_t k1) {
  if (bias.data.empty()) return {};  // inputs drawn without the bias (a probe of the calls' shapes)
  const auto& n = bias.shape;
  const bool cut_q = n[2] > 1, cut_k = n[3] > 1;
  if ((!cut_q || (q0 == 0 && q1 == n[2])) && (!cut_k || (k0 == 0 && k1 == n[3]))) return bias;
  const int64_t rows = cut_q ? q1 - q0 : 1, cols = cut_k ? k1 - k0 : 1;
  Tensor out({n[0], n[1], rows, cols}, uninitialized);
  double* dst = out.data.data();
  for (int64_t bh = 0; bh < n[0] * n[1]; ++bh)
    for (int64_t i = 0; i < rows; ++i) {
      const double* src = bias.data.data() + static_cast<size_t>((bh * n[2] + (cut_q ? q0 + i : 0)) * n[3] + (cut_k ? k0 : 0));
      dst = std::copy_n(src, cols, dst);
    }
  return out;
}

}  // namespace attnfuzz
