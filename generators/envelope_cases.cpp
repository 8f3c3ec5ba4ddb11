#include "generators/envelope_cases.h"

#include <algorithm>
#include <numeric>

#include "harness/differential.h"
#include "harness/errors.h"
#include "harness/rng.h"

namespace attnfuzz {

namespace {

int64_t element_bytes(DType d) { return d == DType::f32 ? 4 : 2; }

// The alignment in elements of the case dtype (1 when the envelope asks none).
int64_t align_elems(const SupportEnvelope& e, DType d) {
  return e.restricts(EnvelopeClause::alignment) ? std::max<int64_t>(1, e.alignment_bytes / element_bytes(d)) : 1;
}

// Head dims step by the envelope's multiple and, under an alignment, by whole aligned rows.
int64_t head_dim_step(const SupportEnvelope& e, DType d) { return std::lcm(e.head_dim_multiple, align_elems(e, d)); }

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

int64_t fit_head_dim(int64_t d, int64_t step, int64_t max) {
  const int64_t top = std::max(step, max / step * step);
  if (d % step == 0 && d <= max) return d;
  return std::clamp((d + step / 2) / step * step, step, top);
}

bool has_kind(const Composition& c, Composition::Kind k) {
  if (c.kind == k) return true;
  return std::any_of(c.children.begin(), c.children.end(), [&](const Composition& ch) { return has_kind(ch, k); });
}

bool all_or_top_left_causal(const MaskExpr& m) {
  return m.kind == MaskExpr::Kind::all || (m.kind == MaskExpr::Kind::causal && m.align == Align::top_left);
}

// A new Skv (or Sq) invalidates what was drawn for the old one: mask and composition again.
void redraw_for_lengths(Case& c, SplitMix& r) {
  c.mask = random_mask(r, c.shape.seq_q, c.shape.seq_kv);
  c.composition = Composition{};
}

constexpr TensorId kStridedRoles[] = {TensorId::Q,   TensorId::K,   TensorId::V,   TensorId::dO,
                                        TensorId::O,   TensorId::dQ, TensorId::dK, TensorId::dV};

}  // namespace

Case fit_inside(Case c, const SupportEnvelope& e, const RandomCaseOptions& opt, SplitMix& r) {
  Shape& s = c.shape;
  if (!e.takes(c.dtype)) {
    std::vector<DType> both;
    for (DType d : e.dtypes)
      if (std::find(opt.dtypes.begin(), opt.dtypes.end(), d) != opt.dtypes.end()) both.push_back(d);
    c.dtype = r.pick(both.empty() ? e.dtypes : both);
  }
  const int64_t step = head_dim_step(e, c.dtype), max_dim = std::min(e.max_head_dim, std::max(opt.max_dim, step));
  s.head_dim_qk = fit_head_dim(s.head_dim_qk, step, max_dim);
  s.head_dim_v = e.distinct_head_dims ? fit_head_dim(s.head_dim_v, step, max_dim) : s.head_dim_qk;
  if (!e.grouped_heads) s.heads_q = s.heads_kv;
  if (s.batch > e.max_batch_heads) s.batch = e.max_batch_heads;
  if (s.heads_q > e.max_batch_heads) s.heads_q = s.heads_kv = e.max_batch_heads;
  if (s.seq_kv < e.min_seq_kv || std::max(s.seq_q, s.seq_kv) > e.max_seq) {
    s.seq_kv = std::clamp(s.seq_kv, e.min_seq_kv, e.max_seq);
    s.seq_q = std::min(s.seq_q, e.max_seq);
    redraw_for_lengths(c, r);
  }
  if (!e.softcap) c.softcap.reset();
  if (!e.bias) c.bias.reset();
  if (c.bias && !e.bias_grad) c.bias->requires_grad = false;
  if (c.bias && c.bias->requires_grad && !e.dlse) c.d_lse = ValueDist{ValueDist::Kind::zero};
  if (!e.ragged) c.ragged.reset();
  if (e.masks == MaskSupport::causal_or_none && c.ragged) {
    // Read per sequence (the envelope's mask clause): none, or causal aligned bottom-right.
    if (c.mask.kind != MaskExpr::Kind::all && !(c.mask.kind == MaskExpr::Kind::causal && c.mask.align == Align::bottom_right))
      c.mask = r.chance(0.5) ? MaskExpr::all_visible() : MaskExpr::causal_mask(Align::bottom_right);
  } else if (e.masks == MaskSupport::causal_or_none && !all_or_top_left_causal(c.mask)) {
    c.mask = r.chance(0.5) ? MaskExpr::all_visible() : MaskExpr::causal_mask(Align::top_left);
  }
  // Causal over a square call only: there every convention of causal agrees.
  if (e.masks == MaskSupport::causal_or_none && !c.ragged && c.mask.kind == MaskExpr::Kind::causal) {
    if (s.seq_q >= e.min_seq_kv && s.seq_q <= e.max_seq)
      s.seq_kv = s.seq_q;
    else
      c.mask = MaskExpr::all_visible();
  }
  // Compositions whose every call stays inside: a causal mask is causal only in the whole call,
  // a band partition makes masked parts, and a key split makes short parts.
  if (e.masks == MaskSupport::causal_or_none &&
      (c.mask.kind != MaskExpr::Kind::all || has_kind(c.composition, Composition::Kind::mask_partition)))
    c.composition = Composition{};
  if (e.min_seq_kv > 1 && has_kind(c.composition, Composition::Kind::kv_split)) c.composition = Composition{};
  if (const int64_t a = align_elems(e, c.dtype); a > 1)
    for (TensorId role : kStridedRoles) {
      TensorLayout& l = c.layouts[role];
      l.offset = l.offset / a * a;
      l.row_padding = round_up(l.row_padding, a);
      l.head_padding = round_up(l.head_padding, a);
    }
  if (const int64_t a = align_elems(e, c.dtype); a > 1) c.layouts.surround.guard = round_up(c.layouts.surround.guard, a);
  if (e.packed_lse) c.layouts[TensorId::LSE] = TensorLayout{};
  conform_ragged(c);
  return c;
}

std::vector<EnvelopeClause> breakable_clauses(const SupportEnvelope& e) {
  std::vector<EnvelopeClause> out;
  for (EnvelopeClause c : kAllEnvelopeClauses)
    if (c != EnvelopeClause::grid && e.restricts(c) && e.decided_by_library(c)) out.push_back(c);
  return out;
}

Case step_outside(Case c, const SupportEnvelope& e, EnvelopeClause clause, const RandomCaseOptions& opt, SplitMix& r) {
  c = fit_inside(std::move(c), e, opt, r);
  Shape& s = c.shape;
  switch (clause) {
    case EnvelopeClause::dtype: {
      std::vector<DType> outside;
      for (DType d : {DType::f32, DType::f16, DType::bf16})
        if (!e.takes(d)) outside.push_back(d);
      if (!outside.empty()) c.dtype = r.pick(outside);
      break;
    }
    case EnvelopeClause::head_dim: {
      // 8k +- 1 where a multiple is asked (unless the rows must stay aligned and the adapter
      // enforces it: the library would never see it), or one aligned step past the largest.
      const bool off_multiple = e.head_dim_multiple > 1 && !(e.restricts(EnvelopeClause::alignment) &&
                                                             !e.decided_by_library(EnvelopeClause::alignment));
      const bool past_max = e.max_head_dim != SupportEnvelope::kUnbounded;
      if (off_multiple && (!past_max || r.chance(0.5)))
        s.head_dim_qk = s.head_dim_qk + (r.chance(0.5) || s.head_dim_qk == 1 ? 1 : -1);
      else if (past_max)
        s.head_dim_qk = e.max_head_dim / head_dim_step(e, c.dtype) * head_dim_step(e, c.dtype) + head_dim_step(e, c.dtype);
      if (!e.distinct_head_dims) s.head_dim_v = s.head_dim_qk;
      break;
    }
    case EnvelopeClause::head_dims: {  // one step apart, both still inside the head-dim clause where there is room
      const int64_t step = head_dim_step(e, c.dtype);
      const bool up = s.head_dim_qk + step <= e.max_head_dim, down = s.head_dim_qk > step;
      s.head_dim_v = down && (!up || r.chance(0.5)) ? s.head_dim_qk - step : s.head_dim_qk + step;
      break;
    }
    case EnvelopeClause::gqa:
      s.heads_q = s.heads_kv * 2;
      break;
    case EnvelopeClause::seq:
      if (e.min_seq_kv > 1)
        s.seq_kv = e.min_seq_kv - 1;
      else
        s.seq_q = e.max_seq + 1;
      redraw_for_lengths(c, r);
      c = fit_inside(std::move(c), [&] {
        SupportEnvelope rest = e;  // the redrawn mask inside again, the lengths left outside
        rest.min_seq_kv = 1;
        rest.max_seq = SupportEnvelope::kUnbounded;
        return rest;
      }(), opt, r);
      break;
    case EnvelopeClause::grid:
      break;
    case EnvelopeClause::softcap:
      c.softcap = 1.0 + 30.0 * r.unit();
      break;
    case EnvelopeClause::bias:
      c.bias = random_bias(r);
      break;
    case EnvelopeClause::bias_grad:
      if (!c.bias) c.bias = random_bias(r);
      c.bias->requires_grad = true;
      break;
    case EnvelopeClause::ragged:
      c.ragged = random_ragged(r, s);
      break;
    case EnvelopeClause::mask:
      // A sliding window narrower than the queries, or the keys after the diagonal: neither is
      // all-visible or causal at any size.
      c.mask = s.seq_q >= 2 && r.chance(0.5) ? MaskExpr::window(r.range(0, s.seq_q - 2), 0, Align::top_left)
                                             : MaskExpr::op(MaskExpr::Kind::not_, {MaskExpr::causal_mask(Align::top_left)});
      break;
    case EnvelopeClause::alignment: {
      const TensorId role = kStridedRoles[r.range(0, 7)];
      if (role == TensorId::Q || role == TensorId::K || role == TensorId::V) c.layouts.inputs = Packing::none;
      if (role == TensorId::dQ || role == TensorId::dK || role == TensorId::dV) c.layouts.grads = Packing::none;
      TensorLayout& l = c.layouts[role];
      if (r.chance(0.5))
        l.offset += 1;  // the base pointer one element past
      else
        l.row_padding += 1;  // rows one element longer
      break;
    }
    case EnvelopeClause::lse:
      c.layouts[TensorId::LSE].offset = r.range(1, 3);
      break;
  }
  conform_ragged(c);
  return c;
}

Case fit_budget(Case c, uint64_t budget_bytes, const HostWorkOf& host_work) {
  Shape& s = c.shape;
  while (estimate_host_bytes(c, host_work ? host_work(s) : HostWork{}) > budget_bytes) {
    if (s.batch > 1) {
      s.batch = (s.batch + 1) / 2;
    } else if (s.heads_kv > 1) {
      const int64_t group = s.group();
      s.heads_kv = (s.heads_kv + 1) / 2;
      s.heads_q = s.heads_kv * group;
    } else if (s.heads_q > 1) {
      s.heads_q = (s.heads_q + 1) / 2;
    } else {
      break;  // lengths stay: masks and compositions were drawn for them
    }
  }
  conform_ragged(c);
  return c;
}

namespace {

// 1 to 3 strictly increasing cut points in [lo, n - lo]: parts of at least lo (nothing when no
// cut fits).
std::vector<int64_t> interior_cuts(SplitMix& r, int64_t n, int64_t lo) {
  std::vector<int64_t> cuts;
  const int64_t parts = r.range(1, 3);
  int64_t prev = 0;
  for (int64_t i = 0; i < parts; ++i) {
    const int64_t first = prev + lo, last = n - lo;
    if (first > last) break;
    prev = r.range(first, last);
    cuts.push_back(prev);
  }
  return cuts;
}

MaskExpr mask_in_class(MaskClass m, const SupportEnvelope& e, int64_t sq, int64_t skv, SplitMix& r) {
  switch (m) {
    case MaskClass::none:
      return MaskExpr::all_visible();
    case MaskClass::causal:
      return MaskExpr::causal_mask(e.masks == MaskSupport::causal_or_none ? Align::top_left : random_align(r));
    case MaskClass::window:
      return random_window(r, sq, skv);
    case MaskClass::structured:
      break;
  }
  for (int i = 0; i < 32; ++i)
    if (MaskExpr drawn = random_mask(r, sq, skv); mask_class(drawn) == MaskClass::structured) return drawn;
  MaskExpr prefix;  // random_mask draws a structured mask 7 times in 10: 32 misses do not happen
  prefix.kind = MaskExpr::Kind::prefix_lm;
  prefix.prefix = r.range(0, skv);
  return prefix;
}

// The lengths, mask and composition of a cell's case (case_in_cell); false when the lengths
// leave no room for them.
bool shape_for_cell(Case& c, const FeatureCell& cell, const SupportEnvelope& e, const RandomCaseOptions& opt, SplitMix& r) {
  Shape& s = c.shape;
  const int64_t min_kv = std::max<int64_t>(1, e.min_seq_kv);
  const int64_t q_bound = std::min(opt.seq_q_bound(), e.max_seq), kv_bound = std::min(opt.max_seq, e.max_seq);
  c.composition = Composition{};
  // A ragged batch's mask is read per sequence (the envelope's mask clause): causal aligned
  // bottom-right, which neither split keeps (a query split's first part of a sequence ends before
  // its last row, a key split's before its last key), so a composed causal cell is reached dense.
  const bool causal_or_none = e.masks == MaskSupport::causal_or_none;
  if (causal_or_none && cell.mask == MaskClass::causal && cell.composition != CompositionClass::single) c.ragged.reset();
  if (causal_or_none && cell.mask == MaskClass::causal && c.ragged) {
    c.mask = MaskExpr::causal_mask(Align::bottom_right);
    return true;
  }
  if (e.masks == MaskSupport::causal_or_none && cell.mask == MaskClass::causal && cell.composition != CompositionClass::single) {
    // Tall top-left causal cut at row Skv (the formula in the header).
    int64_t skv = std::clamp(std::min(s.seq_q, s.seq_kv), min_kv, kv_bound);
    if (cell.composition == CompositionClass::merged) skv = std::max(skv, std::min(2 * min_kv, kv_bound));
    int64_t sq = std::max(s.seq_q, s.seq_kv);
    if (sq <= skv) sq = skv + r.range(1, std::max<int64_t>(1, skv));
    sq = std::min(sq, q_bound);
    if (sq <= skv) return false;
    s.seq_q = sq;
    s.seq_kv = skv;
    c.mask = MaskExpr::causal_mask(Align::top_left);
    c.composition.kind = Composition::Kind::q_split;
    c.composition.bounds = {skv};
    if (cell.composition == CompositionClass::merged) {
      Composition rest;
      rest.kind = Composition::Kind::kv_split;
      rest.bounds = interior_cuts(r, skv, min_kv);
      if (rest.bounds.empty()) return false;
      c.composition.children = {Composition{}, rest};
    }
    return true;
  }
  if (cell.composition == CompositionClass::q_split && s.seq_q < 2) s.seq_q = std::min<int64_t>(2, q_bound);
  if (cell.composition == CompositionClass::merged && s.seq_kv < 2 * min_kv) s.seq_kv = std::min(2 * min_kv, kv_bound);
  if (e.masks == MaskSupport::causal_or_none && cell.mask == MaskClass::causal) {
    if (s.seq_q < min_kv || s.seq_q > kv_bound) return false;
    s.seq_kv = s.seq_q;  // causal over a square call only
  }
  c.mask = mask_in_class(cell.mask, e, s.seq_q, s.seq_kv, r);
  if (cell.composition == CompositionClass::q_split) {
    c.composition.kind = Composition::Kind::q_split;
    c.composition.bounds = interior_cuts(r, s.seq_q, 1);
  } else if (cell.composition == CompositionClass::merged) {
    if (cell.mask == MaskClass::window && e.masks == MaskSupport::any && r.chance(0.5)) {
      c.composition = random_band_partition(r, s.seq_q, s.seq_kv);
      return true;
    }
    c.composition.kind = Composition::Kind::kv_split;
    c.composition.bounds = interior_cuts(r, s.seq_kv, min_kv);
  }
  return cell.composition == CompositionClass::single || !c.composition.bounds.empty();
}

}  // namespace

std::optional<Case> case_in_cell(const Case& drawn, const FeatureCell& cell, const SupportEnvelope& e, const CaseMix& mix,
                                 uint64_t seed) {
  if (cell_outside(e, true, cell)) return std::nullopt;  // the envelope's clauses (an LSE is the caller's to ask)
  SplitMix r(splitmix64(seed ^ 0x63656c6c2d636173ull));
  for (int attempt = 0; attempt < kCellTries; ++attempt) {
    Case c = drawn;
    c.dtype = cell.dtype;
    const int64_t step = head_dim_step(e, c.dtype);
    const int64_t lo = round_up(smallest_head_dim(cell.head_dim), step);
    const int64_t hi = std::min({largest_head_dim(cell.head_dim), e.max_head_dim, std::max(mix.gen.max_dim, step)}) / step * step;
    if (lo > hi) return std::nullopt;
    c.shape.head_dim_qk = lo + step * r.range(0, (hi - lo) / step);
    c.shape.head_dim_v = e.distinct_head_dims && r.chance(0.25) ? step * r.range(1, c.shape.head_dim_qk / step) : c.shape.head_dim_qk;
    if (r.chance(0.5)) std::swap(c.shape.head_dim_qk, c.shape.head_dim_v);
    // Every clause but the mask's and the composition's first (they need the final lengths).
    c.mask = MaskExpr::all_visible();
    c.composition = Composition{};
    c = fit_inside(std::move(c), e, mix.gen, r);
    if (!shape_for_cell(c, cell, e, mix.gen, r)) continue;
    conform_ragged(c);
    c = fit_budget(std::move(c), mix.memory_budget_bytes, mix.host_work);
    // Packings need shapes that allow them (harness/layout.h).
    const Limits limits{mix.memory_budget_bytes, mix.host_work ? mix.host_work(c.shape) : HostWork{}};
    for (int fix = 0; fix < 2; ++fix) {
      try {
        validate(c, limits);
      } catch (const CaseError&) {
        c.layouts.inputs = c.layouts.grads = Packing::none;
        continue;
      }
      if (feature_cell(c, composition_class(c.composition)) == cell) return c;
      break;
    }
  }
  return std::nullopt;
}

AimedCase aimed_campaign_case(uint64_t seed, uint64_t index, const CaseMix& mix) {
  return aim_case(campaign_case(seed, index, mix.gen), index, mix);
}

AimedCase aim_case(Case drawn, uint64_t index, const CaseMix& mix) {
  AimedCase out;
  out.c = std::move(drawn);
  if (!mix.targets.empty()) {
    const CaseTarget& t = mix.targets[index % mix.targets.size()];
    out.target = t.backend;
    out.aim = CaseAim::inside;
    // A stream of its own: the blind draw's fields stay what the seed gave them.
    SplitMix r(splitmix64(out.c.seed ^ 0x61696d65642d6361ull));
    const std::vector<EnvelopeClause> edges = breakable_clauses(t.envelope);
    if (!edges.empty() && r.chance(mix.edge_share)) {
      out.aim = CaseAim::edge;
      out.outside = r.pick(edges);
      out.c = step_outside(std::move(out.c), t.envelope, *out.outside, mix.gen, r);
    } else {
      out.c = fit_inside(std::move(out.c), t.envelope, mix.gen, r);
    }
  }
  out.c = fit_budget(std::move(out.c), mix.memory_budget_bytes, mix.host_work);
  return out;
}

}  // namespace attnfuzz
