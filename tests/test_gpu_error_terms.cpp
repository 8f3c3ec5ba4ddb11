// The error model's magnitudes on the GPU (oracles/gpu_error_terms.cu, label gpu) against
// oracles/error_terms.cpp on random cases, with and without a score bias: every TermTensors
// tensor within 1e-10 of the CPU one, relative to the tensor's largest element. The model's
// sigma and row dof from those terms on the GPU (oracles/gpu_model.cu) against the host's: the
// same bits. Without a usable GPU the tests report themselves skipped, with the reason.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <cmath>
#include <iostream>
#include <string>
#include <vector>

#include "generators/random_case.h"
#include "harness/case_json.h"
#include "harness/inputs.h"
#include "oracles/gpu_oracles.h"
#include "tests/gpu_test_util.h"
#include "oracles/error_terms.h"
#include "oracles/reference.h"

namespace attnfuzz {
namespace {

constexpr double kTolerance = 1e-10;

double max_abs(const TensorData& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

// max |got - want| / max(max |want|, `floor`) (0 when both are all zero). `floor` is the
// size of the terms where a tensor is a signed sum that can cancel to rounding noise.
double relative_difference(const Tensor& got, const Tensor& want, double floor, std::string* problem) {
  if (got.shape != want.shape) {
    *problem = "shape differs";
    return INFINITY;
  }
  double worst = 0;
  for (size_t i = 0; i < want.numel(); ++i) {
    if (!std::isfinite(got.data[i]) || !std::isfinite(want.data[i])) *problem = "not finite at " + std::to_string(i);
    worst = std::max(worst, std::fabs(got.data[i] - want.data[i]));
  }
  const double scale = std::max(max_abs(want.data), floor);
  return scale == 0 ? (worst == 0 ? 0 : INFINITY) : worst / scale;
}

// The per-row `sources` kept where the row's part is at least 1e-3 of u_op times its operand
// part (a millionth of the operand's variance), zeroed elsewhere.
Tensor where_part_matters(const Tensor& sources, const Tensor& part, const Tensor& operand) {
  Tensor kept = sources;
  if (sources.data.empty() || part.shape != operand.shape || operand.shape.size() != 4) return kept;
  const int64_t width = operand.shape[3];
  for (size_t row = 0; row < kept.numel(); ++row) {
    double p = 0, op = 0;
    for (int64_t d = 0; d < width; ++d) {
      p = std::max(p, part.data[row * static_cast<size_t>(width) + static_cast<size_t>(d)]);
      op = std::max(op, operand.data[row * static_cast<size_t>(width) + static_cast<size_t>(d)]);
    }
    if (p < 1e-3 * kFp16UnitRoundoff * op) kept.data[row] = 0;
  }
  return kept;
}

struct Coverage {
  int cases = 0, softcap = 0, gqa = 0, dims_differ = 0, dlse = 0, masked = 0, nonzero_stored = 0, nonzero_underflow = 0,
      nonzero_subnormal = 0, bias = 0, via_blocks = 0;
  double worst = 0;
  std::string worst_where;
};

void compare(const Case& c, Coverage& cov) {
  const Inputs in = generate_inputs(c);
  const Problem p = full_problem(c, in);
  const Forward ref = reference_forward(p);
  const ErrorTerms want = reference_error_terms(p, ref, in.d_out, in.d_lse);
  const ErrorTerms got = cuda_error_terms(p, ref, in.d_out, in.d_lse);
  for (TensorId o : kOutputs) {
    if (o == TensorId::dBias) continue;  // not computed on the GPU (the CPU set judges cases that ask it)
    const TermTensors &g = got[o], &w = want[o];
    EXPECT_EQ(g.length, w.length) << to_string(o);
    const std::pair<const char*, std::pair<const Tensor*, const Tensor*>> parts[] = {
        {"operand", {&g.operand, &w.operand}}, {"stored", {&g.stored, &w.stored}}, {"score", {&g.score, &w.score}},
        {"via_op", {&g.via_op, &w.via_op}},    {"via_st", {&g.via_st, &w.via_st}}, {"via_acc", {&g.via_acc, &w.via_acc}},
        {"via_sc", {&g.via_sc, &w.via_sc}},    {"underflow", {&g.underflow, &w.underflow}},
        {"subnormal", {&g.subnormal, &w.subnormal}},          {"subnormal_sources", {&g.subnormal_sources, &w.subnormal_sources}},
        {"operand_sources", {&g.operand_sources, &w.operand_sources}},
        {"score_sources", {&g.score_sources, &w.score_sources}}, {"truncation", {&g.truncation, &w.truncation}}};
    for (const auto& [part, tensors] : parts) {
      std::string problem;
      const std::string name = part;
      // `stored` sums signed per-head partials (dS^T Q, P^T dO): where dS is rounding noise
      // (near-constant V, no dLSE) so is the partial; its terms are bounded by the operand's.
      // `subnormal` takes dS alone, which is rounding noise where dP - D cancels (a row that sees
      // one key): compared on the scale at which the model adds it, u_op times the operand's.
      const double floor = name == "stored"      ? max_abs(w.operand.data)
                           : name == "subnormal" ? kFp16UnitRoundoff * max_abs(w.operand.data)
                                                 : 0.0;
      // Its sources are a ratio of such terms: compared in the rows where the part matters.
      const Tensor got_part = name == "subnormal_sources" ? where_part_matters(g.subnormal_sources, w.subnormal, w.operand) : Tensor{};
      const Tensor want_part = name == "subnormal_sources" ? where_part_matters(w.subnormal_sources, w.subnormal, w.operand) : Tensor{};
      const double rel = name == "subnormal_sources" ? relative_difference(got_part, want_part, 0.0, &problem)
                                                     : relative_difference(*tensors.first, *tensors.second, floor, &problem);
      const std::string where = std::string(to_string(o)) + "." + part;
      EXPECT_TRUE(problem.empty()) << where << ": " << problem << "\n" << write_case(c);
      EXPECT_LE(rel, kTolerance) << where << " differs from oracles/error_terms.cpp\n" << write_case(c);
      if (rel > cov.worst) cov.worst = rel, cov.worst_where = where;
    }
  }
  // dK's via blocks, where the GPU was asked for them (ATTNFUZZ_GPU_VIA_BLOCKS=1): each sum within
  // the tolerance of the largest of its kind.
  const TermTensors &gk = got[TensorId::dK], &wk = want[TensorId::dK];
  if (!gk.via_tile_sum.empty()) {
    EXPECT_EQ(gk.via_block_tile, wk.via_block_tile);
    const std::pair<const char*, std::pair<const std::vector<double>*, const std::vector<double>*>> blocks[] = {
        {"via_tile_sum", {&gk.via_tile_sum, &wk.via_tile_sum}},
        {"via_tile_sum_sq", {&gk.via_tile_sum_sq, &wk.via_tile_sum_sq}},
        {"via_head_sum", {&gk.via_head_sum, &wk.via_head_sum}},
        {"via_head_sum_sq", {&gk.via_head_sum_sq, &wk.via_head_sum_sq}}};
    for (const auto& [name, v] : blocks) {
      ASSERT_EQ(v.first->size(), v.second->size()) << name;
      double worst = 0, scale = 0;
      for (size_t i = 0; i < v.second->size(); ++i)
        worst = std::max(worst, std::fabs((*v.first)[i] - (*v.second)[i])), scale = std::max(scale, std::fabs((*v.second)[i]));
      const double rel = scale == 0 ? (worst == 0 ? 0 : INFINITY) : worst / scale;
      EXPECT_LE(rel, kTolerance) << "dK." << name << " differs from oracles/error_terms.cpp\n" << write_case(c);
      if (rel > cov.worst) cov.worst = rel, cov.worst_where = std::string("dK.") + name;
    }
    ++cov.via_blocks;
  }
  ++cov.cases;
  cov.softcap += c.softcap.has_value();
  cov.gqa += c.shape.group() > 1;
  cov.dims_differ += c.shape.head_dim_qk != c.shape.head_dim_v;
  cov.dlse += c.d_lse.kind != ValueDist::Kind::zero;
  cov.masked += c.mask.kind != MaskExpr::Kind::all;
  cov.bias += c.bias.has_value();
  cov.nonzero_stored += max_abs(want[TensorId::dK].stored.data) > 0;
  cov.nonzero_underflow += max_abs(want[TensorId::dV].underflow.data) > 0 && max_abs(want[TensorId::dK].underflow.data) > 0;
  bool subnormal = true;
  for (TensorId o : {TensorId::O, TensorId::dQ, TensorId::dK, TensorId::dV}) subnormal = subnormal && max_abs(want[o].subnormal.data) > 0;
  cov.nonzero_subnormal += subnormal;
}

// The draw of these tests: small cases (Sq, Skv up to 160, D up to 80, groups up to 4), a share
// p_bias of them with a score bias.
RandomCaseOptions small_cases(double p_bias = 0.0) {
  RandomCaseOptions opt;
  opt.max_seq = 160;
  opt.max_dim = 80;
  opt.max_group = 4;
  opt.p_bias = p_bias;
  return opt;
}

void print(const Coverage& cov) {
  std::cout << "  " << cov.cases << " cases: softcap " << cov.softcap << ", GQA/MQA " << cov.gqa << ", Dqk != Dv " << cov.dims_differ
            << ", dLSE " << cov.dlse << ", masked " << cov.masked << ", bias " << cov.bias << "; worst " << cov.worst << " ("
            << cov.worst_where << ")\n";
}

TEST(GpuErrorTerms, MatchTheCpuTermsOnRandomCases) {
  REQUIRE_GPU();
  const RandomCaseOptions opt = small_cases();
  Coverage cov;
  for (uint64_t i = 0; i < 80; ++i) compare(random_case(9'300'000 + i, opt), cov);
  print(cov);
  // The draw must reach what the formulas branch on.
  EXPECT_GE(cov.softcap, 5);
  EXPECT_GE(cov.gqa, 10);
  EXPECT_GE(cov.dims_differ, 10);
  EXPECT_GE(cov.dlse, 10);
  EXPECT_GE(cov.masked, 20);
  EXPECT_GE(cov.nonzero_stored, 10);
}

// dK's via blocks (harness/error_model.h, "D's error across key rows"), which the GPU computes on
// request (ATTNFUZZ_GPU_VIA_BLOCKS=1): random cases, and a decode case of H-17's kind (docs/findings).
TEST(GpuErrorTerms, MatchTheCpuViaBlocks) {
  REQUIRE_GPU();
  ::setenv("ATTNFUZZ_GPU_VIA_BLOCKS", "1", 1);
  const RandomCaseOptions opt = small_cases();
  Coverage cov;
  for (uint64_t i = 0; i < 30; ++i) compare(random_case(9'400'000 + i, opt), cov);
  Case decode;  // H-17's kind: a decode step, dO in sparse rows, Q outliers, K large logits
  decode.shape = {2, 12, 2, 15, 300, 64, 64};
  decode.dtype = DType::bf16;
  decode.q = ValueDist{ValueDist::Kind::outliers, 0.0, 1.0, 0.05, 100.0};
  decode.k = ValueDist{ValueDist::Kind::large_logit, 0.0, 7.0};
  decode.d_out = ValueDist{ValueDist::Kind::sparse_rows, 0.0, 1.0, 0.05};
  decode.seed = 17;
  compare(decode, cov);
  ::unsetenv("ATTNFUZZ_GPU_VIA_BLOCKS");
  print(cov);
  EXPECT_EQ(cov.via_blocks, cov.cases);
  EXPECT_GE(cov.gqa, 5);
}

// |S| in the score sensitivity is the biased score's: every kind of bias and every broadcast
// pattern of a dense one (tests/gpu_test_util.h), then random_bias's draws on random cases.
TEST(GpuErrorTerms, MatchTheCpuTermsWithEveryKindOfBias) {
  REQUIRE_GPU();
  Coverage cov;
  for (const Case& c : gpu_test::bias_cases()) compare(c, cov);
  print(cov);
  EXPECT_EQ(cov.bias, cov.cases);
}

TEST(GpuErrorTerms, MatchTheCpuTermsOnRandomCasesWithABias) {
  REQUIRE_GPU();
  const RandomCaseOptions opt = small_cases(1.0);
  Coverage cov;
  for (uint64_t i = 0; i < 40; ++i) compare(random_case(9'350'000 + i, opt), cov);
  print(cov);
  EXPECT_EQ(cov.bias, cov.cases);
  EXPECT_GE(cov.softcap, 2);
  EXPECT_GE(cov.masked, 10);
}

// Several 64 x 64 tiles, whole groups across a chunk, a softcap, Dqk != Dv, fully masked rows.
TEST(GpuErrorTerms, MatchTheCpuTermsAcrossTiles) {
  REQUIRE_GPU();
  Coverage cov;
  Case c;
  c.seed = 31;
  c.dtype = DType::bf16;
  c.shape = {2, 8, 2, 200, 150, 96, 40};  // Sq > Skv, bottom-right: the first rows see no key
  c.mask = MaskExpr::causal_mask(Align::bottom_right);
  c.softcap = 5.0;
  c.d_lse = ValueDist{};
  compare(c, cov);
  c.seed = 32;
  c.shape = {1, 4, 4, 257, 130, 128, 128};
  c.mask = MaskExpr::causal_mask(Align::top_left);
  c.softcap.reset();
  compare(c, cov);
  print(cov);
}

// Saturated softmax: probabilities below fp32's smallest normal, whose terms a flush-to-zero
// kernel loses (the dK and dV `underflow` terms, harness/error_model.h), over GQA groups.
TEST(GpuErrorTerms, MatchTheCpuTermsWhereProbabilitiesUnderflow) {
  REQUIRE_GPU();
  Coverage cov;
  Case c;
  c.seed = 3;
  c.dtype = DType::f32;
  c.shape = {1, 4, 2, 70, 90, 16, 24};
  c.q = c.k = ValueDist{ValueDist::Kind::large_logit, 0.0, 8.0};
  c.d_lse = ValueDist{};
  compare(c, cov);
  print(cov);
  EXPECT_EQ(cov.nonzero_underflow, 1) << "the case must reach the underflow terms";
}

// fp16 with outliers: probabilities and dS in fp16's subnormal range (the `subnormal` part and
// its sources, harness/error_model.h), over a GQA group, a softcap and a mask.
TEST(GpuErrorTerms, MatchTheCpuTermsWhereFp16ProbabilitiesAreSubnormal) {
  REQUIRE_GPU();
  Coverage cov;
  Case c;
  c.seed = 5;
  c.dtype = DType::f16;
  c.shape = {1, 4, 2, 90, 140, 64, 40};
  c.mask = MaskExpr::causal_mask(Align::bottom_right);
  c.q = c.k = ValueDist{ValueDist::Kind::outliers, 0.0, 1.0, 0.05, 20.0};
  c.d_lse = ValueDist{};
  compare(c, cov);
  c.seed = 6;
  c.softcap = 30.0;
  compare(c, cov);
  print(cov);
  EXPECT_EQ(cov.nonzero_subnormal, 2) << "the cases must reach the subnormal part of every output";
}

// Tied keys (harness/error_model.h, "tied keys"): every V row, every K row, or both, of each
// key-value head the same vector (exactly constant inputs), with a softcap and a causal mask:
// dQ's via_sc carries the tied keys' shared error on both sets alike.
TEST(GpuErrorTerms, MatchTheCpuTermsWhereKeysAreTied) {
  REQUIRE_GPU();
  Coverage cov;
  const ValueDist constant{ValueDist::Kind::near_constant, 0.1, 0.0};
  Case c;
  c.dtype = DType::f32;
  c.shape = {2, 8, 2, 33, 63, 80, 80};
  c.d_lse = ValueDist{};
  for (int tied = 1; tied <= 3; ++tied) {
    c.seed = 40 + static_cast<uint64_t>(tied);
    c.v = tied & 1 ? constant : ValueDist{};
    c.k = tied & 2 ? constant : ValueDist{};
    c.softcap = tied == 2 ? std::optional<double>(4.0) : std::nullopt;
    c.mask = tied == 3 ? MaskExpr::causal_mask(Align::bottom_right) : MaskExpr{};
    compare(c, cov);
  }
  print(cov);
}

// cuda_output_model against model_sigma_and_row_dof: the same bits, element for element, for
// every output of `c` under each contract, with the terms as the session attaches them; and once
// more with a reference row of repeated values and NaN (the distinct values' count) and with the
// sources left out (each element's sigma alone).
struct ModelCoverage {
  int outputs = 0, rows_with_dof = 0, elementwise = 0, dbias = 0;
};
void expect_same_model(const Case& c, ModelCoverage& cov) {
  const Inputs in = generate_inputs(c);
  const Problem p = full_problem(c, in);
  const Forward fwd = reference_forward(p);
  const Gradients grads = reference_backward(p, fwd, in.d_out, in.d_lse);
  ErrorTerms terms = reference_error_terms(p, fwd, in.d_out, in.d_lse);
  attach_row_lse(terms, fwd.lse);
  attach_directions(terms, p, in.d_out);
  const Tensor* outputs[] = {&fwd.o, &fwd.lse, &grads.dq, &grads.dk, &grads.dv, &grads.dbias};
  auto same = [&](TensorId t, const TermTensors& tt, const Tensor& ref, const RoundingUnits& u, const char* what) {
    const ModelOfOutput want = model_sigma_and_row_dof(t, tt, ref, u);
    const ModelOfOutput got = cuda_output_model(t, tt, ref, u);
    const std::string where = std::string(to_string(t)) + " " + what;
    ASSERT_EQ(got.sigma.shape, want.sigma.shape) << where;
    ASSERT_EQ(got.row_dof.shape, want.row_dof.shape) << where;
    EXPECT_EQ(std::memcmp(got.sigma.ptr(), want.sigma.ptr(), want.sigma.numel() * sizeof(double)), 0) << where << "\n" << write_case(c);
    EXPECT_EQ(std::memcmp(got.row_dof.ptr(), want.row_dof.ptr(), want.row_dof.numel() * sizeof(double)), 0) << where << "\n" << write_case(c);
    ++cov.outputs;
    cov.rows_with_dof += !want.row_dof.data.empty();
    cov.elementwise += want.row_dof.data.empty();
    cov.dbias += t == TensorId::dBias;
  };
  for (const Contract k : {Contract::fp32, Contract::bf16, Contract::fp16, Contract::tf32})
    for (TensorId t : kOutputs) {
      const Tensor& ref = *outputs[output_index(t)];
      if (ref.data.empty()) continue;
      same(t, terms[t], ref, rounding_units(k, c.dtype, k == Contract::fp32 ? 0x1p-24 : 0x1p-20, k != Contract::fp32), "as judged");
    }
  const RoundingUnits u = rounding_units(Contract::bf16, c.dtype, 0x1p-20, true);
  for (TensorId t : {TensorId::O, TensorId::dK}) {
    Tensor ref = *outputs[output_index(t)];
    const size_t width = static_cast<size_t>(ref.shape.back());
    for (size_t d = 0; d + 1 < width; d += 2) ref.data[d + 1] = ref.data[d];  // row 0: pairs of equal values,
    ref.data[width] = std::nan("");                                            // row 1: NaN twice
    ref.data[width + 1 < ref.numel() ? width + 1 : 0] = std::nan("");
    same(t, terms[t], ref, u, "with repeated values and NaN");
    TermTensors without_sources = terms[t];
    without_sources.operand_sources = Tensor();
    same(t, without_sources, ref, u, "without sources");
  }
}

TEST(GpuErrorModel, GivesTheHostsBitsOnRandomCases) {
  REQUIRE_GPU();
  const RandomCaseOptions opt = small_cases(0.3);
  ModelCoverage cov;
  for (uint64_t i = 0; i < 40; ++i) expect_same_model(random_case(9'400'000 + i, opt), cov);
  Case tied;  // tied keys and values, fp16 (the subnormal part)
  tied.dtype = DType::f16;
  tied.shape = {2, 8, 2, 33, 63, 80, 80};
  tied.d_lse = ValueDist{};
  tied.k = tied.v = ValueDist{ValueDist::Kind::near_constant, 0.1, 0.0};
  expect_same_model(tied, cov);
  std::cout << "  " << cov.outputs << " outputs: " << cov.rows_with_dof << " with row dof, " << cov.elementwise << " element by element, "
            << cov.dbias << " dBias\n";
  EXPECT_GE(cov.dbias, 4) << "the draw must reach dBias";
}

}  // namespace
}  // namespace attnfuzz
