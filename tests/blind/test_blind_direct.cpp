// The held-out zoo, loaded directly through the C ABI (no harness loader, no verdict): the
// correct build matches the float64 reference on every trigger case, and each planted bug
// is off on its trigger case (tests/blind/README.md). Short: one call per build and case.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <ostream>
#include <string>

#include "tests/plugins/plugin_test_util.h"

namespace attnfuzz {
namespace {

using namespace plugin_test;

std::string blind_path(const std::string& name) { return std::string(ATTNFUZZ_BLIND_DIR) + "/libattnfuzz_blind_" + name + ".so"; }

// Agreement with float64 for the declared contract (as tests/mutants/test_mutants_direct.cpp).
double tolerance(DType d) { return d == DType::f32 ? 1e-5 : d == DType::f16 ? 5e-3 : 2e-2; }

// Keys [kv0, Skv) of a whole problem, as a key-split composition calls a backend: its own
// K, V slices, kv_offset = kv0, the whole problem's sequence lengths, the mask re-materialized.
Problem key_part(const Problem& whole, int64_t kv0) {
  Problem p = whole;
  p.shape.seq_kv = whole.shape.seq_kv - kv0;
  p.kv_offset = kv0;
  auto slice = [&](const Tensor& t) {
    const int64_t B = t.shape[0], H = t.shape[1], S = t.shape[2], D = t.shape[3];
    Tensor out({B, H, S - kv0, D});
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t s = kv0; s < S; ++s)
          for (int64_t d = 0; d < D; ++d)
            out.data[static_cast<size_t>(((b * H + h) * (S - kv0) + s - kv0) * D + d)] = t.data[static_cast<size_t>(((b * H + h) * S + s) * D + d)];
    return out;
  };
  p.k = slice(whole.k);
  p.v = slice(whole.v);
  materialize_mask(p);
  return p;
}

// How the case reaches the plugin: the whole problem, or the keys from kv0 on.
struct Trigger {
  std::string name;
  Case c;
  int64_t kv0 = 0;  // > 0: the call is the key part [kv0, Skv)
};

// Signed bias of `got` along `ref`: sum (got - ref) ref / sum ref^2 (a systematic shrink < 0).
double bias(const Tensor& got, const Tensor& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.numel(); ++i)
    if (std::isfinite(ref.data[i])) num += (got.data[i] - ref.data[i]) * ref.data[i], den += ref.data[i] * ref.data[i];
  return den > 0 ? num / den : 0.0;
}

struct Measured {
  Compared cmp;
  double o_bias = 0;
};

Measured run_blind(const std::string& name, const Trigger& t) {
  Measured m;
  auto lib = open_plugin(blind_path(name));
  EXPECT_TRUE(lib->plugin) << blind_path(name) << ": " << lib->error;
  if (!lib->plugin) return m;
  const Inputs in = generate_inputs(t.c);
  const Problem whole = full_problem(t.c, in);
  const Problem p = t.kv0 > 0 ? key_part(whole, t.kv0) : whole;
  m.cmp.run = run_plugin(*lib->plugin, p, in);
  EXPECT_EQ(m.cmp.run.error, "");
  EXPECT_EQ(m.cmp.run.unwritten, 0u);
  EXPECT_EQ(m.cmp.run.padding_touched, 0u);
  if (!m.cmp.run.error.empty()) return m;
  const Forward ref = reference_forward(p);
  const Gradients g = reference_backward(p, ref, in.d_out, in.d_lse);
  m.cmp.err = {rel_error(m.cmp.run.fwd.o, ref.o), rel_error(m.cmp.run.fwd.lse, ref.lse), rel_error(m.cmp.run.grads.dq, g.dq),
               rel_error(m.cmp.run.grads.dk, g.dk), rel_error(m.cmp.run.grads.dv, g.dv)};
  m.o_bias = bias(m.cmp.run.fwd.o, ref.o);
  return m;
}

MaskExpr causal(Align a) { return MaskExpr::causal_mask(a); }

// A bug, its trigger, the tensors it moves there and the ones it leaves alone.
struct Bug {
  std::string name;
  Trigger trigger;
  std::vector<double Errors::*> off, right;
  double min_error = 1e-2;  // "clearly off"; the tiny bugs are judged against `ok` instead
};

const Shape kMha{1, 2, 2, 16, 16, 16, 16};

