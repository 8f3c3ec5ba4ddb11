// The two float64 oracles check each other: Eigen (hand-written formulas) and
// LibTorch autograd over composed ops, on random cases covering every mask kind,
// GQA/MQA, softcap, Dqk != Dv and dLSE != 0.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "generators/random_case.h"
#include "harness/compose.h"
#include "harness/differential.h"
#include "oracles/reference.h"
#include "backends/registry.h"
#include "oracles/torch_oracle.h"
#include "backends/torch_sdpa.h"

namespace attnfuzz {
namespace {

double rel_err(const Tensor& a, const Tensor& b) {
  double d = 0, n = 0;
  for (size_t i = 0; i < a.numel(); ++i) {
    if (std::isinf(b.data[i]) && a.data[i] == b.data[i]) continue;
    d += (a.data[i] - b.data[i]) * (a.data[i] - b.data[i]);
    n += b.data[i] * b.data[i];
  }
  if (std::isnan(d)) return INFINITY;
  return n > 0 ? std::sqrt(d / n) : std::sqrt(d);
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (double x : t.data)
    if (std::isfinite(x)) m = std::max(m, std::fabs(x));
  return m;
}

// Agreement to 1e-10 relative, with an absolute floor at float64 rounding of the
// terms that make up each entry: where those terms cancel (ties, identical keys)
// the result is rounding noise in both oracles and only the floor is meaningful.
void expect_agree(const char* what, const Tensor& got, const Tensor& want, const Inputs& in) {
  const double terms = (1 + max_abs(in.q)) * (1 + max_abs(in.k)) * (1 + max_abs(in.v)) * (1 + max_abs(in.d_out) + max_abs(in.d_lse));
  double d = 0, n = 0;
  for (size_t i = 0; i < got.numel(); ++i) {
    if (std::isinf(want.data[i]) && got.data[i] == want.data[i]) continue;
    d += (got.data[i] - want.data[i]) * (got.data[i] - want.data[i]);
    n += want.data[i] * want.data[i];
  }
  const double floor = 1e-13 * terms * std::sqrt(static_cast<double>(got.numel()));
  EXPECT_LE(std::sqrt(d), 1e-10 * std::sqrt(n) + floor) << what << ": |diff| " << std::sqrt(d) << ", |ref| " << std::sqrt(n);
}

void collect_kinds(const MaskExpr& m, std::set<std::string>& kinds) {
  kinds.insert(to_string(m.kind));
  for (const auto& a : m.args) collect_kinds(a, kinds);
}

TEST(TorchOracle, AgreesWithEigenOn300RandomCases) {
  auto torch64 = make_torch_composed_backend(TorchPrecision::float64);
  ReferenceBackend ref;
  std::set<std::string> mask_kinds;
  int gqa = 0, mqa = 0, softcap = 0, dv_differs = 0, dlse = 0, masked_rows = 0;
  for (uint64_t seed = 0; seed < 300; ++seed) {
    RandomCaseOptions opt;
    opt.p_composition = 0.0;
    const Case c = random_case(seed, opt);
    collect_kinds(c.mask, mask_kinds);
    gqa += c.shape.heads_q > c.shape.heads_kv;
    mqa += c.shape.heads_kv == 1 && c.shape.heads_q > 1;
    softcap += c.softcap.has_value();
    dv_differs += c.shape.head_dim_qk != c.shape.head_dim_v;
    dlse += c.d_lse.kind != ValueDist::Kind::zero;
    const Inputs in = generate_inputs(c);
    const ComposedResult a = run_composition(ref, c, in);
    const ComposedResult b = run_composition(*torch64, c, in);
    for (double l : a.fwd.lse.data) masked_rows += std::isinf(l);
    SCOPED_TRACE("seed " + std::to_string(seed) + ": " + describe_shape(c.shape) + " mask " + describe(c.mask));
    expect_agree("O", b.fwd.o, a.fwd.o, in);
    expect_agree("LSE", b.fwd.lse, a.fwd.lse, in);
    expect_agree("dQ", b.grads.dq, a.grads.dq, in);
    expect_agree("dK", b.grads.dk, a.grads.dk, in);
    expect_agree("dV", b.grads.dv, a.grads.dv, in);
  }
  // The sample really covers what it claims to.
  for (const char* k : {"none", "causal", "sliding_window", "document", "prefix_lm", "block_sparse", "random", "and", "or", "not"})
    EXPECT_TRUE(mask_kinds.count(k)) << k;
  EXPECT_GT(gqa, 30);
  EXPECT_GT(mqa, 10);
  EXPECT_GT(softcap, 30);
  EXPECT_GT(dv_differs, 30);
  EXPECT_GT(dlse, 100);
  EXPECT_GT(masked_rows, 10);
}

// Every tensor in its own layout: all six orders of B/H/S, padded rows and heads, odd
// storage offsets, packed QKV. The LibTorch backends get as_strided views of those buffers.
Layouts exotic(Packing inputs) {
  Layouts l;
  int64_t i = 0;
  for (TensorId r : kLaidOutTensors) {
    l[r] = TensorLayout{kAllOrders[static_cast<size_t>(i) % kAllOrders.size()], (i + 1) % 3, (i * 5) % 7, 2 * i + 1};
    ++i;
  }
  l.inputs = inputs;
  return l;
}

TEST(TorchOracle, ExoticLayoutsAgreeWithEigenAndRaiseNoFinding) {
  auto torch64 = make_torch_composed_backend(TorchPrecision::float64);
  auto math = make_torch_composed_backend(TorchPrecision::case_dtype);
  auto sdpa = make_torch_sdpa_backend(SdpaKind::math);
  auto flash = make_torch_sdpa_backend(SdpaKind::cpu_flash);
  ReferenceBackend ref;
  for (uint64_t seed = 0; seed < 12; ++seed) {
    Case c;
    c.seed = seed;
    c.dtype = std::vector{DType::f32, DType::f16, DType::bf16}[seed % 3];
    // Shapes that allow packed QKV (every other one), and GQA with Sq != Skv.
    c.shape = seed % 2 ? Shape{2, 3, 3, 17, 17, 16, 16} : Shape{2, 4, 2, 9, 23, 16, 16};
    c.mask = seed % 4 < 2 ? MaskExpr::causal_mask(Align::bottom_right) : MaskExpr::window(5, 1, Align::top_left);
    c.d_lse = ValueDist{};
    c.layouts = exotic(seed % 4 == 1 ? Packing::qkv : Packing::kv);
    validate(c);
    SCOPED_TRACE("seed " + std::to_string(seed) + " " + describe(c.layouts));
    const Inputs in = generate_inputs(c);
    const ComposedResult a = run_composition(ref, c, in);
    const ComposedResult b = run_composition(*torch64, c, in);
    expect_agree("O", b.fwd.o, a.fwd.o, in);
    expect_agree("LSE", b.fwd.lse, a.fwd.lse, in);
    expect_agree("dQ", b.grads.dq, a.grads.dq, in);
    expect_agree("dK", b.grads.dk, a.grads.dk, in);
    expect_agree("dV", b.grads.dv, a.grads.dv, in);
    const DiffReport r = run_differential(c, {math.get(), sdpa.get(), flash.get()}, default_oracles());
    for (const auto& f : r.findings) ADD_FAILURE() << f.signature.to_string() << " " << f.detail;
    for (const auto& run : r.runs) EXPECT_FALSE(run.skipped) << run.backend << ": " << run.skip_reason;
  }
}

TEST(TorchOracle, CaseDtypeBaselineIsCloseButNotExact) {
  Case c;
  c.seed = 2;
  c.shape = {1, 2, 1, 32, 40, 16, 16};
  c.dtype = DType::bf16;
  c.d_lse = ValueDist{};
  const Inputs in = generate_inputs(c);
  ReferenceBackend ref;
  auto math = make_torch_composed_backend(TorchPrecision::case_dtype);
  const ComposedResult a = run_composition(ref, c, in), b = run_composition(*math, c, in);
  const double e = rel_err(b.fwd.o, a.fwd.o);
  EXPECT_GT(e, 1e-5);  // really computed in bf16
  EXPECT_LT(e, 3e-2);  // and still attention
  EXPECT_LT(rel_err(b.grads.dq, a.grads.dq), 5e-2);
}

// A window of 2^63 - 1 keys on both sides sees every key, in the mask expression and as a
// composition's band (issue 16): q' + right used to overflow to a negative bound in the torch
// mask rebuild too, so both oracles agreed on "every row fully masked".
TEST(TorchOracle, HugeWindowSeesEveryKey) {
  constexpr int64_t kMax = INT64_MAX;
  Case c;
  c.shape = Shape{1, 1, 1, 8, 16, 8, 8};
  c.mask = MaskExpr::window(kMax, kMax, Align::bottom_right);
  auto torch64 = make_torch_composed_backend(TorchPrecision::float64);
  const Inputs in = generate_inputs(c);
  const ComposedResult whole = run_composition(*torch64, c, in);
  for (double l : whole.fwd.lse.data) EXPECT_TRUE(std::isfinite(l)) << "a row of the huge window is fully masked";
  // The same band as a mask partition: the local part sees everything, the global nothing.
  c.mask = MaskExpr::all_visible();
  c.composition.kind = Composition::Kind::mask_partition;
  c.composition.window_left = c.composition.window_right = kMax;
  c.composition.window_align = Align::bottom_right;
  Problem local = full_problem(c, in), global = local;
  local.restrictions = {BandRestriction{kMax, kMax, Align::bottom_right, true}};
  global.restrictions = {BandRestriction{kMax, kMax, Align::bottom_right, false}};
  materialize_mask(local);
  materialize_mask(global);
  const Forward fl = torch64->forward(local), fg = torch64->forward(global);
  for (double l : fl.lse.data) EXPECT_TRUE(std::isfinite(l)) << "the local band lost keys";
  for (double l : fg.lse.data) EXPECT_TRUE(std::isinf(l) && l < 0) << "the global rest kept keys";
}

}  // namespace
}  // namespace attnfuzz
