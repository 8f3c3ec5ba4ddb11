#include "harness/case.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <utility>

#include "harness/errors.h"

namespace attnfuzz {
namespace {

constexpr int64_t kMaxDim = int64_t{1} << 31;
constexpr int64_t kMaxLayoutPad = 4096;  // row/head padding and base offset, in elements

// The constants of estimate_host_bytes (case.h), from the peak resident memory measured over a
// grid of shapes (docs/campaigns.md, "Memory").
constexpr uint64_t kTensorCopies = 24;    // float64 copies of E kept through a case
constexpr uint64_t kComposedCopies = 12;  // the composition's baselines and models
constexpr uint64_t kCallCopies = 7;       // a call's inputs, outputs and error terms
constexpr uint64_t kMaskBytes = 4;        // the dense masks alive at once
constexpr uint64_t kCallPairBytes = 16;   // a call's mask and what its graph leaves in the heap
// float64 copies of the bias tensor kept through a case: the inputs', the problem's, a call's
// slice, a backend's copy. Counted, not measured (the bias came after the memory grid of
// docs/campaigns.md).
constexpr uint64_t kBiasCopies = 4;
constexpr uint64_t kHeadPairBytes = 176;  // the error terms of one head
// torch.f64's graph per pair, its blocks from the heap (under kMmapThreshold) or mapped.
constexpr uint64_t kEveryHeadPairBytes = 104, kEveryHeadPairBytesMapped = 48;
// glibc's largest dynamic mmap threshold (DEFAULT_MMAP_THRESHOLD_MAX on 64-bit).
constexpr uint64_t kMmapThreshold = uint64_t{32} << 20;

uint64_t sat_mul(uint64_t a, uint64_t b) {
  unsigned __int128 p = static_cast<unsigned __int128>(a) * b;
  return p > std::numeric_limits<uint64_t>::max() ? std::numeric_limits<uint64_t>::max() : static_cast<uint64_t>(p);
}
uint64_t sat_add(uint64_t a, uint64_t b) {
  return a > std::numeric_limits<uint64_t>::max() - b ? std::numeric_limits<uint64_t>::max() : a + b;
}
uint64_t prod(std::initializer_list<int64_t> xs) {
  uint64_t p = 1;
  for (auto x : xs) p = sat_mul(p, static_cast<uint64_t>(x));
  return p;
}

void check_dim(int64_t v, const char* name, int64_t min) {
  if (v < min || v > kMaxDim)
    throw CaseError(std::string("shape.") + name, "must be in [" + std::to_string(min) + ", 2^31], got " + std::to_string(v));
}

void check_dist(const ValueDist& d, const std::string& field) {
  auto finite = [&](double x, const char* n) {
    if (!std::isfinite(x)) throw CaseError(field + "." + n, "must be finite");
  };
  finite(d.mean, "mean");
  finite(d.sigma, "sigma");
  finite(d.fraction, "fraction");
  finite(d.magnitude, "magnitude");
  if (d.sigma < 0) throw CaseError(field + ".sigma", "must be >= 0");
  if (d.fraction < 0 || d.fraction > 1) throw CaseError(field + ".fraction", "must be in [0, 1]");
  if (std::fabs(d.mean) + 7 * d.sigma + std::fabs(d.magnitude) > 1e30)
    throw CaseError(field, "values this large overflow every supported dtype");
}

// About the largest value a distribution draws (7 sigma, as above).
// (A non-finite element is no draw: its magnitude only says which one, and the oracles see a 0
// there: docs/semantics.md, "Non-finite inputs".)
double largest_drawn(const ValueDist& d) {
  if (d.kind == ValueDist::Kind::zero) return 0.0;
  return std::fabs(d.mean) + 7 * d.sigma + (d.kind == ValueDist::Kind::nonfinite ? 0.0 : std::fabs(d.magnitude));
}

// Values must fit the case dtype, and the scores S = scale Q K^T and dP = dO V^T the fp32 that
// every contract accumulates them in: beyond that the inputs round to infinity (an fp16 case
// with sigma 1e5 or a magnitude of 1e29) or the scores overflow (scale 1e308), and the baselines
// of the tolerance rule overflow with them, so that the reference itself would be judged a finding.
void check_magnitudes(const Case& c) {
  const double dtype_max = largest_finite(c.dtype);
  const double fp32_max = largest_finite(DType::f32);
  auto say = [](double x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3g", x);
    return std::string(buf);
  };
  for (const auto& [d, field] :
       {std::pair<const ValueDist*, const char*>{&c.q, "values.q"}, {&c.k, "values.k"}, {&c.v, "values.v"}, {&c.d_out, "grads.d_out"}})
    if (largest_drawn(*d) > dtype_max)
      throw CaseError(field, "values up to about " + say(largest_drawn(*d)) + " overflow " + std::string(to_string(c.dtype)) +
                                 " (largest finite " + say(dtype_max) + ")");
  const Shape& s = c.shape;
  const double scores = c.effective_scale() * static_cast<double>(s.head_dim_qk) * largest_drawn(c.q) * largest_drawn(c.k);
  if (!(scores <= fp32_max))
    throw CaseError(c.scale ? "scale" : "values.q", "scores up to about scale * head_dim_qk * max|q| * max|k| = " + say(scores) +
                                                        " overflow fp32 (largest finite " + say(fp32_max) + ")");
  const double dp = static_cast<double>(s.head_dim_v) * largest_drawn(c.d_out) * largest_drawn(c.v);
  if (!(dp <= fp32_max))
    throw CaseError("grads.d_out", "dO V^T up to about head_dim_v * max|dO| * max|v| = " + say(dp) + " overflows fp32 (largest finite " +
                                       say(fp32_max) + ")");
}

void check_bias(const Case& c) {
  const ScoreBias& b = *c.bias;
  if (b.kind != ScoreBias::Kind::tensor && b.spans != ScoreBias{}.spans)
    throw CaseError("bias.spans", "only a bias of kind tensor is broadcast (" + std::string(to_string(b.kind)) + " spans heads, q and kv)");
  check_dist(b.values, "bias.values");
  const double dtype_max = largest_finite(c.dtype);
  if (largest_drawn(b.values) > dtype_max)
    throw CaseError("bias.values", "values overflow " + std::string(to_string(c.dtype)));
  // Every kind is handed over materialized (a relative table expanded): its tensor is what a run holds.
  const Shape& s = c.shape;
  const auto shape = b.tensor_shape(s);
  const uint64_t elements = prod({shape[0], shape[1], shape[2], shape[3]});
  if (elements > static_cast<uint64_t>(kMaxBiasElements))
    throw CaseError("bias", std::to_string(elements) + " elements, over the limit of 2^28");
  // ALiBi's largest value is slope_0 max(Sq, Skv), slope_0 = 2^(-8 / Hq): beyond the dtype only for fp16 at S >= 2^17.
  if (b.kind == ScoreBias::Kind::alibi &&
      std::exp2(-8.0 / static_cast<double>(s.heads_q)) * static_cast<double>(std::max(s.seq_q, s.seq_kv)) > dtype_max)
    throw CaseError("bias.kind", "ALiBi's values overflow " + std::string(to_string(c.dtype)) + " at this length");
}

void check_ragged(const Case& c) {
  const Ragged& r = *c.ragged;
  const Shape& s = c.shape;
  auto check_lens = [&](const std::vector<int64_t>& lens, int64_t longest, const char* key, const char* dim) {
    const std::string field = std::string("ragged.") + key;
    if (static_cast<int64_t>(lens.size()) != s.batch)
      throw CaseError(field, std::to_string(lens.size()) + " lengths for a batch of " + std::to_string(s.batch));
    for (size_t b = 0; b < lens.size(); ++b)
      if (lens[b] < 0 || lens[b] > longest)
        throw CaseError(field + "[" + std::to_string(b) + "]", "must be in [0, " + std::string(dim) + " = " + std::to_string(longest) + "]");
  };
  check_lens(r.lens_q, s.seq_q, "lens_q", "seq_q");
  check_lens(r.lens_kv, s.seq_kv, "lens_kv", "seq_kv");
  auto check_gap = [](int64_t v, const char* key) {
    if (v < 0 || v > kMaxRaggedGap) throw CaseError(std::string("ragged.") + key, "must be in [0, " + std::to_string(kMaxRaggedGap) + "]");
  };
  check_gap(r.gap_q, "gap_q");
  check_gap(r.gap_kv, "gap_kv");
  check_gap(r.tail, "tail");
  if (r.page_size < 0 || r.page_size > kMaxPageSize)
    throw CaseError("ragged.page_size", "must be in [0, " + std::to_string(kMaxPageSize) + "] (0: no paged layout)");
  check_gap(r.max_slack, "max_slack");
}

void check_bounds(const std::vector<int64_t>& b, int64_t n, const std::string& field) {
  int64_t prev = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    if (b[i] < prev || b[i] > n)
      throw CaseError(field + ".bounds", "cut points must be non-decreasing within [0, " + std::to_string(n) + "]");
    prev = b[i];
  }
}

void check_composition(const Composition& c, const Shape& s, const std::string& field, int depth) {
  if (depth > 8) throw CaseError(field, "compositions nest at most 8 deep");
  size_t parts = 1;
  switch (c.kind) {
    case Composition::Kind::single:
      if (!c.children.empty()) throw CaseError(field + ".children", "a single call has no children");
      return;
    case Composition::Kind::kv_split:
      check_bounds(c.bounds, s.seq_kv, field);
      parts = c.bounds.size() + 1;
      break;
    case Composition::Kind::q_split:
      check_bounds(c.bounds, s.seq_q, field);
      parts = c.bounds.size() + 1;
      break;
    case Composition::Kind::mask_partition:
      if (c.window_left < -1 || c.window_right < -1) throw CaseError(field + ".window", "bounds must be >= 0 or -1 (unbounded)");
      parts = 2;
      break;
  }
  if (!c.children.empty() && c.children.size() != 1 && c.children.size() != parts)
    throw CaseError(field + ".children",
                    "expected 0, 1 or " + std::to_string(parts) + " children, got " + std::to_string(c.children.size()));
  for (size_t i = 0; i < c.children.size(); ++i)
    check_composition(c.children[i], s, field + ".children[" + std::to_string(i) + "]", depth + 1);
}

uint64_t leaf_calls(const Composition& c) {
  if (c.kind == Composition::Kind::single) return 1;
  const uint64_t parts = c.kind == Composition::Kind::mask_partition ? 2 : c.bounds.size() + 1;
  if (c.children.empty()) return parts;
  if (c.children.size() == 1) return sat_mul(parts, leaf_calls(c.children[0]));
  uint64_t n = 0;
  for (const auto& ch : c.children) n = sat_add(n, leaf_calls(ch));
  return n;
}

// E of estimate_host_bytes for a call over `rows` queries and `cols` keys: Q, O, LSE, dQ and
// K, V, dK, dV.
uint64_t tensor_elements(const Shape& s, uint64_t rows, uint64_t cols) {
  const uint64_t q_side = sat_mul(prod({s.batch, s.heads_q, s.head_dim_qk + s.head_dim_v + 1}), rows);
  const uint64_t kv_side = sat_mul(prod({s.batch, s.heads_kv, s.head_dim_qk + s.head_dim_v}), cols);
  return sat_add(q_side, kv_side);
}

// Walks the evaluated tree the way the composition engine cuts it (harness/compose.cpp:
// bounds clamped to the region, mask partitions over the whole region twice).
void walk_cost(const Case& cs, const Composition& c, int64_t q0, int64_t q1, int64_t k0, int64_t k1, CompositionCost& cost) {
  const Shape& s = cs.shape;
  const uint64_t rows = static_cast<uint64_t>(q1 - q0), cols = static_cast<uint64_t>(k1 - k0);
  const uint64_t heads = sat_mul(static_cast<uint64_t>(s.batch), static_cast<uint64_t>(s.heads_q));
  const uint64_t out_elems = sat_mul(heads, sat_mul(rows, static_cast<uint64_t>(s.head_dim_v) + 1));
  cost.work = sat_add(cost.work, out_elems);
  cost.bytes = sat_add(cost.bytes, sat_mul(out_elems, 8));
  if (c.kind == Composition::Kind::single) {
    if (rows == 0 || cols == 0) return;
    const uint64_t scores = sat_mul(heads, sat_mul(rows, cols));
    cost.work = sat_add(cost.work, sat_mul(scores, static_cast<uint64_t>(s.head_dim_qk + s.head_dim_v)));
    const uint64_t in_elems = sat_add(sat_mul(heads, sat_mul(rows, static_cast<uint64_t>(s.head_dim_qk))),
                                      prod({s.batch, s.heads_kv, static_cast<int64_t>(cols), s.head_dim_qk + s.head_dim_v}));
    cost.bytes = sat_add(cost.bytes, sat_add(sat_mul(in_elems, 8), scores));  // inputs (float64) and the dense mask
    cost.call_elements = sat_add(cost.call_elements, tensor_elements(s, rows, cols));
    cost.call_pairs = sat_add(cost.call_pairs, scores);
    return;
  }
  auto child = [&](size_t i) -> const Composition& {
    static const Composition kSingle{};
    if (c.children.empty()) return kSingle;
    return c.children.size() == 1 ? c.children[0] : c.children[i];
  };
  if (c.kind == Composition::Kind::mask_partition) {
    walk_cost(cs, child(0), q0, q1, k0, k1, cost);
    walk_cost(cs, child(1), q0, q1, k0, k1, cost);
    return;
  }
  const bool on_q = c.kind == Composition::Kind::q_split;
  const int64_t lo = on_q ? q0 : k0, hi = on_q ? q1 : k1;
  std::vector<int64_t> cuts{lo};
  for (int64_t b : c.bounds) cuts.push_back(std::clamp(b, lo, hi));
  cuts.push_back(hi);
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    const int64_t a = cuts[i], b = std::max(cuts[i], cuts[i + 1]);
    if (on_q)
      walk_cost(cs, child(i), a, b, k0, k1, cost);
    else
      walk_cost(cs, child(i), q0, q1, a, b, cost);
  }
}

}  // namespace