std::vector<Bug> bugs() {
  using E = Errors;
  const Layouts padded_do = [] {
    Layouts l;
    l[TensorId::dO] = TensorLayout{TensorLayout::Order::bhsd, 3, 0, 0};
    return l;
  }();
  return {
      {"lse_log2", {"plain_fp32", make_case(21, kMha, DType::f32)}, {&E::lse}, {&E::o, &E::dq, &E::dk, &E::dv}},
      {"softcap_no_chain",
       {"softcap_fp32", make_case(22, kMha, DType::f32, {}, false, 2.0)},
       {&E::dq, &E::dk},
       {&E::o, &E::lse, &E::dv}},
      // Skv = 64: two key tiles, and the second raises most rows' maximum.
      {"rescale_skip_acc",
       {"two_key_tiles_fp32", make_case(23, {1, 2, 2, 16, 64, 16, 16}, DType::f32)},
       {&E::o, &E::dq, &E::dk},
       {&E::lse}},
      {"dq_last_qtile", {"sq20_fp32", make_case(24, {1, 2, 2, 20, 16, 16, 16}, DType::f32)}, {&E::dq}, {&E::o, &E::lse, &E::dk, &E::dv}},
      {"dk_no_scale", {"plain_fp32", make_case(25, kMha, DType::f32)}, {&E::dk}, {&E::o, &E::lse, &E::dq, &E::dv}},
      {"dlse_sign", {"dlse_fp32", make_case(26, kMha, DType::f32, {}, true)}, {&E::dq, &E::dk}, {&E::o, &E::lse, &E::dv}},
      {"window_edge",
       {"window_fp32", make_case(27, {1, 2, 2, 33, 33, 16, 16}, DType::f32, MaskExpr::window(5, 2, Align::top_left))},
       {&E::o, &E::lse, &E::dq, &E::dk, &E::dv},
       {}},
      {"gqa_dv_one_head", {"gqa_fp32", make_case(28, {1, 4, 2, 16, 16, 16, 16}, DType::f32)}, {&E::dv}, {&E::o, &E::lse, &E::dq, &E::dk}},
      {"do_row_padding",
       {"padded_do_fp32", make_case(29, kMha, DType::f32, {}, false, std::nullopt, padded_do)},
       {&E::dq, &E::dk, &E::dv},
       {&E::o, &E::lse}},
      // Fully masked rows: bottom-right causal with Sq > Skv; LSE 0 where -inf is due.
      {"masked_lse_zero",
       {"causal_br_sq_gt_skv_fp32", make_case(30, {1, 2, 2, 20, 11, 16, 16}, DType::f32, causal(Align::bottom_right))},
       {&E::lse},
       {&E::o, &E::dq, &E::dk, &E::dv}},
      // The keys from 24 on of a causal problem, as a key split calls the backend.
      {"causal_kv_offset",
       {"causal_key_part_fp32", make_case(31, {1, 2, 2, 40, 40, 16, 16}, DType::f32, causal(Align::top_left)), 24},
       {&E::o, &E::lse, &E::dq, &E::dk, &E::dv},
       {}},
  };
}

void PrintTo(const Bug& b, std::ostream* os) { *os << b.name; }
std::string bug_name(const ::testing::TestParamInfo<Bug>& info) { return info.param.name; }

TEST(BlindZoo, EveryBuildLoads) {
  for (const char* n : {"ok", "lse_log2", "softcap_no_chain", "rescale_skip_acc", "dq_last_qtile", "dk_no_scale", "dlse_sign", "window_edge",
                        "gqa_dv_one_head", "do_row_padding", "l_from_rounded_p", "o_round_toward_zero", "masked_lse_zero",
                        "causal_kv_offset", "dq_acc_uninitialized", "scale_in_dtype"}) {
    auto lib = open_plugin(blind_path(n));
    ASSERT_TRUE(lib->plugin) << n << ": " << lib->error;
    EXPECT_EQ(std::string(lib->plugin->name), std::string("blind_") + n);
    EXPECT_EQ(lib->plugin->flags, AF_BACKWARD_TAKES_DLSE | AF_MASKED_ROWS_ZERO);
  }
}

class BlindBug : public ::testing::TestWithParam<Bug> {};

// The correct build on the bug's trigger: within the contract's agreement everywhere.
TEST_P(BlindBug, OkMatchesOnTheTrigger) {
  const Bug& bug = GetParam();
  const Measured m = run_blind("ok", bug.trigger);
  std::printf("[ measured ] blind_ok  %-26s %s\n", bug.trigger.name.c_str(), m.cmp.err.str().c_str());
  EXPECT_LE(m.cmp.err.max(), tolerance(bug.trigger.c.dtype)) << m.cmp.err.str();
}

TEST_P(BlindBug, IsOffOnItsTrigger) {
  const Bug& bug = GetParam();
  const Measured m = run_blind(bug.name, bug.trigger);
  std::printf("[ measured ] blind_%-20s %-26s %s\n", bug.name.c_str(), bug.trigger.name.c_str(), m.cmp.err.str().c_str());
  for (auto e : bug.off) EXPECT_GT(m.cmp.err.*e, bug.min_error) << m.cmp.err.str();
  for (auto e : bug.right) EXPECT_LE(m.cmp.err.*e, tolerance(bug.trigger.c.dtype)) << m.cmp.err.str();
}
INSTANTIATE_TEST_SUITE_P(Zoo, BlindBug, ::testing::ValuesIn(bugs()), bug_name);

