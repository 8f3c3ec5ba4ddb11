// Property tests over generated cases (RapidCheck, with the project's shrinkers): the
// oracles' invariants, sized for CI. A failure prints the shrunk case.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cmath>

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
