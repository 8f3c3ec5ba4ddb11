#include "generators/fuzz_decode.h"

#include <algorithm>

#include "generators/random_case.h"
#include "generators/shrink.h"

namespace attnfuzz {

uint64_t ByteReader::range(uint64_t lo, uint64_t hi) {
  const uint64_t span = hi - lo;
  uint64_t v = 0;
  for (uint64_t used = 0; used < 64 && (span >> used) != 0 && n_ > 0; used += 8) {
    v = (v << 8) | *p_++;
    --n_;
  }
  return span == UINT64_MAX ? v : lo + v % (span + 1);
}

Case decode_case(const uint8_t* data, size_t size) {
  ByteReader r(data, size);
  Case c;
  Shape& s = c.shape;
  s.batch = static_cast<int64_t>(r.range(1, 2));
  s.heads_kv = static_cast<int64_t>(r.range(1, 2));
  s.heads_q = s.heads_kv * static_cast<int64_t>(r.range(1, 3));
  s.seq_q = static_cast<int64_t>(r.range(1, 40));
  s.seq_kv = static_cast<int64_t>(r.range(1, 40));
  s.head_dim_qk = static_cast<int64_t>(r.range(1, 32));
  s.head_dim_v = r.flag() ? s.head_dim_qk : static_cast<int64_t>(r.range(1, 32));
  c.dtype = static_cast<DType>(r.range(0, 2));
  if (r.flag()) c.softcap = 1.0 + static_cast<double>(r.range(0, 60));
  auto dist = [&](ValueDist& d) {
    switch (r.range(0, 5)) {
      case 1: d = {ValueDist::Kind::uniform, 0, 1, 0, 0}; break;
      case 2: d = {ValueDist::Kind::large_logit, 0, 8, 0, 0}; break;
      case 3: d = {ValueDist::Kind::near_constant, 0.1, r.flag() ? 0.0 : 1e-3, 0, 0}; break;
      case 4: d = {ValueDist::Kind::outliers, 0, 1, 0.05, 20}; break;
      default: d = ValueDist{}; break;
    }
  };
  dist(c.q), dist(c.k), dist(c.v);
  if (r.flag()) c.d_lse = ValueDist{};
  // The details of the mask and the composition come from a generator seeded by the data:
  // their kinds from explicit bytes (so mutations switch kinds), their parameters from the seed.
  const uint64_t detail_seed = r.range(0, UINT64_MAX);
  c.seed = r.range(0, UINT64_MAX);
  SplitMix gen(detail_seed);
  const uint64_t mask_kind = r.range(0, 3);
  c.mask = mask_kind == 0 ? MaskExpr::all_visible()
           : mask_kind == 1 ? MaskExpr::causal_mask(r.flag() ? Align::bottom_right : Align::top_left)
                            : random_mask(gen, s.seq_q, s.seq_kv, mask_kind == 2 ? 2 : 0);
  if (r.flag()) c.composition = random_composition(gen, s.seq_q, s.seq_kv);
  c.mask = fit_mask(c.mask, s.seq_q, s.seq_kv);
  c.composition = fit_composition(c.composition, s.seq_q, s.seq_kv);
  return c;
}

}  // namespace attnfuzz
