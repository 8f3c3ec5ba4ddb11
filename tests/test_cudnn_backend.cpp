// The `cudnn` backend (label gpu). The mask planning is a pure function and is tested
// everywhere; everything that runs cuDNN is reported as skipped, with the reason, on a
// machine without a usable GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <iostream>
#include <map>
#include <set>

#include "generators/random_case.h"
#include "harness/case_json.h"
#include "harness/compose.h"
#include "harness/differential.h"
#include "harness/inputs.h"
#include "backends/cudnn_graph.h"
#include "backends/cudnn_sdpa.h"
#include "oracles/reference.h"
#include "backends/registry.h"
#include "tests/dbias_check.h"

namespace attnfuzz {
namespace {

#define SKIP_WITHOUT_CUDNN()                                \
  do {                                                      \
    std::string why_;                                       \
    if (!cudnn_sdpa_available(&why_)) GTEST_SKIP() << why_; \
  } while (0)

std::vector<std::string> describe_all(const std::vector<CudnnMaskPlan>& plans) {
  std::vector<std::string> out;
  for (const auto& p : plans) out.push_back(p.describe());
  return out;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// Elements where the plan's model of cuDNN's masking differs from the dense mask.
size_t model_mismatches(const CudnnMaskPlan& plan, const Problem& p) {
  const Shape& s = p.shape;
  size_t bad = 0;
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads_q; ++h)
      for (int64_t i = 0; i < s.seq_q; ++i)
        for (int64_t j = 0; j < s.seq_kv; ++j) bad += cudnn_mask_plan_visible(plan, p, b, h, i, j) != p.visible(b, h, i, j);
  return bad;
}

// A problem holding only a dense mask (the planner never looks at the values).
Problem mask_problem(Shape shape, const std::function<bool(int64_t b, int64_t h, int64_t i, int64_t j)>& visible) {
  Problem p;
  p.shape = shape;
  p.mask.resize(static_cast<size_t>(shape.batch * shape.heads_q * shape.seq_q * shape.seq_kv));
  size_t idx = 0;
  for (int64_t b = 0; b < shape.batch; ++b)
    for (int64_t h = 0; h < shape.heads_q; ++h)
      for (int64_t i = 0; i < shape.seq_q; ++i)
        for (int64_t j = 0; j < shape.seq_kv; ++j) p.mask[idx++] = visible(b, h, i, j);
  return p;
}

// ---- The model of cuDNN's masking, pinned to the documented semantics ----
// docs/operations/Attention.md (cudnn-frontend 1.32): "Diagonal Band Right Bound: attention
// scores beyond column row_idx + right_bound are masked"; "Diagonal Band Left Bound:
// attention scores at or before column row_idx - left_bound are masked"; BOTTOM_RIGHT
// "aligned with the actual sequence length"; padding masks rows >= seq_len_q[b] and
// columns >= seq_len_kv[b].

TEST(CudnnMaskModel, BoundsFollowTheDocumentedInclusiveness) {
  const Problem p = mask_problem({1, 1, 1, 8, 8, 8, 8}, [](auto...) { return true; });
  CudnnMaskPlan band;
  band.left_bound = 3;
  band.right_bound = 1;
  // Row 5 keeps columns 3, 4, 5, 6: column 2 = 5 - 3 is "at or before row - left_bound".
  std::vector<int64_t> seen;
  for (int64_t j = 0; j < 8; ++j)
    if (cudnn_mask_plan_visible(band, p, 0, 0, 5, j)) seen.push_back(j);
  EXPECT_EQ(seen, (std::vector<int64_t>{3, 4, 5, 6}));
}

TEST(CudnnMaskModel, BottomRightAlignsToTheTensorsOrToEachSequenceUnderPadding) {
  const Problem p = mask_problem({2, 1, 1, 4, 9, 8, 8}, [](auto...) { return true; });
  CudnnMaskPlan causal;
  causal.alignment = Align::bottom_right;
  causal.right_bound = 0;
  EXPECT_TRUE(cudnn_mask_plan_visible(causal, p, 0, 0, 0, 5));  // Skv - Sq = 5
  EXPECT_FALSE(cudnn_mask_plan_visible(causal, p, 0, 0, 0, 6));
  causal.seq_len_q = {2, 4};
  causal.seq_len_kv = {3, 9};
  EXPECT_TRUE(cudnn_mask_plan_visible(causal, p, 0, 0, 0, 1));  // batch 0: 3 - 2 = 1
  EXPECT_FALSE(cudnn_mask_plan_visible(causal, p, 0, 0, 0, 2));
  EXPECT_FALSE(cudnn_mask_plan_visible(causal, p, 0, 0, 2, 0));  // row 2 is padding
  EXPECT_TRUE(cudnn_mask_plan_visible(causal, p, 1, 0, 0, 5));   // batch 1: 9 - 4 = 5
  EXPECT_FALSE(cudnn_mask_plan_visible(causal, p, 1, 0, 0, 6));
  causal.right_bound.reset();
  causal.left_bound = 2;  // batch 0, row 1: diagonal at column 2, keeps columns 1 and 2
  EXPECT_FALSE(cudnn_mask_plan_visible(causal, p, 0, 0, 1, 0));
  EXPECT_TRUE(cudnn_mask_plan_visible(causal, p, 0, 0, 1, 1));
  EXPECT_TRUE(cudnn_mask_plan_visible(causal, p, 0, 0, 1, 2));
}

// ---- The planner ----

// Random problems as the harness makes them: a random mask expression, often a part of a
// larger problem (offsets, as in a composition) and band restrictions. Every plan the
// planner returns must reproduce the dense mask element for element.
TEST(CudnnMaskPlanner, EveryPlanReproducesTheDenseMask) {
  int with_native = 0, with_padding = 0, bottom_right = 0;
  const int problems = 3000;
  for (int n = 0; n < problems; ++n) {
    SplitMix r(static_cast<uint64_t>(n) * 7919 + 1);
    const int64_t full_q = r.range(1, 24), full_kv = r.range(1, 24);
    const MaskExpr m = random_mask(r, full_q, full_kv);
    Problem p;
    p.shape.batch = r.range(1, 2);
    p.shape.heads_kv = r.range(1, 2);
    p.shape.heads_q = p.shape.heads_kv * r.range(1, 3);
    p.full_seq_q = full_q;
    p.full_seq_kv = full_kv;
    p.q_offset = r.chance(0.4) ? r.range(0, full_q - 1) : 0;
    p.kv_offset = r.chance(0.4) ? r.range(0, full_kv - 1) : 0;
    p.shape.seq_q = r.range(1, full_q - p.q_offset);
    p.shape.seq_kv = r.range(1, full_kv - p.kv_offset);
    for (int64_t k = r.range(0, 2); k > 0; --k)
      p.restrictions.push_back({r.chance(0.2) ? -1 : r.range(0, 8), r.chance(0.2) ? -1 : r.range(0, 4),
                                r.chance(0.5) ? Align::top_left : Align::bottom_right, r.chance(0.7)});
    p.mask_expr = &m;
    materialize_mask(p);

    const std::vector<CudnnMaskPlan> plans = cudnn_mask_plans(p);
    ASSERT_FALSE(plans.empty());
    EXPECT_TRUE(plans.back().bias) << "the bias fallback must come last";
    EXPECT_EQ(plan_cudnn_mask(p), plans.front());
    for (const auto& plan : plans) {
      const size_t bad = model_mismatches(plan, p);
      ASSERT_EQ(bad, 0u) << "problem " << n << " (" << describe(m) << "), plan " << plan.describe() << ": " << bad << " elements differ";
      if (plan.bias) continue;
      EXPECT_GE(plan.left_bound.value_or(1), 1) << plan.describe();
      EXPECT_GE(plan.right_bound.value_or(0), 0) << plan.describe();
      if (plan.padding()) {
        ASSERT_EQ(plan.seq_len_q.size(), static_cast<size_t>(p.shape.batch));
        ASSERT_EQ(plan.seq_len_kv.size(), static_cast<size_t>(p.shape.batch));
        for (size_t b = 0; b < plan.seq_len_q.size(); ++b) {
          EXPECT_LE(plan.seq_len_q[b], p.shape.seq_q);
          EXPECT_LE(plan.seq_len_kv[b], p.shape.seq_kv);
        }
      }
    }
    with_native += plans.front().native();
    for (const auto& plan : plans) {
      with_padding += plan.padding();
      bottom_right += plan.native() && plan.alignment == Align::bottom_right && (plan.left_bound || plan.right_bound);
    }
  }
  // The planner must not quietly fall back to the bias: structured masks are common here.
  EXPECT_GT(with_native, problems / 4);
  EXPECT_GT(with_padding, problems / 20);
  EXPECT_GT(bottom_right, problems / 20);
}

TEST(CudnnMaskPlanner, BiasBroadcastsOnlyWhatIsShared) {
  // Heads differ: per head; batches equal: broadcast over the batch.
  const Problem per_head =
      mask_problem({2, 2, 1, 4, 4, 8, 8}, [](int64_t, int64_t h, int64_t i, int64_t j) { return (i + j + h) % 2 == 0; });
  const CudnnMaskPlan a = plan_cudnn_mask(per_head);
  EXPECT_TRUE(a.bias && a.bias_per_head && !a.bias_per_batch) << a.describe();
  const Problem per_batch =
      mask_problem({2, 2, 1, 4, 4, 8, 8}, [](int64_t b, int64_t, int64_t i, int64_t j) { return (i * j + b) % 3 == 0; });
  const CudnnMaskPlan c = plan_cudnn_mask(per_batch);
  EXPECT_TRUE(c.bias && !c.bias_per_head && c.bias_per_batch) << c.describe();
  EXPECT_EQ(cudnn_mask_plans(per_batch).size(), 1u);
}

// A score bias rides in every plan, broadcast as it is; the fallback's bias tensor also as the
// mask is. The plans of a large mask are kept by content: the bias's extents are part of it.
TEST(CudnnMaskPlanner, ScoreBiasRidesInEveryPlan) {
  Problem p = mask_problem({2, 3, 1, 256, 256, 8, 8}, [](int64_t, int64_t, int64_t i, int64_t j) { return j <= i; });
  const std::vector<CudnnMaskPlan> plain = cudnn_mask_plans(p);
  ASSERT_EQ(plain.front().describe(), "causal_tl");
  for (const auto& plan : plain) EXPECT_FALSE(plan.score_bias || (plan.native() && plan.bias_input())) << plan.describe();
  p.bias = Tensor({1, 3, 1, 256});  // the planner reads its extents, not its values
  const std::vector<CudnnMaskPlan> biased = cudnn_mask_plans(p);
  ASSERT_EQ(biased.size(), plain.size());
  EXPECT_EQ(biased.front().describe(), "causal_tl+bias[1,H]");
  EXPECT_EQ(biased.back().describe(), "bias[1,H]");
  for (const auto& plan : biased) {
    EXPECT_TRUE(plan.score_bias && plan.bias_input()) << plan.describe();
    EXPECT_EQ(model_mismatches(plan, p), 0u) << plan.describe();
  }
  p.bias = Tensor({2, 1, 256, 1});
  EXPECT_EQ(plan_cudnn_mask(p).describe(), "causal_tl+bias[B,1]");
  p.bias = {};
  EXPECT_EQ(describe_all(cudnn_mask_plans(p)), describe_all(plain));
  // A mask that differs per head: the fallback is per head whatever the bias spans.
  Problem per_head = mask_problem({2, 2, 1, 4, 4, 8, 8}, [](int64_t, int64_t h, int64_t i, int64_t j) { return (i + j + h) % 2 == 0; });
  per_head.bias = Tensor({2, 1, 1, 1});
  EXPECT_EQ(describe_all(cudnn_mask_plans(per_head)), std::vector<std::string>{"bias[B,H]"});
}

TEST(CudnnMaskPlanner, PerBatchLengthsWithABottomRightDiagonal) {
  const std::vector<int64_t> lq{5, 8, 0}, lkv{9, 3, 0};
  const Problem p = mask_problem({3, 2, 1, 8, 12, 8, 8}, [&](int64_t b, int64_t, int64_t i, int64_t j) {
    const auto bi = static_cast<size_t>(b);
    return i < lq[bi] && j < lkv[bi] && j <= i + lkv[bi] - lq[bi];
  });
  const CudnnMaskPlan plan = plan_cudnn_mask(p);
  EXPECT_EQ(plan.describe(), "causal_br+padding");
  EXPECT_EQ(plan.seq_len_q, (std::vector<int32_t>{5, 8, 0}));
  EXPECT_EQ(plan.seq_len_kv, (std::vector<int32_t>{9, 3, 0}));
}

// ---- The targeted cases (the planner's half runs everywhere, the cuDNN half on a GPU) ----

struct Mode {
  const char* name;
  Shape shape;
  MaskExpr mask;
  Layouts layouts;
  const char* plan;  // what the backend must run (cuDNN refuses some earlier candidates)
};

MaskExpr padding_like() {  // queries [0, 40) see keys [0, 50); the rest sees nothing
  MaskExpr m;
  m.kind = MaskExpr::Kind::document;
  m.segments_q = {40, 24, 0};
  m.segments_kv = {50, 0, 30};
  return m;
}

std::vector<Mode> modes() {
  using K = MaskExpr::Kind;
  const Layouts bhsd{}, bshd = Layouts::uniform({TensorLayout::Order::bshd, 0}), padded = Layouts::uniform({TensorLayout::Order::bshd, 8});
  MaskExpr random;
  random.kind = K::random;
  random.density = 0.6;
  random.seed = 99;
  MaskExpr prefix;
  prefix.kind = K::prefix_lm;
  prefix.prefix = 20;
  return {
      {"no_mask", {2, 4, 2, 48, 80, 64, 64}, MaskExpr::all_visible(), bhsd, "none"},
      {"causal_top_left", {1, 2, 2, 64, 64, 64, 64}, MaskExpr::causal_mask(Align::top_left), bshd, "causal_tl"},
      {"causal_bottom_right_sq_lt_skv", {1, 2, 1, 40, 96, 64, 64}, MaskExpr::causal_mask(Align::bottom_right), bhsd, "causal_br"},
      {"causal_bottom_right_sq_gt_skv", {1, 2, 1, 96, 40, 64, 64}, MaskExpr::causal_mask(Align::bottom_right), bhsd, "causal_br+padding"},
      {"sliding_window", {2, 2, 2, 64, 64, 32, 32}, MaskExpr::window(16, 0, Align::top_left), padded, "band_tl(left=17,right=0)"},
      {"band_bottom_right", {1, 2, 2, 48, 80, 64, 64}, MaskExpr::window(8, 2, Align::bottom_right), bhsd, "band_br(left=9,right=2)"},
      {"padding", {2, 2, 1, 64, 80, 64, 64}, padding_like(), bshd, "none+padding"},
      {"padding_bottom_right",
       {1, 2, 2, 64, 80, 64, 64},
       MaskExpr::op(K::and_, {padding_like(), MaskExpr::window(-1, 10, Align::top_left)}),
       bhsd,
       "causal_br+padding"},
      {"random_mask_as_bias", {2, 2, 1, 48, 64, 64, 64}, random, bhsd, "bias[B,H]"},
      {"prefix_lm_as_bias", {1, 2, 2, 64, 64, 64, 64}, prefix, padded, "bias[1,1]"},
      {"gqa_causal", {2, 6, 2, 64, 64, 64, 64}, MaskExpr::causal_mask(Align::top_left), bhsd, "causal_tl"},
      {"mqa_window", {1, 4, 1, 64, 96, 128, 128}, MaskExpr::window(24, 0, Align::bottom_right), bshd, "band_br(left=25,right=0)"},
  };
}

Case mode_case(const Mode& m, DType d, uint64_t seed) {
  Case c;
  c.seed = seed;
  c.shape = m.shape;
  c.dtype = d;
  c.layouts = m.layouts;
  // cuDNN's backward reads its Stats (the LSE) packed [B][H][S] only (its envelope): a mode's
  // order is for Q, K, V, O and the gradients.
  c.layouts[TensorId::LSE] = TensorLayout{};
  c.mask = m.mask;
  validate(c);
  return c;
}

TEST(CudnnMaskPlanner, TargetedCasesOfferTheExpectedPlan) {
  for (const Mode& m : modes()) {
    const Case c = mode_case(m, DType::f16, 1);
    const Problem p = full_problem(c, generate_inputs(c));
    const auto plans = cudnn_mask_plans(p);
    const auto names = describe_all(plans);
    EXPECT_NE(std::find(names.begin(), names.end(), std::string(m.plan)), names.end())
        << m.name << ": expected " << m.plan << " among " << join(names);
    for (const auto& plan : plans) EXPECT_EQ(model_mismatches(plan, p), 0u) << m.name << " " << plan.describe();
  }
}

class CudnnModes : public ::testing::TestWithParam<std::tuple<Mode, DType>> {};

// The backend against the float64 reference through the harness's verdicts (O, LSE, dQ,
// dK, dV within the tolerance rule; determinism), on the native path the mode is about.
TEST_P(CudnnModes, MatchesTheReferenceOnTheExpectedPath) {
  SKIP_WITHOUT_CUDNN();
  const auto& [mode, dtype] = GetParam();
  auto be = make_cudnn_sdpa_backend();
  const Case c = mode_case(mode, dtype, 20250101);
  const Problem p = full_problem(c, generate_inputs(c));
  if (auto why = be->unsupported_reason(p)) FAIL() << "cuDNN refused the case: " << *why << "\n" << write_case(c);
  const auto plan = cudnn_sdpa_selected_plan(*be, p);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->describe(), mode.plan) << "cuDNN refused the plans before it; all candidates: "
                                         << join(describe_all(cudnn_mask_plans(p)));