CompositionCost composition_cost(const Case& c, const Composition& comp) {
  CompositionCost cost;
  cost.leaf_calls = leaf_calls(comp);
  if (cost.leaf_calls > kMaxLeafCalls) {
    cost.work = cost.bytes = cost.call_elements = cost.call_pairs = std::numeric_limits<uint64_t>::max();
    return cost;
  }
  walk_cost(c, comp, 0, c.shape.seq_q, 0, c.shape.seq_kv, cost);
  return cost;
}

std::vector<int64_t> ScoreBias::tensor_shape(const Shape& s) const {
  if (kind != Kind::tensor) return {1, s.heads_q, s.seq_q, s.seq_kv};
  const int64_t full[4] = {s.batch, s.heads_q, s.seq_q, s.seq_kv};
  std::vector<int64_t> out(4);
  for (int d = 0; d < 4; ++d) out[static_cast<size_t>(d)] = spans[static_cast<size_t>(d)] ? full[d] : 1;
  return out;
}

double Case::effective_scale() const { return scale ? *scale : 1.0 / std::sqrt(static_cast<double>(shape.head_dim_qk)); }

uint64_t estimate_host_bytes(const Case& c, const HostWork& work) {
  // The formula of case.h, term by term.
  const Shape& s = c.shape;
  const uint64_t sq = static_cast<uint64_t>(s.seq_q), skv = static_cast<uint64_t>(s.seq_kv);
  const uint64_t elements = tensor_elements(s, sq, skv);
  const uint64_t head = sat_mul(sq, skv);
  const uint64_t pairs = sat_mul(prod({s.batch, s.heads_q}), head);
  const bool composed = !(c.composition == Composition{});
  const CompositionCost calls = composed ? composition_cost(c, c.composition) : CompositionCost{};
  uint64_t bytes = sat_mul(sat_mul(8, elements), kTensorCopies + (composed ? kComposedCopies : 0));
  bytes = sat_add(bytes, sat_mul(kMaskBytes, pairs));
  bytes = sat_add(bytes, sat_add(sat_mul(8 * kCallCopies, calls.call_elements), sat_mul(kCallPairBytes, calls.call_pairs)));
  bytes = sat_add(bytes, calls.bytes);
  const bool one_head = work.oracles == HostWork::Oracles::host || work.backends >= HostScores::one_head;
  const bool every_head = work.backends == HostScores::every_head;
  const uint64_t one = one_head ? sat_mul(kHeadPairBytes, head) : 0;
  const uint64_t every =
      every_head ? sat_mul(sat_mul(8, pairs) < kMmapThreshold ? kEveryHeadPairBytes : kEveryHeadPairBytesMapped, pairs) : 0;
  bytes = sat_add(bytes, sat_mul(8, head) < kMmapThreshold ? sat_add(one, every) : std::max(one, every));
  if (c.bias) {
    const auto b = c.bias->tensor_shape(s);
    bytes = sat_add(bytes, sat_mul(8 * kBiasCopies, prod({b[0], b[1], b[2], b[3]})));
  }
  // Laid-out copies a backend gets, at most 8 bytes an element. place()'s extent is at most
  // offset + 3 * B * H * S * (w + row_padding + head_padding) (3: a packed group); bounded
  // here with saturating arithmetic, since place() itself assumes sizes that fit.
  for (TensorId r : kLaidOutTensors) {
    const TensorLayout& l = c.layouts[r];
    const auto n = role_sizes(r, s);
    const uint64_t row = sat_add(static_cast<uint64_t>(n[3]), static_cast<uint64_t>(l.row_padding + l.head_padding));
    const uint64_t extent = sat_add(static_cast<uint64_t>(l.offset), sat_mul(3, sat_mul(prod({n[0], n[1], n[2]}), row)));
    bytes = sat_add(bytes, sat_mul(8, sat_add(extent, 2 * static_cast<uint64_t>(std::max<int64_t>(c.layouts.surround.guard, 0)))));
  }
  if (c.ragged) {
    // A varlen interface's packed copies (counted, not measured: the gaps and tail are rows no
    // padded tensor holds, up to kMaxRaggedGap each).
    const Ragged& r = *c.ragged;
    const uint64_t sequences = static_cast<uint64_t>(r.lens_q.size());
    auto packed_rows = [&](const std::vector<int64_t>& lens, int64_t gap) {
      uint64_t rows = sat_add(static_cast<uint64_t>(std::max<int64_t>(r.tail, 0)), 1);
      for (int64_t n : lens) rows = sat_add(rows, static_cast<uint64_t>(std::max<int64_t>(n, 0)));
      return sat_add(rows, sat_mul(sequences > 0 ? sequences - 1 : 0, static_cast<uint64_t>(std::max<int64_t>(gap, 0))));
    };
    const uint64_t dqk = static_cast<uint64_t>(s.head_dim_qk), dv = static_cast<uint64_t>(s.head_dim_v);
    uint64_t packed = sat_mul(sat_mul(packed_rows(r.lens_q, r.gap_q), static_cast<uint64_t>(s.heads_q)), 2 * dqk + 2 * dv + 2);
    packed = sat_add(packed, sat_mul(sat_mul(packed_rows(r.lens_kv, r.gap_kv), static_cast<uint64_t>(s.heads_kv)), 2 * dqk + 2 * dv));
    if (r.page_size > 0) {
      uint64_t pages = 2;  // the spare page, and one for a call's own table
      for (int64_t n : r.lens_kv) pages = sat_add(pages, static_cast<uint64_t>((std::max<int64_t>(n, 0) + r.page_size - 1) / r.page_size));
      packed = sat_add(packed, sat_mul(sat_mul(pages, static_cast<uint64_t>(r.page_size)), sat_mul(static_cast<uint64_t>(s.heads_kv), dqk + dv)));
    }
    bytes = sat_add(bytes, sat_mul(8, packed));
  }
  return bytes;
}

