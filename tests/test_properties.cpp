// Property tests over generated cases (RapidCheck, with the project's shrinkers): the
// oracles' invariants, sized for CI. A failure prints the shrunk case.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cmath>
#include <map>
#include <set>

#include "generators/rc_case.h"
#include "harness/case_json.h"
#include "harness/compose.h"
#include "harness/inputs.h"
#include "oracles/reference.h"
#include "oracles/torch_oracle.h"

namespace attnfuzz {
namespace {

bool close(const Tensor& a, const Tensor& b, double tol) {
  for (size_t i = 0; i < a.numel(); ++i) {
    if (std::isinf(a.data[i]) || std::isinf(b.data[i])) {
      if (a.data[i] != b.data[i]) return false;
      continue;
    }
    if (!(std::fabs(a.data[i] - b.data[i]) <= tol * (1 + std::fabs(b.data[i])))) return false;
  }
  return true;
}

RC_GTEST_PROP(Properties, ShrinkCandidatesAreValidAndSmaller, ()) {
  const Case c = *gen_case();
  for (const Case& s : shrink_candidates(c)) {
    validate(s);  // throws on an invalid candidate
    RC_ASSERT(!(s == c));
  }
}

RC_GTEST_PROP(Properties, CaseJsonRoundTrips, ()) {
  const Case c = *gen_case();
  RC_ASSERT(case_from_string(write_case(c)) == c);
}

RC_GTEST_PROP(Properties, SplittingKeysInTwoAndMergingEqualsTheSingleCall, ()) {
  RandomCaseOptions opt;
  opt.p_composition = 0;
  Case c = *gen_case(opt);
  c.q = c.k = c.v = ValueDist{};
  const int64_t cut = *rc::gen::inRange<int64_t>(0, c.shape.seq_kv + 1);
  Composition split;
  split.kind = Composition::Kind::kv_split;
  split.bounds = {cut};
  const Inputs in = generate_inputs(c);
  ReferenceBackend ref;
  const ComposedResult a = run_composition(ref, c, in, Composition{}), b = run_composition(ref, c, in, split);
  RC_ASSERT(close(b.fwd.o, a.fwd.o, 1e-10));
  RC_ASSERT(close(b.fwd.lse, a.fwd.lse, 1e-10));
  RC_ASSERT(close(b.grads.dq, a.grads.dq, 1e-9));
  RC_ASSERT(close(b.grads.dk, a.grads.dk, 1e-9));
  RC_ASSERT(close(b.grads.dv, a.grads.dv, 1e-9));
}

RC_GTEST_PROP(Properties, FullyMaskedRowsNeverProduceNaN, ()) {
  const Case c = *gen_case();
  const Inputs in = generate_inputs(c);
  ReferenceBackend ref;
  const ComposedResult r = run_composition(ref, c, in);
  for (const Tensor* t : {&r.fwd.o, &r.fwd.lse, &r.grads.dq, &r.grads.dk, &r.grads.dv})
    for (double x : t->data) RC_ASSERT(!std::isnan(x));
}

RC_GTEST_PROP(Properties, ScalingVLeavesPAndScalesOAndDv, ()) {
  // O = P V is linear in V; dV = P^T dO does not depend on V.
  Case c = *gen_case();
  c.composition = {};
  const Inputs in = generate_inputs(c);
  Problem p = full_problem(c, in);
  const Forward f = reference_forward(p);
  const Gradients g = reference_backward(p, f, in.d_out, in.d_lse);
  for (double& x : p.v.data) x *= 2.0;
  const Forward f2 = reference_forward(p);
  const Gradients g2 = reference_backward(p, f2, in.d_out, in.d_lse);
  for (size_t i = 0; i < f.o.numel(); ++i) RC_ASSERT(f2.o.data[i] == 2.0 * f.o.data[i]);
  RC_ASSERT(close(g2.dv, g.dv, 1e-12));
}

}  // namespace
}  // namespace attnfuzz