  const DiffReport r = run_differential(c, {be.get()}, default_oracles());
  for (const auto& f : r.findings) ADD_FAILURE() << f.signature.to_string() << " " << f.detail;
  bool ran = false;
  for (const auto& run : r.runs) {
    if (run.backend != "cudnn") continue;
    ASSERT_FALSE(run.skipped) << run.skip_reason;
    ran = true;
    std::set<std::string> compared;
    for (const auto& t : run.tensors) {
      EXPECT_TRUE(t.pass) << name_of(t.tensor) << ": rms " << t.err.rms << " > bound " << t.bound_rms;
      if (t.compared) compared.insert(name_of(t.tensor));
    }
    EXPECT_EQ(compared, (std::set<std::string>{"O", "LSE", "dQ", "dK", "dV"}));
  }
  EXPECT_TRUE(ran);
  if (HasFailure()) std::cerr << write_case(c);
}

INSTANTIATE_TEST_SUITE_P(Masks, CudnnModes, ::testing::Combine(::testing::ValuesIn(modes()), ::testing::Values(DType::f16, DType::bf16)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param).name) + "_" + std::string(to_string(std::get<1>(info.param)));
                         });

// A score bias of each kind over a native mask and over the fallback: the backend against the
// float64 reference through the harness's verdicts, the score bias in the plan cuDNN runs.
struct BiasMode {
  Mode mode;
  ScoreBias bias;
  const char* plan;  // what the backend must run; null: any plan that carries the bias
};