// The two precision bugs (fp16/bf16 only) are too small for a fixed threshold: each is
// measured against `ok` on the same case.
const Trigger kBf16{"plain_bf16", make_case(32, {1, 2, 2, 32, 48, 32, 32}, DType::bf16)};

TEST(BlindZoo, RoundTowardZeroShrinksO) {
  const Measured ok = run_blind("ok", kBf16), bug = run_blind("o_round_toward_zero", kBf16);
  std::printf("[ measured ] O bias along itself: ok %.3g, o_round_toward_zero %.3g; O error ok %.3g, bug %.3g\n", ok.o_bias, bug.o_bias,
              ok.cmp.err.o, bug.cmp.err.o);
  EXPECT_LT(bug.o_bias, -5e-4);                      // every element shrunk: about -2^-9 of O
  EXPECT_LT(std::fabs(ok.o_bias), 1e-4);             // round to nearest: no direction
  EXPECT_GT(bug.cmp.err.o, 1.5 * ok.cmp.err.o);      // and twice the RMS error
  EXPECT_LE(bug.cmp.err.dq, 2 * tolerance(DType::bf16));
}

TEST(BlindZoo, RowSumOfRoundedPMovesLse) {
  const Measured ok = run_blind("ok", kBf16), bug = run_blind("l_from_rounded_p", kBf16);
  std::printf("[ measured ] LSE error: ok %.3g, l_from_rounded_p %.3g; O error ok %.3g, bug %.3g\n", ok.cmp.err.lse, bug.cmp.err.lse,
              ok.cmp.err.o, bug.cmp.err.o);
  EXPECT_GT(bug.cmp.err.lse, 10 * ok.cmp.err.lse);  // l carries bf16 rounding, not fp32
  EXPECT_LE(bug.cmp.err.o, tolerance(DType::bf16));
}

// A bf16 scale: 1/sqrt(80) = 0.11180 held as 0.11182 (2^-12 relative), a softmax temperature
// change the size of one bf16 rounding; D = 64 (scale 1/8, exact in bf16) is the control.
TEST(BlindZoo, ScaleInTheInputDtypeMovesTheLse) {
  const Trigger d80{"d80_bf16", make_case(34, {1, 2, 2, 32, 48, 80, 80}, DType::bf16)};
  const Trigger d64{"d64_bf16", make_case(34, {1, 2, 2, 32, 48, 64, 64}, DType::bf16)};
  const Measured ok = run_blind("ok", d80), bug = run_blind("scale_in_dtype", d80);
  const Measured ok64 = run_blind("ok", d64), bug64 = run_blind("scale_in_dtype", d64);
  std::printf("[ measured ] D = 80: ok %s\n[ measured ]         bug %s\n", ok.cmp.err.str().c_str(), bug.cmp.err.str().c_str());
  EXPECT_GT(bug.cmp.err.lse, 10 * ok.cmp.err.lse);
  EXPECT_LE(bug.cmp.err.o, tolerance(DType::bf16));
  EXPECT_EQ(bug64.cmp.err.str(), ok64.cmp.err.str());  // 1/8 is exact: the same numbers
}

// An unzeroed accumulator shows only when the allocator hands back dirty memory: the second
// of two identical calls gets the first call's freed dQ buffer (glibc reuses a freed block of
// the same size), so dQ comes out about doubled there.
TEST(BlindZoo, UninitializedDqAccumulatorShowsOnAReusedBuffer) {
  const Trigger t{"plain_fp32", make_case(33, kMha, DType::f32)};
  const Measured ok1 = run_blind("ok", t), ok2 = run_blind("ok", t);
  const Measured bug1 = run_blind("dq_acc_uninitialized", t), bug2 = run_blind("dq_acc_uninitialized", t);
  std::printf("[ measured ] dQ error: ok %.3g, %.3g; dq_acc_uninitialized %.3g, %.3g\n", ok1.cmp.err.dq, ok2.cmp.err.dq, bug1.cmp.err.dq,
              bug2.cmp.err.dq);
  EXPECT_LE(std::max(ok1.cmp.err.max(), ok2.cmp.err.max()), tolerance(DType::f32));
  EXPECT_GT(std::max(bug1.cmp.err.dq, bug2.cmp.err.dq), 1e-2);
  EXPECT_LE(std::max({bug2.cmp.err.o, bug2.cmp.err.lse, bug2.cmp.err.dk, bug2.cmp.err.dv}), tolerance(DType::f32));
}

}  // namespace
}  // namespace attnfuzz
