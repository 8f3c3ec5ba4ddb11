#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "generators/random_case.h"
#include "harness/errors.h"
#include "harness/inputs.h"
#include "harness/mask.h"
#include "harness/problem.h"

namespace attnfuzz {
namespace {

bool vis(const MaskExpr& m, int64_t q, int64_t kv, int64_t sq, int64_t skv) { return visible(m, 0, 0, q, kv, sq, skv); }

TEST(Mask, CausalAlignments) {
  const auto tl = MaskExpr::causal_mask(Align::top_left), br = MaskExpr::causal_mask(Align::bottom_right);
  // Sq = 2, Skv = 5: top-left sees kv <= q; bottom-right sees kv <= q + 3.
  EXPECT_TRUE(vis(tl, 0, 0, 2, 5));
  EXPECT_FALSE(vis(tl, 0, 1, 2, 5));
  EXPECT_TRUE(vis(br, 0, 3, 2, 5));
  EXPECT_FALSE(vis(br, 0, 4, 2, 5));
  EXPECT_TRUE(vis(br, 1, 4, 2, 5));
  // Sq = 5, Skv = 2: bottom-right leaves the first three query rows fully masked.
  for (int64_t kv = 0; kv < 2; ++kv) EXPECT_FALSE(vis(br, 2, kv, 5, 2));
  EXPECT_TRUE(vis(br, 3, 0, 5, 2));
  EXPECT_FALSE(vis(br, 3, 1, 5, 2));
}

TEST(Mask, SlidingWindowPrefixDocumentBlockSparse) {
  const auto w = MaskExpr::window(2, 1, Align::top_left);
  EXPECT_FALSE(vis(w, 5, 2, 8, 8));
  EXPECT_TRUE(vis(w, 5, 3, 8, 8));
  EXPECT_TRUE(vis(w, 5, 6, 8, 8));
  EXPECT_FALSE(vis(w, 5, 7, 8, 8));
  MaskExpr p;
  p.kind = MaskExpr::Kind::prefix_lm;
  p.prefix = 3;
  EXPECT_TRUE(vis(p, 0, 2, 8, 8));
  EXPECT_FALSE(vis(p, 0, 3, 8, 8));
  EXPECT_TRUE(vis(p, 4, 4, 8, 8));
  MaskExpr d;
  d.kind = MaskExpr::Kind::document;
  d.segments_q = {2, 0, 3};
  d.segments_kv = {1, 2, 2};
  EXPECT_TRUE(vis(d, 1, 0, 5, 5));
  EXPECT_FALSE(vis(d, 1, 1, 5, 5));  // kv 1 is in document 1, which has no queries
  EXPECT_TRUE(vis(d, 2, 3, 5, 5));
  MaskExpr b;
  b.kind = MaskExpr::Kind::block_sparse;
  b.block_q = 2;
  b.block_kv = 3;
  b.rows = {"10", "01"};
  EXPECT_TRUE(vis(b, 1, 2, 4, 5));
  EXPECT_FALSE(vis(b, 1, 3, 4, 5));
  EXPECT_TRUE(vis(b, 3, 4, 4, 5));
}

TEST(Mask, AlgebraAndRandomDensity) {
  const auto c = MaskExpr::causal_mask(Align::top_left);
  const auto w = MaskExpr::window(1, 0, Align::top_left);
  const auto local = MaskExpr::op(MaskExpr::Kind::and_, {c, w});
  const auto global = MaskExpr::op(MaskExpr::Kind::and_, {c, MaskExpr::op(MaskExpr::Kind::not_, {w})});
  const auto both = MaskExpr::op(MaskExpr::Kind::or_, {local, global});
  for (int64_t q = 0; q < 9; ++q)
    for (int64_t kv = 0; kv < 9; ++kv) {
      EXPECT_EQ(vis(both, q, kv, 9, 9), vis(c, q, kv, 9, 9));
      EXPECT_FALSE(vis(local, q, kv, 9, 9) && vis(global, q, kv, 9, 9));
    }
  MaskExpr r;
  r.kind = MaskExpr::Kind::random;
  r.density = 0.3;
  r.seed = 5;
  int on = 0;
  for (int64_t q = 0; q < 100; ++q)
    for (int64_t kv = 0; kv < 100; ++kv) on += vis(r, q, kv, 100, 100);
  EXPECT_NEAR(on / 10000.0, 0.3, 0.02);
  // Different heads draw different masks.
  int differ = 0;
  for (int64_t kv = 0; kv < 100; ++kv) differ += visible(r, 0, 0, 0, kv, 100, 100) != visible(r, 0, 1, 0, kv, 100, 100);
  EXPECT_GT(differ, 10);
}

TEST(Mask, MaterializationMatchesExpressionWithOffsetsAndRestrictions) {
  Case c;
  c.shape = {2, 2, 1, 7, 9, 4, 4};
  c.mask = MaskExpr::causal_mask(Align::bottom_right);
  Problem p = full_problem(c, generate_inputs(c));
  p.shape.seq_q = 3;
  p.q_offset = 4;
  p.shape.seq_kv = 5;
  p.kv_offset = 2;
  p.restrictions.push_back({2, 0, Align::top_left, false});
  materialize_mask(p);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t i = 0; i < 3; ++i)
        for (int64_t j = 0; j < 5; ++j) {
          const int64_t q = i + 4, kv = j + 2;
          const bool want = kv <= q + 2 && !(kv >= q - 2 && kv <= q);
          EXPECT_EQ(p.visible(b, h, i, j), want) << q << "," << kv;
        }
}

// Planes of 2^14 elements or more are kept and reused by what they depend on (harness/problem.cpp):
// a reused plane must be the one the problem asks for, so every problem here, built one after
// another over the same sizes with another expression, offset or restriction, and again, is
// checked element by element against the expression.
TEST(Mask, ReusedPlanesMatchTheirProblems) {
  Case c;
  c.shape = {1, 2, 2, 160, 150, 8, 8};
  const MaskExpr causal = MaskExpr::causal_mask(Align::top_left), window = MaskExpr::window(20, 3, Align::bottom_right);
  struct Variant {
    const MaskExpr* m;
    int64_t q_offset;
    std::vector<BandRestriction> restrictions;
  };
  const std::vector<Variant> variants{{&causal, 0, {}},   {&window, 0, {}}, {&causal, 5, {}}, {&causal, 0, {{4, 0, Align::top_left, false}}},
                                      {&causal, 0, {}},   {nullptr, 0, {}}, {&window, 0, {}}, {&causal, 5, {}},
                                      {&window, 5, {}},   {&causal, 0, {}}};
  const Problem base = full_problem(c, generate_inputs(c));
  for (const Variant& v : variants) {
    Problem p = base;
    p.mask_expr = v.m;
    p.q_offset = v.q_offset;
    p.full_seq_q = c.shape.seq_q + 5;  // the same for every variant: only the offset tells them apart
    p.restrictions = v.restrictions;
    materialize_mask(p);
    size_t wrong = 0;
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t i = 0; i < c.shape.seq_q; ++i)
        for (int64_t j = 0; j < c.shape.seq_kv; ++j) {
          const int64_t q = i + v.q_offset;
          bool want = v.m ? visible(*v.m, 0, h, q, j, p.full_seq_q, p.full_seq_kv) : true;
          for (const auto& r : v.restrictions) want = want && (in_window(j - q, r.left, r.right) == r.inside);
          wrong += p.visible(0, h, i, j) != want;
        }
    EXPECT_EQ(wrong, 0u) << "variant with q_offset " << v.q_offset << ", " << v.restrictions.size() << " restriction(s)";
  }
}