std::vector<BiasMode> bias_modes() {
  const std::vector<Mode> m = modes();
  auto named = [&](const char* name) {
    return *std::find_if(m.begin(), m.end(), [&](const Mode& x) { return std::string(x.name) == name; });
  };
  ScoreBias key_padding;  // [B][1][1][Skv]: a per-batch additive key mask
  key_padding.spans = {true, false, false, true};
  key_padding.values = ValueDist{ValueDist::Kind::outliers, 0.0, 0.5, 0.2, -1e4};
  ScoreBias per_head;  // [1][H][Sq][Skv]
  per_head.spans = {false, true, true, true};
  per_head.values = ValueDist{ValueDist::Kind::normal, 0.0, 4.0};
  ScoreBias relative{ScoreBias::Kind::relative};
  return {
      // cuDNN takes a bias with its causal mask (cuDNN 9 SDPA, forward and backward).
      {named("causal_top_left"), ScoreBias{ScoreBias::Kind::alibi}, "causal_tl+bias[1,H]"},
      {named("no_mask"), key_padding, nullptr},
      {named("sliding_window"), per_head, nullptr},
      {named("padding"), relative, nullptr},
      {named("random_mask_as_bias"), relative, "bias[B,H]"},
      {named("gqa_causal"), key_padding, nullptr},
  };
}

