// The composition engine: every composition, with float64 leaves, equals the single call;
// empty chunks merge without NaN; the dLSE term added for a backend that ignores dLSE is exact.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cmath>

#include "generators/random_case.h"
#include "harness/compose.h"
#include "harness/merge.h"
#include "oracles/reference.h"

namespace attnfuzz {
namespace {

bool all_close(const Tensor& a, const Tensor& b, double tol) {
  if (a.shape != b.shape) return false;
  for (size_t i = 0; i < a.numel(); ++i) {
    const double x = a.data[i], y = b.data[i];
    if (std::isnan(x) || std::isnan(y)) return false;
    if (std::isinf(y) || std::isinf(x)) {
      if (x != y) return false;
      continue;
    }
    if (std::fabs(x - y) > tol * (1 + std::fabs(y))) return false;
  }
  return true;
}

RC_GTEST_PROP(Compose, EveryCompositionEqualsTheSingleCall, (uint64_t seed)) {
  RandomCaseOptions opt;
  opt.p_composition = 1.0;
  opt.dtypes = {DType::f32};
  Case c = random_case(seed, opt);
  c.q = c.k = c.v = ValueDist{};
  RC_TAG(to_string(c.composition.kind));
  const Inputs in = generate_inputs(c);
  ReferenceBackend ref;
  const ComposedResult single = run_composition(ref, c, in, Composition{});
  const ComposedResult comp = run_composition(ref, c, in);
  RC_ASSERT(all_close(comp.fwd.o, single.fwd.o, 1e-10));
  RC_ASSERT(all_close(comp.fwd.lse, single.fwd.lse, 1e-10));
  RC_ASSERT(all_close(comp.grads.dq, single.grads.dq, 1e-10));
  RC_ASSERT(all_close(comp.grads.dk, single.grads.dk, 1e-10));
  RC_ASSERT(all_close(comp.grads.dv, single.grads.dv, 1e-10));
}

TEST(Merge, EmptyPartsMergeWithoutNaN) {
  const double ninf = -std::numeric_limits<double>::infinity();
  Forward a{Tensor({1, 1, 2, 2}), Tensor({1, 1, 2}, ninf)};
  Forward b{Tensor({1, 1, 2, 2}), Tensor({1, 1, 2}, ninf)};
  b.lse.data[1] = 0.5;
  b.o.data[2] = 3.0;
  b.o.data[3] = -1.0;
  const Forward m = merge_forward({a, b});
  EXPECT_EQ(m.lse.data[0], ninf);
  EXPECT_EQ(m.o.data[0], 0.0);
  EXPECT_DOUBLE_EQ(m.lse.data[1], 0.5);
  EXPECT_DOUBLE_EQ(m.o.data[2], 3.0);
  Tensor d_out({1, 1, 2, 2}, 1.0), d_lse({1, 1, 2}, 1.0);
  const auto g = merge_backward({a, b}, m, d_out, d_lse);
  for (const auto& pg : g) {
    for (double x : pg.d_out.data) EXPECT_FALSE(std::isnan(x));
    for (double x : pg.d_lse.data) EXPECT_FALSE(std::isnan(x));
  }
  EXPECT_EQ(g[0].d_lse.data[1], 0.0);
  EXPECT_DOUBLE_EQ(g[1].d_lse.data[1], 1.0);  // w = 1: dL_k = rowsum(dO O_k) - rowsum(dO O) + dL = dL
}

// A backend whose backward drops dLSE, as cuDNN's does.
class NoDlseReference final : public Backend {
 public:
  std::string name() const override { return "reference-without-dlse"; }
  bool backward_takes_dlse() const override { return false; }
  Forward forward(const Problem& p) override { return reference_forward(p); }
  Gradients backward(const Problem& p, const Forward& f, const Tensor& d_out, const Tensor& d_lse) override {
    return reference_backward(p, f, d_out, Tensor(d_lse.shape));
  }
};

TEST(Compose, HarnessAddsTheDlseTermExactly) {
  int added = 0;
  for (uint64_t seed = 0; seed < 60; ++seed) {
    RandomCaseOptions opt;
    opt.p_composition = 1.0;
    opt.p_softcap = 0.0;
    opt.p_dlse = 1.0;
    const Case c = random_case(seed + 500, opt);
    const Inputs in = generate_inputs(c);
    ReferenceBackend ref;
    NoDlseReference no_dlse;
    const ComposedResult want = run_composition(ref, c, in);
    const ComposedResult got = run_composition(no_dlse, c, in);
    added += got.dlse_added_by_harness;
    EXPECT_FALSE(want.dlse_added_by_harness);
    EXPECT_TRUE(all_close(got.grads.dq, want.grads.dq, 1e-10)) << seed;
    EXPECT_TRUE(all_close(got.grads.dk, want.grads.dk, 1e-10)) << seed;
    EXPECT_TRUE(all_close(got.grads.dv, want.grads.dv, 1e-10)) << seed;
  }
  EXPECT_GT(added, 30);  // the term really was needed (and added) in most cases
}

TEST(Compose, DroppingDlseInsideAMergeIsVisible) {
  // The FlexAttention seed in miniature: each part's backward ignores the gradient
  // flowing into its LSE. The single call has dLSE = 0, yet the merged gradients differ.
  Case c;
  c.seed = 5;
  c.shape = {1, 1, 1, 16, 16, 8, 8};
  c.mask = MaskExpr::causal_mask(Align::top_left);
  c.composition.kind = Composition::Kind::mask_partition;
  c.composition.window_left = 4;
  const Inputs in = generate_inputs(c);
  class Broken final : public Backend {
   public:
    std::string name() const override { return "broken"; }
    Forward forward(const Problem& p) override { return reference_forward(p); }
    Gradients backward(const Problem& p, const Forward& f, const Tensor& d_out, const Tensor& d_lse) override {
      return reference_backward(p, f, d_out, Tensor(d_lse.shape));
    }
  } broken;
  ReferenceBackend ref;
  const ComposedResult want = run_composition(ref, c, in, Composition{});
  const ComposedResult single = run_composition(broken, c, in, Composition{});
  const ComposedResult merged = run_composition(broken, c, in);
  EXPECT_TRUE(all_close(single.grads.dq, want.grads.dq, 1e-12));  // dLSE = 0: the single call hides the bug
  EXPECT_TRUE(all_close(merged.fwd.o, want.fwd.o, 1e-12));        // the forward matches
  EXPECT_FALSE(all_close(merged.grads.dq, want.grads.dq, 1e-3));  // the gradients do not
}

// A backend with another convention for rows with no visible key (LibTorch's cuDNN path
// attends uniformly there): the engine hands it zero upstream gradients on those rows, so
// their dO cannot reach dK and dV. It records the largest |dO| and |dLSE| it got on them.
class OtherConvention final : public Backend {
 public:
  std::string name() const override { return "other-convention"; }
  bool masked_rows_zero() const override { return false; }
  Forward forward(const Problem& p) override { return ref_.forward(p); }
  Gradients backward(const Problem& p, const Forward& f, const Tensor& d_out, const Tensor& d_lse) override {
    const Shape& s = p.shape;
    for (int64_t b = 0; b < s.batch; ++b)
      for (int64_t h = 0; h < s.heads_q; ++h)
        for (int64_t i = 0; i < s.seq_q; ++i) {
          bool any = false;
          for (int64_t j = 0; j < s.seq_kv; ++j) any = any || p.visible(b, h, i, j);
          if (any) continue;
          ++masked_rows_seen;
          max_dlse = std::max(max_dlse, std::fabs(*d_lse.at(b, h, i)));
          for (int64_t d = 0; d < s.head_dim_v; ++d) max_dout = std::max(max_dout, std::fabs(d_out.at(b, h, i)[d]));
        }
    return ref_.backward(p, f, d_out, d_lse);
  }
  int masked_rows_seen = 0;
  double max_dout = 0, max_dlse = 0;

