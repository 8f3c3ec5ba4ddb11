// Self-validation of the float64 reference: finite differences, metamorphic relations,
// and the fully-masked-row convention.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "generators/random_case.h"
#include "harness/compose.h"
#include "harness/inputs.h"
#include "oracles/reference.h"
#include "tests/finite_differences.h"

namespace attnfuzz {
namespace {

class FiniteDifferences : public ::testing::TestWithParam<uint64_t> {};

TEST_P(FiniteDifferences, GradientsMatchIncludingDlse) {
  RandomCaseOptions opt;
  opt.max_seq = 7;
  opt.max_dim = 5;
  opt.p_dlse = 1.0;
  opt.p_softcap = 0.4;
  Case c = random_case(GetParam() * 7919 + 1, opt);
  c.q = c.k = c.v = ValueDist{};  // smooth region: large logits make the third derivative (and FD) unreliable
  c.d_lse = ValueDist{ValueDist::Kind::normal, 0.0, 1.0, 0, 0};
  const Inputs in = generate_inputs(c);
  const Problem p = full_problem(c, in);
  const Gradients g = reference_backward(p, reference_forward(p), in.d_out, in.d_lse);
  SCOPED_TRACE(describe_shape(c.shape) + " mask " + describe(c.mask));
  EXPECT_LE(rel_err(finite_difference(p, &Problem::q, in.d_out, in.d_lse), g.dq), 1e-6);
  EXPECT_LE(rel_err(finite_difference(p, &Problem::k, in.d_out, in.d_lse), g.dk), 1e-6);
  EXPECT_LE(rel_err(finite_difference(p, &Problem::v, in.d_out, in.d_lse), g.dv), 1e-6);
}
INSTANTIATE_TEST_SUITE_P(Reference, FiniteDifferences, ::testing::Range<uint64_t>(0, 40));

TEST(Reference, DlseTermIsWhatTheFiniteDifferencesSee) {
  // dO = 0 and g = 1: the whole gradient is the dLSE term; it must be non-zero and match FD.
  Case c;
  c.shape = {1, 2, 1, 5, 6, 3, 2};
  c.d_out = {ValueDist::Kind::zero};
  c.d_lse = {ValueDist::Kind::near_constant, 1.0, 0.0, 0, 0};
  const Inputs in = generate_inputs(c);
  const Problem p = full_problem(c, in);
  const Gradients g = reference_backward(p, reference_forward(p), in.d_out, in.d_lse);
  double norm = 0;
  for (double x : g.dq.data) norm += x * x;
  EXPECT_GT(norm, 1e-6);
  EXPECT_LE(rel_err(finite_difference(p, &Problem::q, in.d_out, in.d_lse), g.dq), 1e-6);
  EXPECT_LE(rel_err(finite_difference(p, &Problem::k, in.d_out, in.d_lse), g.dk), 1e-6);
}

// Permuting the keys and values (and the mask's columns alike) leaves O and LSE
// unchanged and permutes dK and dV.
TEST(Reference, KeyPermutationInvariance) {
  for (uint64_t seed = 0; seed < 30; ++seed) {
    Case c = random_case(seed + 1000);
    c.composition = {};
    const Inputs in = generate_inputs(c);
    const Problem p = full_problem(c, in);
    const Shape& s = c.shape;
    std::vector<int64_t> perm(static_cast<size_t>(s.seq_kv));
    std::iota(perm.begin(), perm.end(), 0);
    std::reverse(perm.begin(), perm.end());
    if (seed % 2) std::rotate(perm.begin(), perm.begin() + (s.seq_kv / 2), perm.end());
    Problem pp = p;
    for (int64_t b = 0; b < s.batch; ++b) {
      for (int64_t h = 0; h < s.heads_kv; ++h)
        for (int64_t j = 0; j < s.seq_kv; ++j) {
          const int64_t src = perm[static_cast<size_t>(j)];
          std::copy(p.k.at(b, h, src), p.k.at(b, h, src) + s.head_dim_qk, pp.k.at(b, h, j));
          std::copy(p.v.at(b, h, src), p.v.at(b, h, src) + s.head_dim_v, pp.v.at(b, h, j));
        }
      for (int64_t h = 0; h < s.heads_q; ++h)
        for (int64_t i = 0; i < s.seq_q; ++i)
          for (int64_t j = 0; j < s.seq_kv; ++j)
            pp.mask[static_cast<size_t>(((b * s.heads_q + h) * s.seq_q + i) * s.seq_kv + j)] =
                p.visible(b, h, i, perm[static_cast<size_t>(j)]);
    }
    const Forward f = reference_forward(p), fp = reference_forward(pp);
    const Gradients g = reference_backward(p, f, in.d_out, in.d_lse), gp = reference_backward(pp, fp, in.d_out, in.d_lse);
    for (size_t i = 0; i < f.o.numel(); ++i) ASSERT_NEAR(f.o.data[i], fp.o.data[i], 1e-12 * (1 + std::fabs(f.o.data[i])));
    for (size_t i = 0; i < f.lse.numel(); ++i) {
      if (std::isinf(f.lse.data[i])) {
        ASSERT_EQ(f.lse.data[i], fp.lse.data[i]);
      } else {
        ASSERT_NEAR(f.lse.data[i], fp.lse.data[i], 1e-12 * (1 + std::fabs(f.lse.data[i])));
      }
    }
    for (size_t i = 0; i < g.dq.numel(); ++i) ASSERT_NEAR(g.dq.data[i], gp.dq.data[i], 1e-11 * (1 + std::fabs(g.dq.data[i])));
    for (int64_t b = 0; b < s.batch; ++b)
      for (int64_t h = 0; h < s.heads_kv; ++h)
        for (int64_t j = 0; j < s.seq_kv; ++j) {
          const int64_t src = perm[static_cast<size_t>(j)];
          for (int64_t d = 0; d < s.head_dim_qk; ++d)
            ASSERT_NEAR(gp.dk.at(b, h, j)[d], g.dk.at(b, h, src)[d], 1e-11 * (1 + std::fabs(g.dk.at(b, h, src)[d])));
          for (int64_t d = 0; d < s.head_dim_v; ++d)
            ASSERT_NEAR(gp.dv.at(b, h, j)[d], g.dv.at(b, h, src)[d], 1e-11 * (1 + std::fabs(g.dv.at(b, h, src)[d])));
        }
  }
}

// GQA equals MHA with K and V repeated per group, with dK and dV summed over the group.
TEST(Reference, GqaEqualsRepeatedMha) {
  Case c;
  c.seed = 3;
  c.shape = {2, 6, 2, 9, 11, 5, 4};
  c.mask = MaskExpr::causal_mask(Align::bottom_right);
  c.d_lse = ValueDist{};
  const Inputs in = generate_inputs(c);
  const Problem gqa = full_problem(c, in);
  Case cm = c;
  cm.shape.heads_kv = 6;
  Problem mha = full_problem(cm, generate_inputs(cm));
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t h = 0; h < 6; ++h)
      for (int64_t j = 0; j < 11; ++j) {
        std::copy(gqa.k.at(b, h / 3, j), gqa.k.at(b, h / 3, j) + 5, mha.k.at(b, h, j));
        std::copy(gqa.v.at(b, h / 3, j), gqa.v.at(b, h / 3, j) + 4, mha.v.at(b, h, j));
      }
  mha.q = gqa.q;
  const Forward fg = reference_forward(gqa), fm = reference_forward(mha);
  const Gradients gg = reference_backward(gqa, fg, in.d_out, in.d_lse), gm = reference_backward(mha, fm, in.d_out, in.d_lse);
  for (size_t i = 0; i < fg.o.numel(); ++i) ASSERT_NEAR(fg.o.data[i], fm.o.data[i], 1e-13);
  for (size_t i = 0; i < gg.dq.numel(); ++i) ASSERT_NEAR(gg.dq.data[i], gm.dq.data[i], 1e-13);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t hk = 0; hk < 2; ++hk)
      for (int64_t j = 0; j < 11; ++j) {
        for (int64_t d = 0; d < 5; ++d) {
          double sum = 0;
          for (int64_t h = hk * 3; h < hk * 3 + 3; ++h) sum += gm.dk.at(b, h, j)[d];
          ASSERT_NEAR(gg.dk.at(b, hk, j)[d], sum, 1e-12);
        }
        for (int64_t d = 0; d < 4; ++d) {
          double sum = 0;
          for (int64_t h = hk * 3; h < hk * 3 + 3; ++h) sum += gm.dv.at(b, h, j)[d];
          ASSERT_NEAR(gg.dv.at(b, hk, j)[d], sum, 1e-12);
        }
      }
}