TEST(CudnnBackend, MatchesTheReferenceWithAScoreBias) {
  SKIP_WITHOUT_CUDNN();
  auto be = make_cudnn_sdpa_backend();
  EXPECT_TRUE(be->envelope().bias);
  for (const BiasMode& bm : bias_modes())
    for (DType dtype : {DType::f16, DType::bf16}) {
      Case c = mode_case(bm.mode, dtype, 20251205);
      c.bias = bm.bias;
      validate(c);
      const Problem p = full_problem(c, generate_inputs(c));
      const std::string where = std::string(bm.mode.name) + " " + std::string(to_string(dtype)) + "\n" + write_case(c);
      if (auto why = be->unsupported_reason(p)) {
        ADD_FAILURE() << "cuDNN refused the case: " << *why << "\n" << where;
        continue;
      }
      const auto plan = cudnn_sdpa_selected_plan(*be, p);
      ASSERT_TRUE(plan.has_value());
      EXPECT_TRUE(plan->score_bias) << plan->describe();
      if (bm.plan) {
        EXPECT_EQ(plan->describe(), bm.plan) << "cuDNN refused the plans before it; all candidates: "
                                             << join(describe_all(cudnn_mask_plans(p))) << "\n"
                                             << where;
      }
      std::cout << "  " << bm.mode.name << " " << to_string(dtype) << ": " << plan->describe() << "\n";
      const DiffReport r = run_differential(c, {be.get()}, default_oracles());
      for (const auto& f : r.findings) ADD_FAILURE() << f.signature.to_string() << " " << f.detail << "\n" << where;
      for (const auto& run : r.runs) {
        if (run.backend == "cudnn") {
          EXPECT_FALSE(run.skipped) << run.skip_reason << "\n" << where;
        }
      }
    }
}

