#include "harness/problem.h"

#include <algorithm>

namespace attnfuzz {

namespace {
bool in_band(const BandRestriction& r, int64_t q, int64_t kv, int64_t sq, int64_t skv) {
  return in_window(kv - (q + (r.align == Align::bottom_right ? skv - sq : 0)), r.left, r.right);
}
}  // namespace

void materialize_mask(Problem& p) {
  const Shape& s = p.shape;
  p.mask.assign(static_cast<size_t>(s.batch * s.heads_q * s.seq_q * s.seq_kv), 0);
  // Without a random leaf every (b, h) plane is the same: evaluated once, then copied (at real
  // sizes the evaluation, one visible() per element, cost ~40 ms a plane).
  const bool per_head = p.mask_expr && varies_by_head(*p.mask_expr);
  const size_t plane = static_cast<size_t>(s.seq_q * s.seq_kv);
  size_t idx = 0;
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads_q; ++h) {
      if (!per_head && idx > 0) {
        std::copy_n(p.mask.begin(), plane, p.mask.begin() + static_cast<std::ptrdiff_t>(idx));
        idx += plane;
        continue;
      }
      for (int64_t i = 0; i < s.seq_q; ++i)
        for (int64_t j = 0; j < s.seq_kv; ++j, ++idx) {
          const int64_t q = i + p.q_offset, kv = j + p.kv_offset;
          bool vis = p.mask_expr ? visible(*p.mask_expr, b, h, q, kv, p.full_seq_q, p.full_seq_kv) : true;
          for (const auto& r : p.restrictions) vis = vis && (in_band(r, q, kv, p.full_seq_q, p.full_seq_kv) == r.inside);
          p.mask[idx] = vis;
        }
    }
}

}  // namespace attnfuzz