void check_memory_budget(const Case& c, const Limits& limits) {
  const uint64_t need = estimate_host_bytes(c, limits.work);
  if (need > limits.memory_budget_bytes)
    throw CaseError("shape", "needs about " + std::to_string(need >> 20) + " MiB on the host, over the memory budget of " +
                                 std::to_string(limits.memory_budget_bytes >> 20) + " MiB");
}

void validate(const Case& c, const Limits& limits) {
  const Shape& s = c.shape;
  check_dim(s.batch, "batch", 1);
  check_dim(s.heads_q, "heads_q", 1);
  check_dim(s.heads_kv, "heads_kv", 1);
  check_dim(s.seq_q, "seq_q", 1);
  check_dim(s.seq_kv, "seq_kv", 1);
  check_dim(s.head_dim_qk, "head_dim_qk", 1);
  check_dim(s.head_dim_v, "head_dim_v", 1);
  if (s.heads_q % s.heads_kv != 0)
    throw CaseError("shape.heads_kv",
                    "heads_q (" + std::to_string(s.heads_q) + ") is not a multiple of heads_kv (" + std::to_string(s.heads_kv) + ")");
  // Expression size and composition work first: both are cheap to count, and the memory
  // estimate walks the composition.
  if (mask_depth(c.mask) > kMaxMaskDepth) throw CaseError("mask", "mask expressions nest at most 16 deep");
  if (const uint64_t n = mask_size(c.mask); n > kMaxMaskSize)
    throw CaseError("mask",
                    "expression of " + std::to_string(n) + " nodes and segments, over the limit of " + std::to_string(kMaxMaskSize));
  check_composition(c.composition, s, "composition", 0);
  const CompositionCost cost = composition_cost(c, c.composition);
  if (cost.leaf_calls > kMaxLeafCalls)
    throw CaseError("composition", (cost.leaf_calls == std::numeric_limits<uint64_t>::max() ? std::string("more than 2^64")
                                                                                            : std::to_string(cost.leaf_calls)) +
                                       " backend calls, over the limit of " + std::to_string(kMaxLeafCalls));
  const uint64_t single_work = composition_cost(c, Composition{}).work;
  const uint64_t work_limit = std::max(sat_mul(single_work, kCompositionWorkFactor), kCompositionWorkFloor);
  if (cost.work > work_limit)
    throw CaseError("composition", "needs about " + std::to_string(cost.work / std::max<uint64_t>(single_work, 1)) +
                                       " times the work of the single call, over the limit of " + std::to_string(kCompositionWorkFactor));
  // A layout shared by every tensor with only an order and a row padding is what the older
  // `layout` key says (and how write_case writes it): its errors name that key.
  const std::optional<TensorLayout> one = c.layouts.as_uniform();
  const bool one_key = one && one->head_padding == 0 && one->offset == 0;
  for (TensorId r : kLaidOutTensors) {
    const TensorLayout& l = c.layouts[r];
    const std::string field = one_key ? std::string("layout") : std::string("layouts.") + case_key(r);
    auto check = [&](int64_t v, const char* name) {
      if (v < 0 || v > kMaxLayoutPad) throw CaseError(field + "." + name, "must be in [0, " + std::to_string(kMaxLayoutPad) + "]");
    };
    check(l.row_padding, "row_padding");
    check(l.head_padding, "head_padding");
    check(l.offset, "offset");
  }
  if (c.layouts.surround.guard < 0 || c.layouts.surround.guard > kMaxSurroundGuard)
    throw CaseError("layouts.surround.guard", "must be in [0, " + std::to_string(kMaxSurroundGuard) + "]");
  check_memory_budget(c, limits);
  if (c.scale && !(std::isfinite(*c.scale) && *c.scale > 0)) throw CaseError("scale", "must be finite and > 0");
  if (c.softcap && !(std::isfinite(*c.softcap) && *c.softcap > 0)) throw CaseError("softcap", "must be finite and > 0");
  validate_mask(c.mask, s.seq_q, s.seq_kv, "mask");
  check_dist(c.q, "values.q");
  check_dist(c.k, "values.k");
  check_dist(c.v, "values.v");
  check_dist(c.d_out, "grads.d_out");
  check_dist(c.d_lse, "grads.d_lse");
  if (c.d_lse.kind == ValueDist::Kind::nonfinite) throw CaseError("grads.d_lse", "nonfinite is for Q, K, V and dO");
  if (c.bias && c.bias->values.kind == ValueDist::Kind::nonfinite) throw CaseError("bias.values", "nonfinite is for Q, K, V and dO");
  check_magnitudes(c);
  if (c.bias) check_bias(c);
  if (c.ragged) check_ragged(c);
}