// Per-batch lengths no mask expression produces (a varlen batch): the backend directly,
// against the reference, with a relative error bound per tensor over the visible rows.
TEST(CudnnBackend, PerBatchLengthsBottomRight) {
  SKIP_WITHOUT_CUDNN();
  for (DType dtype : {DType::f16, DType::bf16}) {
    Case c;
    c.seed = 7;
    c.shape = {3, 4, 2, 64, 80, 64, 64};
    c.dtype = dtype;
    Problem p = full_problem(c, generate_inputs(c));
    const std::vector<int64_t> lq{40, 64, 17}, lkv{80, 50, 33};
    size_t idx = 0;
    for (int64_t b = 0; b < 3; ++b)
      for (int64_t h = 0; h < 4; ++h)
        for (int64_t i = 0; i < 64; ++i)
          for (int64_t j = 0; j < 80; ++j) {
            const auto bi = static_cast<size_t>(b);
            p.mask[idx++] = i < lq[bi] && j < lkv[bi] && j <= i + lkv[bi] - lq[bi];
          }
    auto be = make_cudnn_sdpa_backend();
    if (auto why = be->unsupported_reason(p)) FAIL() << *why;
    EXPECT_EQ(cudnn_sdpa_selected_plan(*be, p).value().describe(), "causal_br+padding");

    const Forward ref = reference_forward(p);
    // Rows without a visible key follow cuDNN's convention: left out of O, LSE and dQ, and
    // (as the harness does) given no upstream gradient.
    auto live = [&](const Tensor& t, size_t e) {
      const size_t row = e / static_cast<size_t>(t.shape.size() == 4 ? t.dim(3) : 1);
      return std::isfinite(ref.lse.data[row]);
    };
    Tensor d_out = generate_inputs(c).d_out;
    for (size_t e = 0; e < d_out.numel(); ++e)
      if (!live(d_out, e)) d_out.data[e] = 0.0;
    const Gradients ref_g = reference_backward(p, ref, d_out, Tensor(ref.lse.shape));
    const Forward got = be->forward(p);
    const Gradients got_g = be->backward(p, got, d_out, Tensor(ref.lse.shape));
    const double tol = dtype == DType::f16 ? 1e-2 : 5e-2;  // relative RMS; a masking error is O(1)
    auto check = [&](const char* name, const Tensor& a, const Tensor& b, bool q_rows) {
      double err = 0, norm = 0;
      for (size_t e = 0; e < a.numel(); ++e) {
        if (q_rows && !live(b, e)) continue;
        err += (a.data[e] - b.data[e]) * (a.data[e] - b.data[e]);
        norm += b.data[e] * b.data[e];
      }
      EXPECT_LE(std::sqrt(err), tol * std::sqrt(norm) + 1e-6) << name << " " << to_string(dtype);
    };
    check("O", got.o, ref.o, true);
    check("LSE", got.lse, ref.lse, true);
    check("dQ", got_g.dq, ref_g.dq, true);
    check("dK", got_g.dk, ref_g.dk, false);
    check("dV", got_g.dv, ref_g.dv, false);
  }
}