// The tile query is exact: it agrees with looking at every element, for random
// expressions (every kind and combinator) and random tiles.
RC_GTEST_PROP(Mask, TileClassificationIsExact, (uint64_t seed)) {
  SplitMix r(seed);
  const int64_t sq = r.range(1, 40), skv = r.range(1, 40);
  const MaskExpr m = random_mask(r, sq, skv);
  for (int t = 0; t < 8; ++t) {
    const int64_t q0 = r.range(0, sq - 1), q1 = r.range(q0 + 1, sq), k0 = r.range(0, skv - 1), k1 = r.range(k0 + 1, skv);
    bool any_v = false, any_m = false;
    for (int64_t q = q0; q < q1; ++q)
      for (int64_t kv = k0; kv < k1; ++kv) (visible(m, 0, 0, q, kv, sq, skv) ? any_v : any_m) = true;
    const TileClass want = any_v && any_m ? TileClass::partial : any_v ? TileClass::fully_visible : TileClass::fully_masked;
    RC_ASSERT(classify_tile(m, 0, 0, q0, q1, k0, k1, sq, skv) == want);
  }
}

TEST(Mask, TileClassificationUsesGeometryForBands) {
  const auto c = MaskExpr::causal_mask(Align::top_left);
  EXPECT_EQ(classify_tile(c, 0, 0, 64, 128, 0, 64, 256, 256), TileClass::fully_visible);
  EXPECT_EQ(classify_tile(c, 0, 0, 0, 64, 64, 128, 256, 256), TileClass::fully_masked);
  EXPECT_EQ(classify_tile(c, 0, 0, 0, 64, 0, 64, 256, 256), TileClass::partial);
}