// The seed's scenario: a local band and the global rest, merged through their LSEs,
// equal the single causal call in O, LSE, dQ, dK, dV (with dLSE flowing).
TEST(Reference, LocalBandPlusGlobalRestEqualsSingleCall) {
  Case c;
  c.seed = 11;
  c.shape = {1, 2, 2, 48, 48, 8, 8};
  c.mask = MaskExpr::causal_mask(Align::top_left);
  c.d_lse = ValueDist{};
  c.composition.kind = Composition::Kind::q_split;
  c.composition.bounds = {12};
  Composition part;
  part.kind = Composition::Kind::mask_partition;
  part.window_left = 12;
  c.composition.children = {Composition{}, part};
  const Inputs in = generate_inputs(c);
  ReferenceBackend ref;
  const ComposedResult single = run_composition(ref, c, in, Composition{});
  const ComposedResult split = run_composition(ref, c, in);
  EXPECT_EQ(split.backend_calls, 2 * 3);
  auto close = [](const Tensor& a, const Tensor& b) {
    for (size_t i = 0; i < a.numel(); ++i) ASSERT_NEAR(a.data[i], b.data[i], 1e-12 * (1 + std::fabs(b.data[i])));
  };
  close(split.fwd.o, single.fwd.o);
  close(split.fwd.lse, single.fwd.lse);
  close(split.grads.dq, single.grads.dq);
  close(split.grads.dk, single.grads.dk);
  close(split.grads.dv, single.grads.dv);
}

// Fully masked rows: LSE = -inf, O = 0, no gradient, never NaN.
TEST(Reference, FullyMaskedRowsConvention) {
  Case c;
  c.shape = {1, 1, 1, 6, 6, 4, 4};
  c.mask.kind = MaskExpr::Kind::document;
  c.mask.segments_q = {2, 4};
  c.mask.segments_kv = {0, 6};  // the first two queries' document has no keys
  c.d_lse = ValueDist{};
  const Inputs in = generate_inputs(c);
  const Problem p = full_problem(c, in);
  const Forward f = reference_forward(p);
  const Gradients g = reference_backward(p, f, in.d_out, in.d_lse);
  for (int64_t i = 0; i < 2; ++i) {
    EXPECT_EQ(*f.lse.at(0, 0, i), -std::numeric_limits<double>::infinity());
    for (int64_t d = 0; d < 4; ++d) {
      EXPECT_EQ(f.o.at(0, 0, i)[d], 0.0);
      EXPECT_EQ(g.dq.at(0, 0, i)[d], 0.0);
    }
  }
  for (const Tensor* t : {&f.o, &g.dq, &g.dk, &g.dv})
    for (double x : t->data) EXPECT_FALSE(std::isnan(x));
}

}  // namespace
}  // namespace attnfuzz