// ~200 random cases of what cuDNN SDPA can take (fp16/bf16, no softcap, head dims a
// multiple of 8): no finding of any kind.
TEST(CudnnBackend, NoFindingOnRandomCases) {
  SKIP_WITHOUT_CUDNN();
  auto be = make_cudnn_sdpa_backend();
  RandomCaseOptions opt;
  opt.dtypes = {DType::f16, DType::bf16};
  opt.p_softcap = 0.0;
  opt.max_seq = 64;
  opt.max_dim = 64;
  int ran = 0;
  std::map<std::string, int> skipped;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    Case c = random_case(seed + 7'000'000, opt);
    auto round8 = [](int64_t d) { return (d + 7) / 8 * 8; };
    c.shape.head_dim_qk = round8(c.shape.head_dim_qk);
    c.shape.head_dim_v = seed % 3 ? c.shape.head_dim_qk : round8(c.shape.head_dim_v);
    c.layouts[TensorId::LSE] = TensorLayout{};  // the packed Stats cuDNN's backward reads (above)
    // Aligned rows for half the cases: padding 8, offsets a multiple of 8 elements.
    if (seed % 2)
      for (TensorId r : kLaidOutTensors) {
        TensorLayout& l = c.layouts[r];
        if (l.row_padding) l.row_padding = 8;
        l.offset = l.offset / 8 * 8;
      }
    validate(c);
    const DiffReport r = run_differential(c, {be.get()}, default_oracles());
    for (const auto& f : r.findings)
      ADD_FAILURE() << "seed " << seed << ": " << f.signature.to_string() << " " << f.detail << "\n" << write_case(c);
    for (const auto& run : r.runs) {
      if (run.skipped)
        ++skipped[run.skip_reason.substr(0, 160)];
      else
        ++ran;
    }
  }
  std::string reasons;
  for (const auto& [why, n] : skipped) reasons += "\n  " + std::to_string(n) + " x " + why;
  EXPECT_GE(ran, 150) << "too few runs; skip reasons:" << reasons;
  std::cout << "cudnn ran " << ran << " calls; skipped:" << (reasons.empty() ? " none" : reasons) << "\n";
}

