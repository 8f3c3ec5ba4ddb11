#include "generators/mutate.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "generators/domain.h"
#include "harness/errors.h"
#include "harness/rng.h"

namespace attnfuzz {

namespace {

enum class Step { shape, relation, layout, values, compose, mask, dtype, extras, reseed };
// The weights of generators/mutate.h, in Step order.
constexpr std::pair<Step, int> kSteps[] = {{Step::shape, 3},   {Step::relation, 2}, {Step::layout, 1},
                                           {Step::values, 2},  {Step::compose, 1},  {Step::mask, 2},
                                           {Step::dtype, 1},   {Step::extras, 1},   {Step::reseed, 1}};

Step pick_step(SplitMix& r) {
  int total = 0;
  for (const auto& [s, w] : kSteps) total += w;
  int64_t x = r.range(0, total - 1);
  for (const auto& [s, w] : kSteps)
    if ((x -= w) < 0) return s;
  return Step::reseed;
}

// x moved to the nearest multiple of 16, 64 or 128 (those up to `max` and up to x, or 16), plus
// 0, 0, +1 or -1.
int64_t tile_corner(SplitMix& r, int64_t x, int64_t max) {
  std::vector<int64_t> tiles;
  for (int64_t m : {16, 64, 128})
    if (m <= max && (m <= x || m == 16)) tiles.push_back(m);
  if (tiles.empty()) return std::clamp<int64_t>(x + r.range(-1, 1), domain::kMinDim, max);
  const int64_t m = r.pick(tiles);
  const int64_t corner = std::clamp<int64_t>((x + m / 2) / m * m, m, max / m * m);
  return std::clamp<int64_t>(corner + r.pick(std::vector<int64_t>{0, 0, 1, -1}), domain::kMinDim, max);
}

void shape_step(SplitMix& r, Case& c, const RandomCaseOptions& opt) {
  Shape& s = c.shape;
  switch (r.range(0, 4)) {
    case 0:
    case 1:
      s.seq_q = tile_corner(r, s.seq_q, opt.seq_q_bound());
      break;
    case 2:
    case 3:
      s.seq_kv = tile_corner(r, s.seq_kv, opt.max_seq);
      break;
    default: {
      const bool same = s.head_dim_v == s.head_dim_qk;
      s.head_dim_qk = tile_corner(r, s.head_dim_qk, opt.max_dim);
      if (same || r.chance(0.5)) s.head_dim_v = s.head_dim_qk;
      break;
    }
  }
}

void relation_step(SplitMix& r, Case& c, const RandomCaseOptions& opt) {
  Shape& s = c.shape;
  const int64_t max_q = opt.seq_q_bound();
  if (s.seq_q != s.seq_kv && r.chance(0.5)) {
    if (s.seq_kv <= max_q) std::swap(s.seq_q, s.seq_kv);  // a decode tier's long Skv is no Sq
    return;
  }
  switch (r.range(0, 2)) {
    case 0:  // tall: Sq > Skv
      if (s.seq_q <= s.seq_kv) {
        if (s.seq_kv < max_q)
          s.seq_q = r.range(s.seq_kv + 1, max_q);
        else
          s.seq_kv = r.range(1, s.seq_kv - 1);
      }
      break;
    case 1:  // wide: Sq < Skv
      if (s.seq_q >= s.seq_kv) {
        if (s.seq_q < opt.max_seq)
          s.seq_kv = r.range(s.seq_q + 1, opt.max_seq);
        else
          s.seq_q = r.range(1, s.seq_q - 1);
      }
      break;
    default:
      s.seq_kv = s.seq_q;
      break;
  }
}

void layout_step(SplitMix& r, Case& c) {
  switch (r.range(0, 2)) {
    case 0:
      c.layouts = Layouts{};
      break;
    case 1:
      c.layouts = random_layouts(r, c.shape);
      break;
    default: {
      TensorLayout& l = c.layouts[r.pick(std::vector<TensorId>(kLaidOutTensors.begin(), kLaidOutTensors.end()))];
      if (r.chance(0.5))
        l.offset = r.pick(std::vector<int64_t>(domain::kOffsets.begin(), domain::kOffsets.end()));
      else
        l.row_padding = r.range(0, domain::kMaxRowPadding);
      break;
    }
  }
}

void values_step(SplitMix& r, Case& c) {
  ValueDist* tensors[] = {&c.q, &c.k, &c.v};
  ValueDist& d = *tensors[r.range(0, 2)];
  switch (r.range(0, 4)) {
    case 0:  // larger logits: Q or K saturates the softmax further
    {
      ValueDist& qk = r.chance(0.5) ? c.q : c.k;
      const double sigma = qk.kind == ValueDist::Kind::large_logit ? std::min(qk.sigma * 2, 64.0) : 4.0 + 4.0 * r.unit();
      qk = ValueDist{ValueDist::Kind::large_logit, 0.0, sigma, 0.0, 0.0};
      break;
    }
    case 1:  // ties
      d = ValueDist{ValueDist::Kind::near_constant, 0.1, 0.0, 0.0, 0.0};
      break;
    case 2:
      d = ValueDist{ValueDist::Kind::outliers, 0.0, 1.0, 0.05, r.pick(std::vector<double>{20.0, 100.0})};
      break;
    case 3:
      breaking_values(r, c);
      break;
    default:
      d = ValueDist{};
      break;
  }
}

void mask_step(SplitMix& r, Case& c) {
  const Shape& s = c.shape;
  switch (r.range(0, 4)) {
    case 0:
      c.mask = MaskExpr::all_visible();
      break;
    case 1:
      c.mask = MaskExpr::causal_mask(Align::top_left);
      break;
    case 2:
      c.mask = MaskExpr::causal_mask(Align::bottom_right);
      break;
    case 3:
      c.mask = MaskExpr::window(r.range(0, std::max(s.seq_q, s.seq_kv)), r.range(0, 4), r.chance(0.5) ? Align::top_left : Align::bottom_right);
      break;
    default:
      c.mask = random_mask(r, s.seq_q, s.seq_kv);
      break;
  }
}

void extras_step(SplitMix& r, Case& c) {
  switch (r.range(0, 2)) {
    case 0:
      if (c.softcap)
        c.softcap.reset();
      else
        c.softcap = 1.0 + 30.0 * r.unit();
      break;
    case 1:
      c.d_lse = c.d_lse.kind == ValueDist::Kind::zero ? ValueDist{} : ValueDist{ValueDist::Kind::zero};
      break;
    default:
      if (r.chance(0.5))
        c.scale.reset();
      else
        c.scale = 0.05 + r.unit();
      break;
  }
}

void apply(Step step, SplitMix& r, Case& c, const RandomCaseOptions& opt) {
  switch (step) {
    case Step::shape:
      return shape_step(r, c, opt);
    case Step::relation:
      return relation_step(r, c, opt);
    case Step::layout:
      return layout_step(r, c);
    case Step::values:
      return values_step(r, c);
    case Step::compose:
      c.composition = r.chance(0.5) ? Composition{} : random_composition(r, c.shape.seq_q, c.shape.seq_kv);
      return;
    case Step::mask:
      return mask_step(r, c);
    case Step::dtype:
      c.dtype = r.pick(opt.dtypes);
      return;
    case Step::extras:
      return extras_step(r, c);
    case Step::reseed:
      c.seed = r.next();
      return;
  }
}

bool valid(const Case& c, const Limits& limits) {
  try {
    validate(c, limits);
    return true;
  } catch (const CaseError&) {
    return false;
  }
}

}  // namespace

std::optional<Case> mutate_case(const Case& parent, uint64_t seed, const SupportEnvelope& envelope, const CaseMix& mix) {
  SplitMix r(splitmix64(seed ^ 0x6d7574616e742d31ull));
  const Limits lengths_only = kNoMemoryBudget;
  for (int attempt = 0; attempt < kMutationTries; ++attempt) {
    Case c = parent;
    const int64_t steps = r.chance(0.5) ? 1 : r.range(2, 3);
    for (int64_t i = 0; i < steps; ++i) apply(pick_step(r), r, c, mix.gen);
    conform_ragged(c);  // new lengths or batch: the sequences' lengths follow
    // Packings need shapes that allow them (harness/layout.h); new lengths may break masks and cuts.
    if (!valid(c, lengths_only)) c.layouts.inputs = c.layouts.grads = Packing::none;
    if (!valid(c, lengths_only)) c.composition = Composition{};
    if (!valid(c, lengths_only)) c.mask = random_mask(r, c.shape.seq_q, c.shape.seq_kv);
    c = fit_inside(std::move(c), envelope, mix.gen, r);
    c = fit_budget(std::move(c), mix.memory_budget_bytes, mix.host_work);
    if (c != parent && valid(c, Limits{mix.memory_budget_bytes, mix.host_work ? mix.host_work(c.shape) : HostWork{}})) return c;
  }
  return std::nullopt;
}

}  // namespace attnfuzz
