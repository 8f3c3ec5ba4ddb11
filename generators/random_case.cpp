#include "generators/random_case.h"

#include <algorithm>
#include <cmath>

#include "harness/rng.h"

namespace attnfuzz {

uint64_t SplitMix::next() { return splitmix64(s_++); }
int64_t SplitMix::range(int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(next() % static_cast<uint64_t>(hi - lo + 1)); }
double SplitMix::unit() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }

Align random_align(SplitMix& r) { return r.chance(0.5) ? Align::top_left : Align::bottom_right; }

MaskExpr random_window(SplitMix& r, int64_t sq, int64_t skv) {
  const int64_t left = r.chance(0.2) ? -1 : r.range(0, std::max<int64_t>(sq, skv));
  const int64_t right = r.chance(0.2) ? -1 : r.range(0, 4);
  return MaskExpr::window(left, right, random_align(r));
}

Composition random_band_partition(SplitMix& r, int64_t sq, int64_t skv) {
  Composition c;
  c.kind = Composition::Kind::mask_partition;
  c.window_left = r.range(0, std::max<int64_t>(sq, skv));
  c.window_right = r.chance(0.7) ? 0 : r.range(-1, 3);
  c.window_align = random_align(r);
  return c;
}

namespace {

std::vector<int64_t> random_segments(SplitMix& r, int64_t total, int64_t count) {
  std::vector<int64_t> seg(static_cast<size_t>(count), 0);
  for (int64_t i = 0; i < total; ++i) ++seg[static_cast<size_t>(r.range(0, count - 1))];
  return seg;  // zero-length segments (empty sequences) happen naturally
}

}  // namespace

MaskExpr random_mask(SplitMix& r, int64_t sq, int64_t skv, int depth) {
  using K = MaskExpr::Kind;
  const int64_t choice = r.range(0, depth < 2 ? 9 : 6);
  MaskExpr m;
  switch (choice) {
    case 0:
      return MaskExpr::all_visible();
    case 1:
      return MaskExpr::causal_mask(random_align(r));
    case 2:
      return random_window(r, sq, skv);
    case 3: {
      m.kind = K::document;
      const int64_t n = r.range(1, 4);
      m.segments_q = random_segments(r, sq, n);
      m.segments_kv = random_segments(r, skv, n);
      return m;
    }
    case 4:
      m.kind = K::prefix_lm;
      m.align = random_align(r);
      m.prefix = r.range(0, skv);
      return m;
    case 5: {
      m.kind = K::block_sparse;
      m.block_q = r.range(1, 8);
      m.block_kv = r.range(1, 8);
      const int64_t nq = (sq + m.block_q - 1) / m.block_q, nk = (skv + m.block_kv - 1) / m.block_kv;
      const double density = r.unit();
      for (int64_t i = 0; i < nq; ++i) {
        std::string row;
        for (int64_t j = 0; j < nk; ++j) row += r.chance(density) ? '1' : '0';
        m.rows.push_back(row);
      }
      return m;
    }
    case 6:
      m.kind = K::random;
      m.density = r.chance(0.1) ? 0.0 : r.unit();
      m.seed = r.next();
      return m;
    case 7:
      return MaskExpr::op(K::not_, {random_mask(r, sq, skv, depth + 1)});
    default: {
      std::vector<MaskExpr> args;
      const int64_t n = r.range(2, 3);
      for (int64_t i = 0; i < n; ++i) args.push_back(random_mask(r, sq, skv, depth + 1));
      return MaskExpr::op(choice == 8 ? K::and_ : K::or_, std::move(args));
    }
  }
}

Composition random_composition(SplitMix& r, int64_t sq, int64_t skv, int depth) {
  Composition c;
  const int64_t choice = r.range(0, depth < 2 ? 3 : 0);
  auto cuts = [&](int64_t n) {
    std::vector<int64_t> b;
    const int64_t parts = r.range(1, 3);
    int64_t prev = 0;
    for (int64_t i = 0; i < parts; ++i) {
      prev = r.range(prev, n);  // equal cuts make empty chunks
      b.push_back(prev);
    }
    return b;
  };
  switch (choice) {
    case 0:
      return c;
    case 1:
      c.kind = Composition::Kind::kv_split;
      c.bounds = cuts(skv);
      break;
    case 2:
      c.kind = Composition::Kind::q_split;
      c.bounds = cuts(sq);
      break;
    default:
      c = random_band_partition(r, sq, skv);
      break;
  }
  if (r.chance(0.3)) c.children.push_back(random_composition(r, sq, skv, depth + 1));
  return c;
}