// A window of 2^63 - 1 keys on both sides sees every key (issue 16: q' + right overflowed
// and masked every row), in the leaf, in tile classification and as a composition band.
TEST(Mask, HugeWindowSeesEveryKey) {
  constexpr int64_t kMax = INT64_MAX;
  for (Align a : {Align::top_left, Align::bottom_right}) {
    const auto w = MaskExpr::window(kMax, kMax, a);
    for (int64_t q = 0; q < 8; ++q)
      for (int64_t kv = 0; kv < 16; ++kv) EXPECT_TRUE(vis(w, q, kv, 8, 16)) << q << "," << kv;
    EXPECT_EQ(classify_tile(w, 0, 0, 0, 8, 0, 16, 8, 16), TileClass::fully_visible);
    const auto left_only = MaskExpr::window(kMax, 0, a), right_only = MaskExpr::window(0, kMax, a);
    EXPECT_TRUE(vis(left_only, 7, 0, 8, 16));
    EXPECT_TRUE(vis(right_only, 0, 15, 8, 16));
    Problem p;
    p.shape = Shape{1, 1, 1, 8, 16, 8, 8};
    p.full_seq_q = 8;
    p.full_seq_kv = 16;
    p.restrictions = {BandRestriction{kMax, kMax, a, true}};
    materialize_mask(p);
    for (uint8_t m : p.mask) EXPECT_EQ(m, 1);
    p.restrictions = {BandRestriction{kMax, kMax, a, false}};
    materialize_mask(p);
    for (uint8_t m : p.mask) EXPECT_EQ(m, 0);
  }
}

// Counting segments and tiles of hostile sizes does not overflow (UBSan would say so).
TEST(Mask, ValidationOfHugeValuesDoesNotOverflow) {
  MaskExpr d;
  d.kind = MaskExpr::Kind::document;
  d.segments_q = {INT64_MAX, INT64_MAX};
  d.segments_kv = {8, 0};
  EXPECT_THROW(validate_mask(d, 8, 8, "mask"), CaseError);
  MaskExpr b;
  b.kind = MaskExpr::Kind::block_sparse;
  b.block_q = b.block_kv = INT64_MAX;
  b.rows = {"1"};
  EXPECT_NO_THROW(validate_mask(b, 8, 8, "mask"));
}

}  // namespace
}  // namespace attnfuzz