namespace {
std::vector<int64_t> sequence_starts(const std::vector<int64_t>& lens, int64_t gap) {
  std::vector<int64_t> starts{0};
  for (size_t b = 0; b < lens.size(); ++b) starts.push_back(starts.back() + lens[b] + (b + 1 < lens.size() ? gap : 0));
  return starts;
}
}  // namespace

void conform_ragged(Case& c) {
  if (!c.ragged) return;
  Ragged& g = *c.ragged;
  const Shape& s = c.shape;
  g.lens_q.resize(static_cast<size_t>(s.batch), s.seq_q);
  g.lens_kv.resize(static_cast<size_t>(s.batch), s.seq_kv);
  for (int64_t& l : g.lens_q) l = std::clamp<int64_t>(l, 0, s.seq_q);
  for (int64_t& l : g.lens_kv) l = std::clamp<int64_t>(l, 0, s.seq_kv);
}

PageTable page_table(const Ragged& r, uint64_t seed) { return page_table(r.lens_kv, r.page_size, seed); }

PageTable page_table(const std::vector<int64_t>& lens_kv, int64_t page_size, uint64_t seed) {
  PageTable t;
  if (page_size <= 0) return t;
  std::vector<int64_t> counts;
  for (int64_t l : lens_kv) {
    counts.push_back((l + page_size - 1) / page_size);
    t.max_pages_per_seq = std::max(t.max_pages_per_seq, counts.back());
  }
  int64_t total = 0;
  for (int64_t n : counts) total += n;
  t.pages = total + 1;
  // A Fisher-Yates shuffle of the physical pages, from the case's seed (harness/rng.h's mixer).
  std::vector<int64_t> physical(static_cast<size_t>(t.pages));
  for (size_t i = 0; i < physical.size(); ++i) physical[i] = static_cast<int64_t>(i);
  uint64_t state = seed ^ 0x7061676574626c21ull;
  for (size_t i = physical.size(); i > 1; --i) {
    state += 0x9e3779b97f4a7c15ull;
    uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    std::swap(physical[i - 1], physical[static_cast<size_t>(z % i)]);
  }
  t.table.assign(static_cast<size_t>(static_cast<int64_t>(counts.size()) * t.max_pages_per_seq), -1);
  size_t next = 0;
  for (size_t b = 0; b < counts.size(); ++b)
    for (int64_t p = 0; p < counts[b]; ++p) t.table[b * static_cast<size_t>(t.max_pages_per_seq) + static_cast<size_t>(p)] = physical[next++];
  return t;
}