namespace {

// A size: often one of the tile corners of generators/domain.h, else uniform up to `max`, or,
// above kLogUniformFrom, log-uniform: at GPU sizes the cost of a case grows with Sq * Skv, so
// most draws stay mid-sized and the corners (mostly large there) bring the very large ones.
int64_t random_size(SplitMix& r, int64_t max) {
  if (r.chance(0.35)) return r.pick(domain::size_corners(max));
  if (max > domain::kLogUniformFrom)
    return std::clamp<int64_t>(static_cast<int64_t>(std::exp(r.unit() * std::log(static_cast<double>(max) + 1.0))), 1, max);
  return r.range(1, max);
}

// A head dim: often one real kernels instantiate (or its +-1 neighbour), else a size.
// Below the smallest kernel dim no draw is spent, so the toy tier's stream is unchanged.
int64_t random_head_dim(SplitMix& r, int64_t max) {
  const std::vector<int64_t> menu = domain::head_dim_menu(max);
  if (!menu.empty() && r.chance(0.5)) return r.pick(menu);
  return random_size(r, max);
}

TensorLayout random_tensor_layout(SplitMix& r) {
  TensorLayout l;
  // Half the tensors keep the common BHSD/BSHD orders, the rest any order of B, H, S.
  l.order = r.chance(0.5) ? (r.chance(0.5) ? TensorLayout::Order::bhsd : TensorLayout::Order::bshd)
                          : r.pick(std::vector<TensorLayout::Order>(kAllOrders.begin(), kAllOrders.end()));
  if (r.chance(0.25)) l.row_padding = r.range(1, domain::kMaxRowPadding);
  if (r.chance(0.2)) l.head_padding = r.range(1, domain::kMaxHeadPadding);
  if (r.chance(0.3)) l.offset = r.pick(std::vector<int64_t>(domain::kOffsets.begin(), domain::kOffsets.end()));
  return l;
}

}  // namespace

Layouts random_layouts(SplitMix& r, const Shape& s) {
  Layouts out;
  for (TensorId role : kLaidOutTensors) out[role] = r.chance(0.3) ? TensorLayout{} : random_tensor_layout(r);
  auto packing = [&](double p) {
    if (!r.chance(p)) return Packing::none;
    if (packing_applies(Packing::qkv, s) && r.chance(0.7)) return Packing::qkv;
    return packing_applies(Packing::kv, s) ? Packing::kv : Packing::none;
  };
  out.inputs = packing(0.3);
  out.grads = packing(0.15);
  return out;
}

void breaking_values(SplitMix& r, Case& c) {
  auto shifted = [&](double shift, double q_sign) {
    // Column 0 of Q (in a share of the rows) times column 0 of K (every row) adds
    // q_sign * a^2 * scale to those rows' scores: a = sqrt(shift / scale), a whole number, so
    // that every dtype holds it.
    const double a = std::max(1.0, std::round(std::sqrt(shift / c.effective_scale())));
    c.q = ValueDist{ValueDist::Kind::row_shift, 0.0, 1.0, r.pick(std::vector<double>{1.0, 0.5, 0.1}), q_sign * a};
    c.k = ValueDist{ValueDist::Kind::row_shift, 0.0, 1.0, 1.0, a};
  };
  const double log_uniform = r.unit();
  switch (r.range(0, 6)) {
    case 0:  // LSE from about -8 down to -2000: past -87 (and -103), exp(S) alone underflows fp32
      shifted(8.0 * std::exp(log_uniform * std::log(250.0)), -1.0);
      break;
    case 1:  // scores from about 1e3 up to near fp16's largest finite value (65504)
      shifted(1e3 * std::exp(log_uniform * std::log(60.0)), 1.0);
      break;
    case 2: {  // a share of Q, K or V subnormal in the case dtype
      ValueDist d{ValueDist::Kind::subnormal, 0.0, 1.0, r.pick(std::vector<double>{0.1, 0.5}), smallest_normal(c.dtype)};
      const int64_t which = r.range(0, 3);
      if (which == 0 || which == 3) c.q = d;
      if (which == 1 || which == 3) c.k = d;
      if (which == 2) c.v = d;
      break;
    }
    case 3:  // dO exactly zero in most rows, or in all
      c.d_out = ValueDist{ValueDist::Kind::sparse_rows, 0.0, 1.0, r.pick(std::vector<double>{0.0, 0.05, 0.5}), 0.0};
      break;
    case 4:  // a large dO: 2^3 in fp16 (its gradients' sums stay finite), 2^8 otherwise
      c.d_out = ValueDist{ValueDist::Kind::normal, 0.0, c.dtype == DType::f16 ? kLargeGradientSigma : 256.0, 0.0, 0.0};
      break;
    case 5: {  // NaN or an infinity in one element of Q, K, V or dO (its first row, and a share of rows)
      ValueDist d{ValueDist::Kind::nonfinite, 0.0, 1.0, r.pick(std::vector<double>{0.0, 0.01, 0.2}), r.pick(std::vector<double>{0.0, 1.0, -1.0})};
      switch (r.range(0, 3)) {
        case 0: c.q = d; break;
        case 1: c.k = d; break;
        case 2: c.v = d; break;
        default: c.d_out = d; break;
      }
      break;
    }
    default:  // a large dLSE (fp32 for every dtype)
      c.d_lse = ValueDist{ValueDist::Kind::normal, 0.0, 256.0, 0.0, 0.0};
      break;
  }
}

