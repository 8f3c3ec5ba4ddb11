#include "generators/shrink.h"

#include <algorithm>
#include <numeric>

#include "generators/domain.h"
#include "harness/errors.h"

namespace attnfuzz {
namespace {

std::vector<int64_t> fit_segments(std::vector<int64_t> seg, int64_t total) {
  int64_t sum = 0;
  for (auto& s : seg) {
    s = std::min(s, total - sum);
    sum += s;
  }
  if (!seg.empty()) seg.back() += total - sum;
  return seg;
}

// Smaller values for one dimension: the floor, half, minus one (deduplicated, all < v, >= lo).
std::vector<int64_t> smaller(int64_t v, int64_t lo = domain::kMinDim) {
  std::vector<int64_t> out;
  for (int64_t x : {lo, v / 2, v - 1})
    if (x >= lo && x < v && std::find(out.begin(), out.end(), x) == out.end()) out.push_back(x);
  return out;
}

// Smaller head dims: those of smaller(), then the kernel head dims below v, largest first,
// so a finding that needs a dim a kernel instantiates shrinks to the smallest such dim.
std::vector<int64_t> smaller_head_dims(int64_t v) {
  std::vector<int64_t> out = smaller(v);
  for (auto it = domain::kKernelHeadDims.rbegin(); it != domain::kKernelHeadDims.rend(); ++it)
    if (*it < v && std::find(out.begin(), out.end(), *it) == out.end()) out.push_back(*it);
  return out;
}

// Layouts closer to the default: all default, unpacked, the surround zero or unguarded, then
// each tensor alone default.
std::vector<Layouts> simpler_layouts(const Layouts& l) {
  std::vector<Layouts> out;
  if (l == Layouts{}) return out;
  out.push_back(Layouts{});
  if (l.inputs != Packing::none || l.grads != Packing::none) {
    Layouts x = l;
    x.inputs = x.grads = Packing::none;
    out.push_back(x);
  }
  if (l.surround.fill != Surround::Fill::zero) {
    Layouts x = l;
    x.surround.fill = Surround::Fill::zero;
    out.push_back(x);
  }
  if (l.surround.guard > 0) {
    Layouts x = l;
    x.surround.guard = 0;
    out.push_back(x);
  }
  for (TensorId r : kLaidOutTensors)
    if (!(l[r] == TensorLayout{})) {
      Layouts x = l;
      x[r] = TensorLayout{};
      out.push_back(x);
    }
  return out;
}

// How far from the default layouts: non-default tensors, packings and surround.
uint64_t layout_distance(const Layouts& l) {
  uint64_t n = (l.inputs != Packing::none) + (l.grads != Packing::none) + (l.surround.fill != Surround::Fill::zero) +
               (l.surround.guard > 0);
  for (TensorId r : kLaidOutTensors) n += !(l[r] == TensorLayout{});
  return n;
}

bool valid(const Case& c) {
  try {
    // No candidate needs more memory than the case it shrinks, whose budget was checked where
    // it ran (with its scores on a GPU, perhaps).
    validate(c, kNoMemoryBudget);
    return true;
  } catch (const CaseError&) {
    return false;
  }
}

// Simpler masks: no mask, each argument of a combinator, fewer arguments, simpler leaves.
std::vector<MaskExpr> simpler_masks(const MaskExpr& m) {
  using K = MaskExpr::Kind;
  std::vector<MaskExpr> out;
  if (m.kind == K::all) return out;
  out.push_back(MaskExpr::all_visible());
  switch (m.kind) {
    case K::and_:
    case K::or_:
      for (const auto& a : m.args) out.push_back(a);
      if (m.args.size() > 1)
        for (size_t i = 0; i < m.args.size(); ++i) {
          MaskExpr fewer = m;
          fewer.args.erase(fewer.args.begin() + static_cast<long>(i));
          out.push_back(fewer);
        }
      for (size_t i = 0; i < m.args.size(); ++i)
        for (const auto& s : simpler_masks(m.args[i])) {
          MaskExpr x = m;
          x.args[i] = s;
          out.push_back(x);
        }
      break;
    case K::not_:
      for (const auto& s : simpler_masks(m.args[0])) out.push_back(MaskExpr::op(K::not_, {s}));
      break;
    case K::sliding_window:
      out.push_back(MaskExpr::causal_mask(m.align));
      break;
    case K::prefix_lm:
      out.push_back(MaskExpr::causal_mask(m.align));
      break;
    case K::document:
      if (m.segments_q.size() > 1) {
        MaskExpr two = m;  // merge the last two documents
        two.segments_q.end()[-2] += two.segments_q.back(), two.segments_q.pop_back();
        two.segments_kv.end()[-2] += two.segments_kv.back(), two.segments_kv.pop_back();
        out.push_back(two);
      }
      break;
    default:
      break;
  }
  return out;
}

std::vector<Composition> simpler_compositions(const Composition& c) {
  std::vector<Composition> out;
  if (c.kind == Composition::Kind::single) return out;
  out.push_back(Composition{});
  for (const auto& ch : c.children) out.push_back(ch);
  if (!c.children.empty()) {
    Composition flat = c;
    flat.children.clear();
    out.push_back(flat);
  }
  if (c.bounds.size() > 1) {
    Composition fewer = c;
    fewer.bounds.pop_back();
    out.push_back(fewer);
  }
  for (size_t i = 0; i < c.bounds.size(); ++i)
    for (int64_t b : smaller(c.bounds[i], 0)) {
      Composition moved = c;
      moved.bounds[i] = b;
      std::sort(moved.bounds.begin(), moved.bounds.end());
      out.push_back(moved);
    }
  if (c.kind == Composition::Kind::mask_partition)
    for (int64_t w : smaller(c.window_left, 0)) {
      Composition narrow = c;
      narrow.window_left = w;
      out.push_back(narrow);
    }
  return out;
}

}  // namespace

MaskExpr fit_mask(const MaskExpr& m, int64_t sq, int64_t skv) {
  using K = MaskExpr::Kind;
  MaskExpr f = m;
  switch (m.kind) {
    case K::document:
      f.segments_q = fit_segments(m.segments_q, sq);
      f.segments_kv = fit_segments(m.segments_kv, skv);
      break;
    case K::block_sparse: {
      const size_t nq = static_cast<size_t>((sq + m.block_q - 1) / m.block_q),
                   nk = static_cast<size_t>((skv + m.block_kv - 1) / m.block_kv);
      f.rows.resize(nq, std::string(nk, '1'));
      for (auto& r : f.rows) r.resize(nk, '1');
      break;
    }
    case K::prefix_lm:
      f.prefix = std::min(m.prefix, skv);
      break;
    default:
      break;
  }
  for (auto& a : f.args) a = fit_mask(a, sq, skv);
  return f;
}

Composition fit_composition(const Composition& c, int64_t sq, int64_t skv) {
  Composition f = c;
  const int64_t n = c.kind == Composition::Kind::q_split ? sq : skv;
  for (auto& b : f.bounds) b = std::min(b, n);
  for (auto& ch : f.children) ch = fit_composition(ch, sq, skv);
  return f;
}

uint64_t case_size(const Case& c) {
  const Shape& s = c.shape;
  auto mask_nodes = [](const MaskExpr& m, auto&& self) -> uint64_t {
    using K = MaskExpr::Kind;
    uint64_t n = m.kind == K::all ? 0 : m.kind == K::causal ? 1 : 2 + m.segments_q.size();
    for (const auto& a : m.args) n += self(a, self);
    return n;
  };
  auto comp_nodes = [](const Composition& x, auto&& self) -> uint64_t {
    uint64_t n = x.kind == Composition::Kind::single ? 0 : 1 + x.bounds.size();
    for (int64_t b : x.bounds) n += static_cast<uint64_t>(b);
    // Unsigned: a window of 2^63 - 1 on both sides must not overflow.
    n += static_cast<uint64_t>(std::max<int64_t>(x.window_left, 0)) + static_cast<uint64_t>(std::max<int64_t>(x.window_right, 0));
    for (const auto& ch : x.children) n += self(ch, self);
    return n;
  };
  const uint64_t elems = static_cast<uint64_t>(s.batch * s.heads_q * (s.seq_q * (s.head_dim_qk + s.head_dim_v) + s.seq_kv * 2) +
                                               s.batch * s.heads_kv * s.seq_kv * (s.head_dim_qk + s.head_dim_v));
  uint64_t extras = mask_nodes(c.mask, mask_nodes) + comp_nodes(c.composition, comp_nodes);
  extras += (c.dtype != DType::f32) + (c.softcap.has_value()) + (c.scale.has_value()) + layout_distance(c.layouts);
  for (const ValueDist* d : {&c.q, &c.k, &c.v, &c.d_out}) extras += !(*d == ValueDist{});
  extras += c.d_lse.kind != ValueDist::Kind::zero;
  if (c.bias) {  // a bias costs its kind, the dimensions it spans and its values' departure from N(0, 1)
    extras += 1 + (c.bias->kind != ScoreBias::Kind::tensor) + !(c.bias->values == ValueDist{}) + c.bias->requires_grad;
    for (bool spanned : c.bias->spans) extras += spanned;
  }
  if (c.ragged) {  // a ragged batch costs its poisoned rows and each sequence shorter than the padded length
    const Ragged& g = *c.ragged;
    extras += 1 + (g.gap_q > 0) + (g.gap_kv > 0) + (g.tail > 0) + (g.page_size > 0) + (g.max_slack > 0) + g.misaligned;
    for (size_t b = 0; b < g.lens_q.size(); ++b) extras += g.lens_q[b] != s.seq_q || g.lens_kv[b] != s.seq_kv;
  }
  return elems * 16 + extras;
}

std::vector<Case> shrink_candidates(const Case& c) {
  std::vector<Case> out;
  auto push = [&](Case x) {
    x.mask = fit_mask(x.mask, x.shape.seq_q, x.shape.seq_kv);
    x.composition = fit_composition(x.composition, x.shape.seq_q, x.shape.seq_kv);
    conform_ragged(x);  // the first sequences kept, each no longer than the padded length
    if (!(x == c) && valid(x)) out.push_back(std::move(x));
  };
  const Shape& s = c.shape;
  // Structure first: a single call, no mask, fp32, then sizes, then the details.
  for (const auto& comp : simpler_compositions(c.composition)) {
    Case x = c;
    x.composition = comp;
    push(x);
  }
  for (const auto& m : simpler_masks(c.mask)) {
    Case x = c;
    x.mask = m;
    push(x);
  }
  if (c.ragged) {  // a dense batch, then no poisoned rows, no pages, then sequences of the padded length
    Case dense = c;
    dense.ragged.reset();
    push(dense);
    Case no_gaps = c;
    no_gaps.ragged->gap_q = no_gaps.ragged->gap_kv = no_gaps.ragged->tail = 0;
    push(no_gaps);
    Case plain = c;  // the maxima exact, the buffers aligned
    plain.ragged->max_slack = 0;
    plain.ragged->misaligned = false;
    push(plain);
    Case unpaged = c;
    unpaged.ragged->page_size = 0;
    push(unpaged);
    for (size_t b = 0; b < c.ragged->lens_q.size(); ++b) {
      Case x = c;
      x.ragged->lens_q[b] = s.seq_q;
      x.ragged->lens_kv[b] = s.seq_kv;
      push(x);
    }
  }
  if (s.batch > 1)
    for (int64_t b : smaller(s.batch)) {
      Case x = c;
      x.shape.batch = b;
      push(x);
    }
  if (s.heads_q > 1) {
    // Toward MHA with one head, but also the smallest GQA (4:2) and MQA (2:1) shapes,
    // for bugs that need a group.
    for (auto [hq, hkv] : std::vector<std::pair<int64_t, int64_t>>{
             {1, 1}, {s.heads_q / s.heads_kv, 1}, {2, s.heads_kv > 1 ? 2 : 1}, {2, 1}, {4, 2}, {s.heads_kv * 2, s.heads_kv}}) {
      Case x = c;
      x.shape.heads_q = hq;
      x.shape.heads_kv = hkv;
      push(x);
    }
  }
  if (s.heads_kv > 1)
    for (int64_t k : smaller(s.heads_kv)) {
      if (s.heads_q % k) continue;
      Case x = c;
      x.shape.heads_kv = k;
      push(x);
    }
  for (int64_t v : smaller(s.seq_q)) {
    Case x = c;
    x.shape.seq_q = v;
    push(x);
  }
  for (int64_t v : smaller(s.seq_kv)) {
    Case x = c;
    x.shape.seq_kv = v;
    push(x);
  }
  for (int64_t v : smaller_head_dims(s.head_dim_qk)) {
    Case x = c;
    x.shape.head_dim_qk = v;
    push(x);
  }
  for (int64_t v : smaller_head_dims(s.head_dim_v)) {
    Case x = c;
    x.shape.head_dim_v = v;
    push(x);
  }
  if (c.dtype != DType::f32) {
    Case x = c;
    x.dtype = DType::f32;
    push(x);
  }
  if (c.softcap || c.scale) {
    Case x = c;
    x.softcap.reset(), x.scale.reset();
    push(x);
  }
  for (const Layouts& l : simpler_layouts(c.layouts)) {
    Case x = c;
    x.layouts = l;
    push(x);
  }
  for (ValueDist Case::*d : {&Case::q, &Case::k, &Case::v, &Case::d_out})
    if (!(c.*d == ValueDist{})) {
      Case x = c;
      x.*d = ValueDist{};
      push(x);
    }
  if (c.d_lse.kind != ValueDist::Kind::zero) {
    Case x = c;
    x.d_lse = ValueDist{ValueDist::Kind::zero};
    push(x);
  }
  // A bias: none; no dBias; a plain tensor for ALiBi or a relative table; fewer spanned
  // dimensions; ordinary values. (A finding that needs the bias keeps it: each candidate is judged.)
  if (c.bias) {
    Case x = c;
    x.bias.reset();
    push(x);
    if (c.bias->requires_grad) {
      Case g = c;
      g.bias->requires_grad = false;
      push(g);
    }
    if (c.bias->kind != ScoreBias::Kind::tensor) {
      Case t = c;
      t.bias = ScoreBias{};
      t.bias->spans = {false, true, true, true};
      t.bias->requires_grad = c.bias->requires_grad;
      push(t);
    }
    for (size_t d = 0; d < 4; ++d)
      if (c.bias->kind == ScoreBias::Kind::tensor && c.bias->spans[d]) {
        Case n = c;
        n.bias->spans[d] = false;
        push(n);
      }
    if (!(c.bias->values == ValueDist{}) && c.bias->kind != ScoreBias::Kind::alibi) {
      Case v = c;
      v.bias->values = ValueDist{};
      push(v);
    }
  }
  return out;
}

}  // namespace attnfuzz