 private:
  ReferenceBackend ref_;
};

TEST(Compose, RowsWithNoVisibleKeyGetNoUpstreamGradientUnderAnotherConvention) {
  Case c;
  c.seed = 5;
  c.shape = {1, 2, 1, 24, 16, 8, 8};
  c.dtype = DType::f32;
  c.mask = MaskExpr::causal_mask(Align::bottom_right);  // Sq > Skv: the first 8 rows see nothing
  c.d_lse = ValueDist{};                                // non-zero dLSE too
  const Inputs in = generate_inputs(c);
  OtherConvention be;
  ReferenceBackend ref;
  const ComposedResult got = run_composition(be, c, in, Composition{});
  const ComposedResult want = run_composition(ref, c, in, Composition{});
  EXPECT_GT(be.masked_rows_seen, 0);
  EXPECT_EQ(be.max_dout, 0.0);
  EXPECT_EQ(be.max_dlse, 0.0);
  EXPECT_TRUE(all_close(got.grads.dk, want.grads.dk, 1e-12));
  EXPECT_TRUE(all_close(got.grads.dv, want.grads.dv, 1e-12));
}

// A case's leaves are made once and shared (LeafProblems): a second run through the same leaf
// gets the same Problem, another leaf (its rows, keys, restrictions or V := K) its own, and a run
// that keeps the leaves computes what one without does.
TEST(LeafProblems, ALeafIsMadeOnceAndRunsAgreeWithout) {
  LeafProblems leaves;
  int made = 0;
  const Inputs none;
  auto make = [&] {
    ++made;
    return Problem{};
  };
  const LeafKey whole{&none, 0, 8, 0, 8, {}}, part{&none, 0, 4, 0, 8, {}}, pk{&none, 0, 8, 0, 8, {}, true};
  const auto a = leaves.get(whole, make), b = leaves.get(whole, make);
  EXPECT_EQ(a.get(), b.get());
  EXPECT_NE(leaves.get(part, make).get(), a.get());
  EXPECT_NE(leaves.get(pk, make).get(), a.get());
  EXPECT_EQ(made, 3);

  ReferenceBackend ref;
  RandomCaseOptions opt;
  opt.p_composition = 1.0;
  const Case c = random_case(62, opt);
  const Inputs in = generate_inputs(c);
  LeafProblems kept;
  const ComposedResult with = run_composition(ref, c, in, c.composition, false, &kept);
  const ComposedResult again = run_composition(ref, c, in, c.composition, false, &kept);
  const ComposedResult without = run_composition(ref, c, in, c.composition);
  for (TensorId t : {TensorId::O, TensorId::LSE, TensorId::dQ, TensorId::dK, TensorId::dV}) {
    EXPECT_EQ(with[t], without[t]) << name_of(t);
    EXPECT_EQ(again[t], without[t]) << name_of(t);
  }
}

}  // namespace
}  // namespace attnfuzz