RandomCaseOptions RandomCaseOptions::for_tier(domain::SizeTier t) {
  const domain::Bounds b = domain::bounds(t);
  RandomCaseOptions o;
  o.max_batch = b.max_batch;
  o.max_heads_kv = b.max_heads_kv;
  o.max_group = b.max_group;
  o.max_seq = b.max_seq;
  o.max_dim = b.max_dim;
  o.max_seq_q = b.max_seq_q;
  return o;
}

Case random_case(uint64_t seed, const RandomCaseOptions& opt) {
  SplitMix r(seed);
  Case c;
  c.seed = r.next();
  Shape& s = c.shape;
  s.batch = r.range(1, opt.max_batch);
  s.heads_kv = r.range(1, opt.max_heads_kv);
  s.heads_q = s.heads_kv * r.range(1, opt.max_group);
  s.seq_q = random_size(r, opt.seq_q_bound());
  const bool square = r.chance(0.3) && opt.max_seq_q == 0;
  s.seq_kv = square ? s.seq_q : random_size(r, opt.max_seq);
  s.head_dim_qk = random_head_dim(r, opt.max_dim);
  s.head_dim_v = r.chance(0.5) ? s.head_dim_qk : random_head_dim(r, opt.max_dim);
  c.dtype = r.pick(opt.dtypes);
  TensorLayout shared;
  shared.order = r.chance(0.5) ? TensorLayout::Order::bhsd : TensorLayout::Order::bshd;
  shared.row_padding = r.chance(0.2) ? r.range(1, 8) : 0;
  c.layouts = Layouts::uniform(shared);
  {
    // Per-tensor layouts from a stream of their own: the rest of the case stays what this
    // seed gave before layouts were per tensor.
    SplitMix lr(splitmix64(c.seed ^ 0x6c61796f75747321ull));
    if (lr.chance(opt.p_tensor_layouts)) c.layouts = random_layouts(lr, s);
    // What the memory around the tensors holds (harness/layout.h), from its own stream too.
    SplitMix sr(splitmix64(c.seed ^ 0x737572726f756e64ull));
    if (sr.chance(opt.p_surround)) {
      c.layouts.surround.fill = sr.chance(0.6) ? Surround::Fill::nan : Surround::Fill::large;
      c.layouts.surround.guard = sr.pick(std::vector<int64_t>(domain::kSurroundGuards.begin(), domain::kSurroundGuards.end()));
    }
  }
  if (r.chance(0.2)) c.scale = 0.05 + r.unit();
  if (r.chance(opt.p_softcap)) c.softcap = 1.0 + 30.0 * r.unit();
  c.mask = random_mask(r, s.seq_q, s.seq_kv);
  auto dist = [&]() {
    ValueDist d;
    switch (r.range(0, 5)) {
      case 0:
        d.kind = ValueDist::Kind::uniform;
        break;
      case 1:
        d.kind = ValueDist::Kind::large_logit;
        d.sigma = 4.0 + 4.0 * r.unit();
        break;
      case 2:
        d.kind = ValueDist::Kind::near_constant;
        d.mean = 0.1;
        d.sigma = r.chance(0.5) ? 0.0 : 1e-3;
        break;
      case 3:
        d.kind = ValueDist::Kind::outliers;
        d.fraction = 0.05;
        d.magnitude = 20.0;
        break;
      default:
        d.sigma = 0.5 + r.unit();
        d.mean = r.chance(0.2) ? 1.0 : 0.0;
        break;
    }
    return d;
  };
  c.q = dist();
  c.k = dist();
  c.v = dist();
  c.d_out = ValueDist{};
  if (r.chance(opt.p_dlse)) c.d_lse = ValueDist{};
  if (r.chance(opt.p_composition)) c.composition = random_composition(r, s.seq_q, s.seq_kv);
  {
    // From a stream of its own, as the layouts: the rest of the case is what this seed gave
    // before these values existed.
    SplitMix br(splitmix64(c.seed ^ 0x627265616b696e67ull));
    if (br.chance(opt.p_breaking_values)) {
      Case with = c;
      breaking_values(br, with);
      const std::vector<ValueFeature> kinds = value_features(with);
      const bool left_out = std::any_of(kinds.begin(), kinds.end(), [&](ValueFeature f) {
        return std::find(opt.breaking_left_out.begin(), opt.breaking_left_out.end(), f) != opt.breaking_left_out.end();
      });
      if (!left_out) c = std::move(with);
    }
  }
  {
    SplitMix bias(splitmix64(c.seed ^ 0x73636f7265626961ull));
    if (bias.chance(opt.p_bias)) c.bias = random_bias(bias);
  }
  {
    SplitMix ragged(splitmix64(c.seed ^ 0x7261676765642121ull));
    if (ragged.chance(opt.p_ragged)) c.ragged = random_ragged(ragged, s);
  }
  return c;
}