namespace attnfuzz {
namespace {

void count_masks(const MaskExpr& m, std::set<std::string>& kinds, bool& empty_doc) {
  kinds.insert(to_string(m.kind));
  if (m.kind == MaskExpr::Kind::document)
    for (size_t i = 0; i < m.segments_q.size(); ++i) empty_doc |= m.segments_q[i] == 0 || m.segments_kv[i] == 0;
  for (const auto& a : m.args) count_masks(a, kinds, empty_doc);
}

bool has_empty_chunk(const Composition& c) {
  for (size_t i = 1; i < c.bounds.size(); ++i)
    if (c.bounds[i] == c.bounds[i - 1]) return true;
  for (const auto& ch : c.children)
    if (has_empty_chunk(ch)) return true;
  return false;
}

// The generator reaches the corners where attention bugs live (issue: generators).
TEST(Generator, ReachesTheCorners) {
  RandomCaseOptions opt;
  opt.max_seq = 130;
  opt.max_dim = 130;
  std::map<std::string, int> seen;
  std::set<std::string> kinds;
  opt.p_breaking_values = 0.25;  // opt-in: the share the breaking values' counts below expect
  for (uint64_t seed = 0; seed < 3000; ++seed) {
    const Case c = random_case(seed, opt);
    const Shape& s = c.shape;
    seen["Sq>Skv"] += s.seq_q > s.seq_kv;
    seen["Sq<Skv"] += s.seq_q < s.seq_kv;
    seen["Sq=1"] += s.seq_q == 1;
    seen["Skv=1"] += s.seq_kv == 1;
    for (int64_t m : {16, 64, 128})
      for (int64_t d : {-1, 0, 1}) seen["S=" + std::to_string(m + d)] += s.seq_q == m + d || s.seq_kv == m + d;
    seen["D not pow2"] += (s.head_dim_qk & (s.head_dim_qk - 1)) != 0;
    seen["Dqk!=Dv"] += s.head_dim_qk != s.head_dim_v;
    seen["GQA"] += s.heads_q > s.heads_kv && s.heads_kv > 1;
    seen["MQA"] += s.heads_kv == 1 && s.heads_q > 1;
    bool empty_doc = false;
    count_masks(c.mask, kinds, empty_doc);
    seen["empty varlen segment"] += empty_doc;
    seen["large logits"] += c.q.kind == ValueDist::Kind::large_logit || c.k.kind == ValueDist::Kind::large_logit;
    seen["ties"] += c.q.kind == ValueDist::Kind::near_constant && c.q.sigma == 0.0;
    seen["outliers"] += c.v.kind == ValueDist::Kind::outliers;
    bool padded = false, head_padded = false, unaligned = false, orders_differ = false;
    for (TensorId r : kLaidOutTensors) {
      const TensorLayout& l = c.layouts[r];
      padded |= l.row_padding > 0, head_padded |= l.head_padding > 0, unaligned |= l.offset % 8 != 0;
      orders_differ |= l.order != c.layouts[TensorId::Q].order;
      seen[std::string("order ") + order_name(l.order)] += r == TensorId::K;
    }
    seen["padded"] += padded;
    seen["heads padded apart"] += head_padded;
    seen["offset not 16-byte aligned"] += unaligned;
    seen["tensors in different orders"] += orders_differ;
    seen["packed qkv"] += c.layouts.inputs == Packing::qkv && packing_applies(Packing::qkv, s);
    seen["packed kv"] += c.layouts.inputs == Packing::kv && packing_applies(Packing::kv, s);
    seen["packed grads"] += c.layouts.grads != Packing::none && packing_applies(c.layouts.grads, s);
    seen["dLSE"] += c.d_lse.kind != ValueDist::Kind::zero;
    seen["empty chunk"] += has_empty_chunk(c.composition);
    seen["softcap"] += c.softcap.has_value();
    for (ValueFeature f : value_features(c)) ++seen[to_string(f)];
    // Fully masked rows: some query row sees no key.
    const Problem p =
        full_problem(c, Inputs{Tensor({s.batch, s.heads_q, s.seq_q, s.head_dim_qk}), Tensor({s.batch, s.heads_kv, s.seq_kv, s.head_dim_qk}),
                               Tensor({s.batch, s.heads_kv, s.seq_kv, s.head_dim_v}), Tensor(), Tensor()});
    bool masked_row = false;
    for (int64_t i = 0; i < s.seq_q && !masked_row; ++i) {
      bool any = false;
      for (int64_t j = 0; j < s.seq_kv && !any; ++j) any = p.visible(0, 0, i, j);
      masked_row = !any;
    }
    seen["fully masked row"] += masked_row;
  }
  for (const auto& [what, n] : seen) EXPECT_GE(n, 10) << what << " reached only " << n << " times in 3000 cases";
  // Each breaking value in its share: p_breaking_values / 6 of the cases (125 in 3000 by
  // default; 4 sigma is about 44).
  for (const char* f : {"lse_far_below_zero", "logits_near_overflow", "subnormal_inputs", "d_out_zero_rows", "d_out_large", "d_lse_large"}) {
    EXPECT_GE(seen[f], 80) << f;
    EXPECT_LE(seen[f], 170) << f;
  }
  for (const char* k : {"none", "causal", "sliding_window", "document", "prefix_lm", "block_sparse", "random", "and", "or", "not"})
    EXPECT_TRUE(kinds.count(k)) << k;
}

}  // namespace
}  // namespace attnfuzz
