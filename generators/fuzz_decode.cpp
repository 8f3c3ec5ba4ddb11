#include "generators/fuzz_decode.h"

#include <algorithm>

#include "generators/domain.h"
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

namespace {

int64_t decode_int(ByteReader& r, int64_t lo, int64_t hi) {
  return static_cast<int64_t>(r.range(static_cast<uint64_t>(lo), static_cast<uint64_t>(hi)));
}

// A flag byte chooses a menu entry (tile corners, kernel head dims) or any size up to max.
int64_t decode_size(ByteReader& r, int64_t max, const std::vector<int64_t>& menu) {
  if (!menu.empty() && r.flag()) return menu[static_cast<size_t>(decode_int(r, 0, static_cast<int64_t>(menu.size()) - 1))];
  return decode_int(r, domain::kMinDim, max);
}

TensorLayout decode_tensor_layout(ByteReader& r) {
  TensorLayout l;
  l.order = kAllOrders[static_cast<size_t>(decode_int(r, 0, static_cast<int64_t>(kAllOrders.size()) - 1))];
  l.row_padding = decode_int(r, 0, domain::kMaxRowPadding);
  l.head_padding = r.flag() ? decode_int(r, 1, domain::kMaxHeadPadding) : 0;
  l.offset = r.flag() ? domain::kOffsets[static_cast<size_t>(decode_int(r, 0, static_cast<int64_t>(domain::kOffsets.size()) - 1))] : 0;
  return l;
}

Packing decode_packing(ByteReader& r, Shape& s) {
  const Packing p = static_cast<Packing>(decode_int(r, 0, 2));
  if (p == Packing::qkv) {
    s.heads_q = s.heads_kv;
    s.seq_kv = s.seq_q;
  }
  if (p != Packing::none) s.head_dim_v = s.head_dim_qk;
  return p;
}

}  // namespace

Case decode_case(const uint8_t* data, size_t size, domain::SizeTier tier) {
  ByteReader r(data, size);
  Case c;
  Shape& s = c.shape;
  // The cheap, decisive toggles first (dtype, softcap, value kinds, dLSE), so a few bytes
  // reach them on a tiny shape; then the shape within the fuzz tier's bounds.
  c.dtype = static_cast<DType>(r.range(0, 2));
  if (r.flag()) c.softcap = 1.0 + static_cast<double>(r.range(0, 60));
  auto dist = [&](ValueDist& d) {
    switch (r.range(0, 5)) {
      case 1:
        d = {ValueDist::Kind::uniform, 0, 1, 0, 0};
        break;
      case 2:
        d = {ValueDist::Kind::large_logit, 0, 8, 0, 0};
        break;
      case 3:
        d = {ValueDist::Kind::near_constant, 0.1, r.flag() ? 0.0 : 1e-3, 0, 0};
        break;
      case 4:
        d = {ValueDist::Kind::outliers, 0, 1, 0.05, 20};
        break;
      default:
        d = ValueDist{};
        break;
    }
  };
  dist(c.q), dist(c.k), dist(c.v);
  if (r.flag()) c.d_lse = ValueDist{};
  const domain::Bounds b = domain::bounds(tier);
  s.batch = decode_int(r, domain::kMinDim, b.max_batch);
  s.heads_kv = decode_int(r, domain::kMinDim, b.max_heads_kv);
  s.heads_q = s.heads_kv * decode_int(r, 1, b.max_group);
  const std::vector<int64_t> corners = domain::size_corners(b.max_seq), dims = domain::head_dim_menu(b.max_dim);
  const std::vector<int64_t> q_corners = domain::size_corners(b.seq_q_bound());
  s.seq_q = decode_size(r, b.seq_q_bound(), q_corners);
  s.seq_kv = decode_size(r, b.max_seq, corners);
  s.head_dim_qk = decode_size(r, b.max_dim, dims);
  s.head_dim_v = r.flag() ? s.head_dim_qk : decode_size(r, b.max_dim, dims);
  // The details of the mask and the composition come from a generator seeded by the data:
  // their kinds from explicit bytes (so mutations switch kinds), their parameters from the seed.
  const uint64_t detail_seed = r.range(0, UINT64_MAX);
  c.seed = r.range(0, UINT64_MAX);
  SplitMix gen(detail_seed);
  const uint64_t mask_kind = r.range(0, 3);
  c.mask = mask_kind == 0   ? MaskExpr::all_visible()
           : mask_kind == 1 ? MaskExpr::causal_mask(r.flag() ? Align::bottom_right : Align::top_left)
                            : random_mask(gen, s.seq_q, s.seq_kv, mask_kind == 2 ? 2 : 0);
  if (r.flag()) c.composition = random_composition(gen, s.seq_q, s.seq_kv);
  // Layouts last, so the bytes before keep their meaning: none (the default), one shared
  // layout, or one per tensor with packings. A packing makes the shape allow it (qkv: one
  // head count, Skv = Sq, Dv = Dqk; kv: Dv = Dqk), so mutations reach packed views often.
  switch (r.range(0, 2)) {
    case 1:
      c.layouts = Layouts::uniform(decode_tensor_layout(r));
      break;
    case 2:
      for (TensorId role : kLaidOutTensors) c.layouts[role] = decode_tensor_layout(r);
      c.layouts.inputs = decode_packing(r, s);
      c.layouts.grads = decode_packing(r, s);
      break;
    default:
      break;
  }
  // A score bias after the layouts, from a seed in the bytes (its kind, the dimensions it spans,
  // its values, dBias or not): an input that ends before this byte has none.
  if (r.flag()) {
    SplitMix bias_gen(r.range(0, UINT64_MAX));
    ScoreBias bias = random_bias(bias_gen);
    // At the real tier a dense bias over every dimension can pass the case format's limit:
    // broadcast it over the batch, then the heads, until it fits.
    auto elements = [&] {
      int64_t n = 1;
      for (int64_t e : bias.tensor_shape(s)) n *= e;
      return n;
    };
    for (int dim = 0; dim < 2 && elements() > kMaxBiasElements; ++dim) bias.spans[static_cast<size_t>(dim)] = false;
    // dBias is judged by the CPU oracle set only (backends/registry.h, oracles_for), minutes a case
    // at the GPU tiers' sizes: there the bias is an input without a gradient.
    if (tier == domain::SizeTier::real || tier == domain::SizeTier::decode) bias.requires_grad = false;
    c.bias = bias;
  }
  c.mask = fit_mask(c.mask, s.seq_q, s.seq_kv);
  c.composition = fit_composition(c.composition, s.seq_q, s.seq_kv);
  return c;
}

}  // namespace attnfuzz