// dBias through the backward graph's dBias output (backends/cudnn_sdpa.cpp), against the float64
// reference within 8 u M (tests/dbias_check.h says why), every broadcast shape over native masks,
// the bias fallback, rows without keys and GQA. [1,H,Sq,Skv] is the shape cuDNN's own tests ask
// for (cudnn-frontend test/python/sdpa/fp16.py): it must run. The others run where cuDNN takes
// their dBias, as it is or summed by us over what cuDNN left; where it takes none, the call must
// be refused with a one-line reason (DbiasRefusalsAreCleanOneLineReasons), never run wrong.
TEST(CudnnBackend, DbiasMatchesTheReference) {
  SKIP_WITHOUT_CUDNN();
  auto be = make_cudnn_sdpa_backend();
  ASSERT_TRUE(be->envelope().bias_grad);
  int ran = 0;
  for (DType dtype : {DType::f16, DType::bf16})
    for (const auto& dc : dbias_test::dbias_cases(dtype, true)) {
      const bool must_run = dc.c.bias->spans == std::array<bool, 4>{false, true, true, true};
      std::optional<std::string> refused;
      dbias_test::expect_dbias_matches_reference(*be, dc, must_run ? nullptr : &refused);
      if (refused) {
        std::cout << "  cuDNN refused dBias for " << dc.name << " " << to_string(dtype) << ": " << *refused << "\n";
        continue;
      }
      ++ran;
      const Problem p = dbias_test::dbias_call(dc.c).p;
      if (const auto plan = cudnn_sdpa_selected_plan(*be, p)) std::cout << "  " << dc.name << " " << to_string(dtype) << ": " << plan->describe() << "\n";
    }
  EXPECT_GE(ran, 4);  // at least the two [1,H,Sq,Skv] cases, in both dtypes
}

// A dBias cuDNN does not give is refused cleanly: by the envelope where the adapter knows (fp32,
// a softcap), else by the graph build with cuDNN's message ("cuDNN: ..."), in one line, before
// anything runs. A composition then throws UnsupportedError; forward and backward, called anyway
// on a call cuDNN refused, throw std::runtime_error instead of running a backward whose dBias
// nobody computed. (Which of the dbias_cases cuDNN refuses depends on the GPU and cuDNN version:
// none may be, then only the envelope's refusals are seen.)
TEST(CudnnBackend, DbiasRefusalsAreCleanOneLineReasons) {
  SKIP_WITHOUT_CUDNN();
  auto be = make_cudnn_sdpa_backend();
  Case fp32 = dbias_test::dbias_case(49, {1, 2, 2, 32, 32, 64, 64}, DType::f16, {false, true, true, true}, MaskExpr::all_visible());
  fp32.dtype = DType::f32;
  Case capped = fp32;
  capped.dtype = DType::bf16;
  capped.softcap = 20.0;
  std::vector<dbias_test::DbiasCase> cases{{"fp32", fp32}, {"softcap", capped}};
  for (DType dtype : {DType::f16, DType::bf16})
    for (const auto& dc : dbias_test::dbias_cases(dtype, true)) cases.push_back(dc);
  int refused = 0;
  for (const auto& dc : cases) {
    const dbias_test::DbiasCall call = dbias_test::dbias_call(dc.c);
    const std::optional<std::string> why = be->unsupported_reason(call.p);
    if (!why) continue;  // taken: its dBias is held to the reference above
    ++refused;
    SCOPED_TRACE(dc.name + ": " + *why);
    EXPECT_FALSE(why->empty());
    EXPECT_EQ(why->find('\n'), std::string::npos);
    EXPECT_THROW(run_composition(*be, dc.c, generate_inputs(dc.c), Composition{}), UnsupportedError);
    if (why->rfind("cuDNN", 0) == 0) {
      std::cout << "  cuDNN refused " << dc.name << " " << to_string(dc.c.dtype) << ": " << *why << "\n";
      EXPECT_THROW(be->forward(call.p), std::runtime_error);
      EXPECT_THROW(be->backward(call.p, call.ref, call.d_out, call.d_lse), std::runtime_error);
    }
  }
  EXPECT_GE(refused, 2);  // fp32 and the softcap at least
}