Ragged random_ragged(SplitMix& r, const Shape& s) {
  Ragged g;
  auto length = [&](int64_t padded) -> int64_t {
    const int64_t pick = r.range(0, 9);
    if (pick == 0) return 0;
    if (pick == 1) return std::min<int64_t>(1, padded);
    if (pick <= 3) return padded;
    return r.range(0, padded);
  };
  for (int64_t b = 0; b < s.batch; ++b) {
    g.lens_q.push_back(length(s.seq_q));
    g.lens_kv.push_back(length(s.seq_kv));
  }
  if (r.chance(0.3)) g.gap_q = r.range(1, 64);
  if (r.chance(0.4)) g.gap_kv = r.range(1, 64);
  if (r.chance(0.5)) g.tail = r.range(1, 128);
  if (r.chance(0.4)) g.page_size = r.chance(0.5) ? r.pick(std::vector<int64_t>{1, 2, 16, 64, 128, 256}) : r.range(1, kMaxPageSize);
  if (r.chance(0.2)) g.max_slack = r.chance(0.5) ? 1 : r.range(2, 512);
  g.misaligned = r.chance(0.1);
  return g;
}


ScoreBias random_bias(SplitMix& r) {
  ScoreBias b;
  const int64_t kind = r.range(0, 4);
  b.kind = kind <= 2 ? ScoreBias::Kind::tensor : kind == 3 ? ScoreBias::Kind::alibi : ScoreBias::Kind::relative;
  if (b.kind == ScoreBias::Kind::tensor) b.spans = {r.chance(0.5), r.chance(0.6), r.chance(0.8), r.chance(0.9)};
  if (b.kind != ScoreBias::Kind::alibi) switch (r.range(0, 3)) {
      case 0:  // saturating: a few keys dominate each row
        b.values.sigma = 4.0 + 4.0 * r.unit();
        break;
      case 1:  // mask-like: an additive mask's large entries
        b.values.kind = ValueDist::Kind::outliers;
        b.values.sigma = 0.5;
        b.values.fraction = 0.05 + 0.3 * r.unit();
        b.values.magnitude = r.chance(0.8) ? -1e4 : 1e4;
        break;
      default:
        b.values.sigma = 0.25 + 1.5 * r.unit();
        b.values.mean = r.chance(0.2) ? -2.0 : 0.0;
        break;
    }
  // Half the biases ask dBias: a backend that returns none still runs the other half.
  b.requires_grad = r.chance(0.5);
  return b;
}

Case campaign_case(uint64_t seed, uint64_t index, const RandomCaseOptions& opt) {
  return random_case(splitmix64(seed ^ splitmix64(index)), opt);
}

}  // namespace attnfuzz
