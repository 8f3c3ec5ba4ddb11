// The project's fused kernels (kernels/flash/, label gpu): cuda.flash and cuda.merge judged by
// the harness's own verdicts (run_differential with the GPU oracle set: the float64
// reference and the contract baselines), over hand-made edge cases and random ones, and the
// merge kernel against harness/merge.h. Without a usable GPU every test reports itself
// skipped, with the reason.
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <limits>
#include <string>

#include "generators/random_case.h"
#include "harness/case_json.h"
#include "harness/compose.h"
#include "harness/differential.h"
#include "harness/inputs.h"
#include "harness/merge.h"
#include "oracles/gpu_oracles.h"
#include "tests/gpu_test_util.h"
#include "backends/flash_backends.h"
#include "oracles/reference.h"
#include "backends/registry.h"

namespace attnfuzz {
namespace {

Case base_case(uint64_t seed, Shape s, DType d) {
  Case c;
  c.seed = seed;
  c.shape = s;
  c.dtype = d;
  c.d_lse = ValueDist{};  // random dLSE
  return c;
}

// Relative RMS error of a against b.
double rel_rms(const Tensor& a, const Tensor& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.numel(); ++i) {
    if (std::isinf(b.data[i]) && a.data[i] == b.data[i]) continue;
    const double d = a.data[i] - b.data[i];
    num += d * d, den += b.data[i] * b.data[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

// The first thing to look at when the kernel is wrong: one small case, every tensor's
// relative error against the float64 reference, printed.
TEST(FlashKernels, TinyCaseCloseToReference) {
  REQUIRE_GPU();
  for (int64_t d : {64, 128}) {
    Case c = base_case(1, {1, 2, 1, 70, 90, d, d}, DType::bf16);
    c.mask = MaskExpr::causal_mask(Align::bottom_right);
    const Inputs in = generate_inputs(c);
    ReferenceBackend ref;
    FlashBackend flash;
    const ComposedResult r = run_composition(ref, c, in), f = run_composition(flash, c, in);
    const double eo = rel_rms(f.fwd.o, r.fwd.o), el = rel_rms(f.fwd.lse, r.fwd.lse), eq = rel_rms(f.grads.dq, r.grads.dq),
                 ek = rel_rms(f.grads.dk, r.grads.dk), ev = rel_rms(f.grads.dv, r.grads.dv);
    std::cout << "D=" << d << " relative RMS error: O " << eo << " LSE " << el << " dQ " << eq << " dK " << ek << " dV " << ev << "\n";
    EXPECT_LT(eo, 2e-2);
    EXPECT_LT(el, 1e-4);
    EXPECT_LT(eq, 5e-2);
    EXPECT_LT(ek, 5e-2);
    EXPECT_LT(ev, 5e-2);
  }
}

// Hand-made cases for what random draws may miss.
std::vector<Case> edge_cases() {
  std::vector<Case> out;
  {  // bottom-right causal, Sq > Skv: the first rows see no key (fully masked rows)
    Case c = base_case(21, {1, 2, 2, 150, 70, 64, 64}, DType::bf16);
    c.mask = MaskExpr::causal_mask(Align::bottom_right);
    out.push_back(c);
  }
  {  // GQA (group 4), softcap, Dqk != Dv (padded to 128), top-left causal, several tiles
    Case c = base_case(22, {2, 8, 2, 130, 200, 96, 40}, DType::f16);
    c.mask = MaskExpr::causal_mask(Align::top_left);
    c.softcap = 5.0;
    out.push_back(c);
  }
  {  // MQA, sliding window, large logits, D = 128
    Case c = base_case(23, {1, 6, 1, 257, 257, 128, 128}, DType::bf16);
    c.mask = MaskExpr::window(40, 3, Align::top_left);
    c.q.kind = ValueDist::Kind::large_logit;
    c.q.sigma = 6.0;
    out.push_back(c);
  }
  {  // varlen documents with an empty key segment: the dense path, fully masked rows mid-sequence
    Case c = base_case(24, {1, 2, 1, 100, 90, 64, 64}, DType::bf16);
    c.mask.kind = MaskExpr::Kind::document;
    c.mask.segments_q = {30, 40, 30};
    c.mask.segments_kv = {20, 0, 70};
    out.push_back(c);
  }
  {  // a random dense mask: every (b, h) plane differs; softcap
    Case c = base_case(25, {2, 3, 3, 65, 129, 64, 64}, DType::f16);
    c.mask.kind = MaskExpr::Kind::random;
    c.mask.density = 0.3;
    c.mask.seed = 7;
    c.softcap = 2.0;
    out.push_back(c);
  }
  {  // block-sparse at D = 128, GQA 2:1: the backward's 128-row blocks hold one empty and one
     // full or partial 64 x 64 mask unit per warpgroup, and the last key block's second
     // warpgroup lies past the sequence
    Case c = base_case(27, {1, 4, 2, 256, 320, 128, 128}, DType::bf16);
    c.mask.kind = MaskExpr::Kind::block_sparse;
    c.mask.block_q = 64;
    c.mask.block_kv = 32;
    c.mask.rows = {"1000001111", "0011110000", "1111000011", "0001111100"};
    out.push_back(c);
  }
  {  // many tiles, no mask, Sq != Skv, D = 128 bf16
    Case c = base_case(26, {1, 2, 1, 300, 520, 128, 128}, DType::bf16);
    out.push_back(c);
  }
  return out;
}

// Runs the harness's differential check of `be` on c with the GPU oracles; returns the
// findings' descriptions, and whether the backend ran.
std::vector<std::string> judge(const Case& c, Backend& be, bool* ran) {
  static const OracleSet gpu = make_oracles(Device::cuda);
  const DiffReport r = run_differential(c, {&be}, gpu);
  std::vector<std::string> out;
  *ran = false;
  for (const auto& run : r.runs) *ran |= !run.skipped;
  for (const auto& f : r.findings) out.push_back(f.signature.to_string() + ": " + f.detail);
  return out;
}

TEST(FlashKernels, EdgeCasesPassTheVerdicts) {
  REQUIRE_GPU();
  FlashBackend flash;
  for (const Case& c : edge_cases()) {
    bool ran = false;
    const auto findings = judge(c, flash, &ran);
    EXPECT_TRUE(ran) << write_case(c);
    for (const auto& f : findings) ADD_FAILURE() << f << "\n" << write_case(c);
  }
}

std::vector<Case> random_cases(int n, uint64_t seed0, double p_composition) {
  RandomCaseOptions opt;
  opt.dtypes = {DType::f16, DType::bf16};
  opt.max_dim = std::min<int64_t>(opt.max_dim, 128);
  opt.p_composition = p_composition;
  std::vector<Case> out;
  for (int i = 0; i < n; ++i) out.push_back(random_case(seed0 + static_cast<uint64_t>(i), opt));
  return out;
}

// Random cases of every mask kind, layout, GQA, Sq != Skv, dLSE and compositions (the
// harness's kv splits and mask partitions exercise dLSE through the merge).
TEST(FlashKernels, RandomCasesPassTheVerdicts) {
  REQUIRE_GPU();
  FlashBackend flash;
  int ran_count = 0, n = 0;
  for (const Case& c : random_cases(80, 12'000'000, 0.5)) {
    bool ran = false;
    const auto findings = judge(c, flash, &ran);
    ran_count += ran, ++n;
    for (const auto& f : findings) ADD_FAILURE() << f << "\n" << write_case(c);
  }
  std::cout << "cuda.flash ran " << ran_count << " of " << n << " random cases\n";
  EXPECT_GE(ran_count, n * 3 / 4);
}

TEST(FlashKernels, MergeBackendPassesOnCompositions) {
  REQUIRE_GPU();
  FlashMergeBackend merge;
  int ran_count = 0, n = 0;
  for (const Case& c : random_cases(40, 12'100'000, 1.0)) {
    bool ran = false;
    const auto findings = judge(c, merge, &ran);
    ran_count += ran, ++n;
    for (const auto& f : findings) ADD_FAILURE() << f << "\n" << write_case(c);
  }
  std::cout << "cuda.merge ran " << ran_count << " of " << n << " composed random cases\n";
  EXPECT_GE(ran_count, n * 3 / 4);
}

// The merge kernel against harness/merge.h, with a part whose rows are all -inf (a chunk
// that sees no key) and a row that no part sees.
TEST(FlashKernels, MergeKernelMatchesTheFloat64Merge) {
  REQUIRE_GPU();
  const double inf = std::numeric_limits<double>::infinity();
  const int64_t rows = 5, dim = 7;
  std::vector<Forward> parts(3, Forward{Tensor({1, 1, rows, dim}), Tensor({1, 1, rows})});
  for (int k = 0; k < 3; ++k)
    for (int64_t r = 0; r < rows; ++r) {
      parts[k].lse.data[r] = k == 1 ? -inf : (r == 4 ? -inf : 0.3 * r - k);
      for (int64_t d = 0; d < dim; ++d)
        parts[k].o.data[r * dim + d] = parts[k].lse.data[r] == -inf ? 0.0 : std::sin(1.0 + r + 3 * k + 0.1 * d);
    }
  Tensor d_out({1, 1, rows, dim}), d_lse({1, 1, rows});
  for (size_t i = 0; i < d_out.numel(); ++i) d_out.data[i] = std::cos(0.7 * i);
  for (size_t i = 0; i < d_lse.numel(); ++i) d_lse.data[i] = 0.25 * i - 0.5;
  GpuMerger gpu;
  const Forward want = merge_forward(parts), got = gpu.forward(parts);
  for (size_t i = 0; i < want.lse.numel(); ++i) {
    if (std::isinf(want.lse.data[i]))
      EXPECT_EQ(got.lse.data[i], want.lse.data[i]);
    else
      EXPECT_NEAR(got.lse.data[i], want.lse.data[i], 1e-5);
  }
  for (size_t i = 0; i < want.o.numel(); ++i) EXPECT_NEAR(got.o.data[i], want.o.data[i], 1e-5);
  const auto gw = merge_backward(parts, want, d_out, d_lse), gg = gpu.backward(parts, want, d_out, d_lse);
  ASSERT_EQ(gg.size(), gw.size());
  for (size_t k = 0; k < gw.size(); ++k) {
    for (size_t i = 0; i < gw[k].d_out.numel(); ++i) EXPECT_NEAR(gg[k].d_out.data[i], gw[k].d_out.data[i], 1e-5) << "part " << k;
    for (size_t i = 0; i < gw[k].d_lse.numel(); ++i) {
      EXPECT_FALSE(std::isnan(gg[k].d_lse.data[i]));
      EXPECT_NEAR(gg[k].d_lse.data[i], gw[k].d_lse.data[i], 1e-5) << "part " << k;
    }
  }
}

// The backward is deterministic: bitwise the same twice (no atomics).
TEST(FlashKernels, BackwardIsDeterministic) {
  REQUIRE_GPU();
  Case c = base_case(31, {2, 4, 2, 333, 257, 128, 128}, DType::bf16);
  c.mask = MaskExpr::causal_mask(Align::top_left);
  const Inputs in = generate_inputs(c);
  FlashBackend flash;
  const ComposedResult a = run_composition(flash, c, in), b = run_composition(flash, c, in);
  EXPECT_EQ(a.grads.dq.data, b.grads.dq.data);
  EXPECT_EQ(a.grads.dk.data, b.grads.dk.data);
  EXPECT_EQ(a.grads.dv.data, b.grads.dv.data);
}

}  // namespace
}  // namespace attnfuzz