// Runs everywhere: the graph cache's key is the whole GraphSpec (backends/cudnn_graph.h), so two
// calls that differ only in their dBias output (none, or its extents) never share a graph. A key
// that ignored it would run a backward without dBias for a call that asked for one (dBias left
// zero), or one with another reduction.
TEST(CudnnGraphSpec, TheDbiasOutputIsPartOfTheCacheKey) {
  cudnn_detail::GraphSpec plain;
  plain.bias = true;
  plain.bias_heads = 4;
  cudnn_detail::GraphSpec with = plain;
  with.dbias = true;
  EXPECT_NE(plain, with);
  cudnn_detail::GraphSpec per_head = with, per_batch = with;
  per_head.dbias_heads = 4;
  per_batch.dbias_batch = 2;
  EXPECT_NE(with, per_head);
  EXPECT_NE(with, per_batch);
  EXPECT_NE(per_head, per_batch);
  EXPECT_TRUE((with < per_head) != (per_head < with));  // ordered, as the std::map key needs
}

TEST(CudnnBackend, UnsupportedReasonsNameTheCause) {
  SKIP_WITHOUT_CUDNN();
  auto be = make_cudnn_sdpa_backend();
  EXPECT_FALSE(be->contract(DType::f32).has_value());
  EXPECT_EQ(be->contract(DType::bf16), natural_contract(DType::bf16));
  Case c;
  c.shape = {1, 2, 2, 16, 16, 64, 64};
  c.dtype = DType::f16;
  c.softcap = 30.0;
  const Problem capped = full_problem(c, generate_inputs(c));
  ASSERT_TRUE(be->unsupported_reason(capped).has_value());
  EXPECT_NE(be->unsupported_reason(capped)->find("softcap"), std::string::npos);
  c.softcap.reset();
  // cuDNN needs a multiple of 8; 12 halves make 24-byte rows, which the adapter's envelope
  // (16-byte aligned strides, enforced) refuses before the graph is asked.
  c.shape.head_dim_qk = c.shape.head_dim_v = 12;
  const Problem odd = full_problem(c, generate_inputs(c));
  const auto why = be->unsupported_reason(odd);
  ASSERT_TRUE(why.has_value());
  EXPECT_EQ(why->rfind("alignment: ", 0), 0u) << *why;
  EXPECT_THROW(be->forward(odd), std::runtime_error);
}

// Runs everywhere: asking must neither crash nor abort on a machine without a GPU.
TEST(CudnnSdpa, AvailabilityAndEnvironmentAreSafeEverywhere) {
  std::string why;
  const bool ok = cudnn_sdpa_available(&why);
  EXPECT_EQ(why.empty(), ok) << why;
  const auto env = cudnn_sdpa_environment();
  EXPECT_TRUE(env.count("cudnn_runtime") && env.count("cudnn_frontend")) << env.size();
  EXPECT_EQ(env.count("cudnn_device"), ok ? 0u : 1u);
  auto be = make_cudnn_sdpa_backend();
  EXPECT_EQ(be->name(), "cudnn");
  EXPECT_EQ(be->device(), Device::cuda);
  EXPECT_FALSE(be->backward_takes_dlse());
  EXPECT_FALSE(be->masked_rows_zero());
  if (!ok) {
    Case c;
    c.dtype = DType::f16;
    const Problem p = full_problem(c, generate_inputs(c));
    ASSERT_TRUE(be->unsupported_reason(p).has_value());
    EXPECT_EQ(*be->unsupported_reason(p), why);
    EXPECT_FALSE(cudnn_sdpa_selected_plan(*be, p).has_value());
  }
}

}  // namespace
}  // namespace attnfuzz