std::vector<int64_t> Ragged::starts_q() const { return sequence_starts(lens_q, gap_q); }
std::vector<int64_t> Ragged::starts_kv() const { return sequence_starts(lens_kv, gap_kv); }

std::string to_string(Composition::Kind k) {
  switch (k) {
    case Composition::Kind::single:
      return "single";
    case Composition::Kind::kv_split:
      return "kv_split";
    case Composition::Kind::q_split:
      return "q_split";
    case Composition::Kind::mask_partition:
      return "mask_partition";
  }
  return "?";
}

const char* to_string(ValueFeature f) {
  switch (f) {
#define ATTNFUZZ_VALUE_FEATURE_NAME(name) \
  case ValueFeature::name:                \
    return #name;
    ATTNFUZZ_VALUE_FEATURES(ATTNFUZZ_VALUE_FEATURE_NAME)
#undef ATTNFUZZ_VALUE_FEATURE_NAME
  }
  return "?";
}

std::optional<ValueFeature> value_feature_from_string(const std::string& s) {
#define ATTNFUZZ_VALUE_FEATURE_PARSE(name) \
  if (s == #name) return ValueFeature::name;
  ATTNFUZZ_VALUE_FEATURES(ATTNFUZZ_VALUE_FEATURE_PARSE)
#undef ATTNFUZZ_VALUE_FEATURE_PARSE
  return std::nullopt;
}

std::vector<ValueFeature> value_features(const Case& c) {
  using K = ValueDist::Kind;
  std::vector<ValueFeature> out;
  if (c.q.kind == K::row_shift && c.k.kind == K::row_shift && c.q.magnitude * c.k.magnitude != 0)
    out.push_back(c.q.magnitude * c.k.magnitude < 0 ? ValueFeature::lse_far_below_zero : ValueFeature::logits_near_overflow);
  if (c.q.kind == K::subnormal || c.k.kind == K::subnormal || c.v.kind == K::subnormal) out.push_back(ValueFeature::subnormal_inputs);
  if (c.d_out.kind == K::sparse_rows) out.push_back(ValueFeature::d_out_zero_rows);
  if (c.d_out.kind != K::zero && c.d_out.sigma >= kLargeGradientSigma) out.push_back(ValueFeature::d_out_large);
  if (c.d_lse.kind != K::zero && c.d_lse.sigma >= kLargeGradientSigma) out.push_back(ValueFeature::d_lse_large);
  if (c.q.kind == K::nonfinite || c.k.kind == K::nonfinite || c.v.kind == K::nonfinite || c.d_out.kind == K::nonfinite)
    out.push_back(ValueFeature::nonfinite_inputs);
  return out;
}

std::string to_string(ValueDist::Kind k) {
  switch (k) {
    case ValueDist::Kind::normal:
      return "normal";
    case ValueDist::Kind::uniform:
      return "uniform";
    case ValueDist::Kind::large_logit:
      return "large_logit";
    case ValueDist::Kind::near_constant:
      return "near_constant";
    case ValueDist::Kind::outliers:
      return "outliers";
    case ValueDist::Kind::zero:
      return "zero";
    case ValueDist::Kind::row_shift:
      return "row_shift";
    case ValueDist::Kind::sparse_rows:
      return "sparse_rows";
    case ValueDist::Kind::subnormal:
      return "subnormal";
    case ValueDist::Kind::nonfinite:
      return "nonfinite";
  }
  return "?";
}

const char* to_string(ScoreBias::Kind k) {
  switch (k) {
    case ScoreBias::Kind::tensor:
      return "tensor";
    case ScoreBias::Kind::alibi:
      return "alibi";
    case ScoreBias::Kind::relative:
      return "relative";
  }
  return "?";
}

std::optional<ScoreBias::Kind> bias_kind_from_string(const std::string& s) {
  for (ScoreBias::Kind k : {ScoreBias::Kind::tensor, ScoreBias::Kind::alibi, ScoreBias::Kind::relative})
    if (s == to_string(k)) return k;
  return std::nullopt;
}

std::string describe(const Composition& c) {
  std::string s = to_string(c.kind);
  if (!c.children.empty()) {
    s += "[";
    for (size_t i = 0; i < c.children.size(); ++i) s += (i ? "," : "") + describe(c.children[i]);
    s += "]";
  }
  return s;
}

std::string describe_shape(const Shape& s) {
  return "B=" + std::to_string(s.batch) + " Hq=" + std::to_string(s.heads_q) + " Hkv=" + std::to_string(s.heads_kv) +
         " Sq=" + std::to_string(s.seq_q) + " Skv=" + std::to_string(s.seq_kv) + " Dqk=" + std::to_string(s.head_dim_qk) +
         " Dv=" + std::to_string(s.head_dim_v);
}

}  // namespace attnfuzz
