// The score bias (harness/case.h, ScoreBias): the case format, the generated tensors, the float64
// reference against finite differences (dBias included) and against LibTorch's float64 graph, the
// compositions' slices, the envelope's clause, the shrinker, and the verdict on planted bias bugs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <string>

#include "backends/registry.h"
#include "generators/random_case.h"
#include "generators/shrink.h"
#include "harness/case_json.h"
#include "harness/compose.h"
#include "harness/differential.h"
#include "harness/errors.h"
#include "harness/inputs.h"
#include "oracles/emulated.h"
#include "oracles/reference.h"
#include "tests/finite_differences.h"

namespace attnfuzz {
namespace {

Case small_case(uint64_t seed, ScoreBias bias) {
  Case c;
  c.seed = seed;
  c.shape = {2, 4, 2, 9, 13, 8, 6};
  c.dtype = DType::f32;
  c.mask = MaskExpr::causal_mask(Align::bottom_right);
  c.d_lse = ValueDist{};
  c.bias = bias;
  return c;
}

ScoreBias tensor_bias(std::array<bool, 4> spans, double sigma = 1.5) {
  ScoreBias b;
  b.spans = spans;
  b.values.sigma = sigma;
  return b;
}

ScoreBias of_kind(ScoreBias::Kind k) {
  ScoreBias b;
  b.kind = k;
  return b;
}

TEST(Bias, CaseFormatRoundTripsEveryKind) {
  for (const ScoreBias& b : {tensor_bias({true, false, true, false}), tensor_bias({false, false, false, false}),
                             of_kind(ScoreBias::Kind::alibi), of_kind(ScoreBias::Kind::relative)})
    for (bool grad : {false, true}) {
      Case c = small_case(3, b);
      c.bias->requires_grad = grad;
      const Case back = case_from_string(write_case(c));
      EXPECT_EQ(back, c) << write_case(c);
      // requires_grad is written only when set, and changes no input.
      EXPECT_EQ(write_case(c).find("requires_grad") != std::string::npos, grad);
      Case other = c;
      other.bias->requires_grad = !grad;
      EXPECT_EQ(checksum(generate_inputs(c)), checksum(generate_inputs(other)));
    }
  // Without a bias the case is written as before: no "bias" key.
  Case plain = small_case(3, {});
  plain.bias.reset();
  EXPECT_EQ(write_case(plain).find("bias"), std::string::npos);
}

TEST(Bias, BadBiasesAreRefusedWithTheField) {
  const std::string head = R"({"format":"attnfuzz-case/1","seed":1,"shape":{"heads_q":2,"seq_q":4,"head_dim_qk":8},"dtype":"fp16","bias":)";
  auto field_of = [&](const std::string& bias) {
    try {
      case_from_string(head + bias + "}");
    } catch (const CaseError& e) {
      return e.field();
    }
    return std::string("(accepted)");
  };
  EXPECT_EQ(field_of(R"({"kind":"alibi","spans":["q"]})"), "bias.spans");
  EXPECT_EQ(field_of(R"({"kind":"tensor","spans":["time"]})"), "bias.spans");
  EXPECT_EQ(field_of(R"({"kind":"tensor","spans":["q","q"]})"), "bias.spans");
  EXPECT_EQ(field_of(R"({"kind":"conv"})"), "bias.kind");
  EXPECT_EQ(field_of(R"({"kind":"alibi","values":{"dist":"normal"}})"), "bias.values");
  EXPECT_EQ(field_of(R"({"kind":"tensor","values":{"dist":"normal","sigma":1e5}})"), "bias.values");  // over fp16
  EXPECT_EQ(field_of(R"({"kind":"tensor","requires_grad":1})"), "bias.requires_grad");               // a boolean
  EXPECT_EQ(field_of(R"({"kind":"tensor","requires_grad":true})"), "(accepted)");
  EXPECT_EQ(field_of(R"({"kind":"relative"})"), "(accepted)");
}

TEST(Bias, GeneratedTensorsFollowTheirKind) {
  Case c = small_case(7, tensor_bias({false, true, false, true}));
  c.dtype = DType::bf16;
  const Tensor t = generate_bias(c);
  EXPECT_EQ(t.shape, (std::vector<int64_t>{1, 4, 1, 13}));
  for (double x : t.data) EXPECT_EQ(x, round_to(DType::bf16, x));

  c.bias = of_kind(ScoreBias::Kind::relative);
  const Tensor r = generate_bias(c);
  ASSERT_EQ(r.shape, (std::vector<int64_t>{1, 4, 9, 13}));
  for (int64_t h = 0; h < 4; ++h)
    for (int64_t i = 0; i + 1 < 9; ++i)
      for (int64_t j = 0; j + 1 < 13; ++j) EXPECT_EQ(r.at(0, h, i)[j], r.at(0, h, i + 1)[j + 1]);  // a function of j - i

  c.bias = of_kind(ScoreBias::Kind::alibi);
  const Tensor a = generate_bias(c);
  for (int64_t h = 0; h < 4; ++h) {
    const double slope = std::exp2(-8.0 * static_cast<double>(h + 1) / 4.0);
    for (int64_t i = 0; i < 9; ++i)
      for (int64_t j = 0; j < 13; ++j)
        EXPECT_EQ(a.at(0, h, i)[j], round_to(DType::bf16, -slope * static_cast<double>(std::llabs(j - i - (13 - 9)))));
    EXPECT_EQ(a.at(0, h, 8)[12], 0.0);  // the bottom-right diagonal
  }
  // The checksum covers the bias: the same case without it differs.
  Case without = c;
  without.bias.reset();
  EXPECT_NE(checksum(generate_inputs(c)), checksum(generate_inputs(without)));
}

class BiasFiniteDifferences : public ::testing::TestWithParam<uint64_t> {};

// dQ, dK, dV and dBias (dS after the softcap, summed over the broadcast dimensions) against
// central differences of the loss, every kind and broadcast, with softcaps, masks and GQA.
TEST_P(BiasFiniteDifferences, GradientsMatchDbiasIncluded) {
  RandomCaseOptions opt;
  opt.max_seq = 7;
  opt.max_dim = 5;
  opt.p_dlse = 1.0;
  opt.p_softcap = 0.4;
  opt.p_bias = 1.0;
  Case c = random_case(GetParam() * 104729 + 11, opt);
  c.q = c.k = c.v = ValueDist{};
  c.bias->values = ValueDist{};  // smooth region, as for Q, K, V
  c.d_lse = ValueDist{};
  const Inputs in = generate_inputs(c);
  Problem p = full_problem(c, in);
  p.bias_requires_grad = true;
  const Gradients g = reference_backward(p, reference_forward(p), in.d_out, in.d_lse);
  SCOPED_TRACE(write_case(c));
  ASSERT_EQ(g.dbias.shape, p.bias.shape);
  EXPECT_LE(rel_err(finite_difference(p, &Problem::q, in.d_out, in.d_lse), g.dq), 1e-6);
  EXPECT_LE(rel_err(finite_difference(p, &Problem::k, in.d_out, in.d_lse), g.dk), 1e-6);
  EXPECT_LE(rel_err(finite_difference(p, &Problem::v, in.d_out, in.d_lse), g.dv), 1e-6);
  EXPECT_LE(rel_err(finite_difference(p, &Problem::bias, in.d_out, in.d_lse), g.dbias), 1e-6);
}
INSTANTIATE_TEST_SUITE_P(Reference, BiasFiniteDifferences, ::testing::Range<uint64_t>(0, 30));

// The fp64 contract baseline computes what the reference computes, in another order: dBias too.
TEST(Bias, Fp64BaselineAgreesWithTheReference) {
  RandomCaseOptions opt;
  opt.max_seq = 20;
  opt.p_bias = 1.0;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    const Case c = random_case(seed + 500, opt);
    const Inputs in = generate_inputs(c);
    Problem p = full_problem(c, in);
    p.bias_requires_grad = true;
    EmulatedBackend fp64(Contract::fp64, true);
    const Forward fr = reference_forward(p), fe = fp64.forward(p);
    const Gradients gr = reference_backward(p, fr, in.d_out, in.d_lse), ge = fp64.backward(p, fr, in.d_out, in.d_lse);
    SCOPED_TRACE(write_case(c));
    EXPECT_LE(rel_err(fe.o, fr.o), 1e-11);
    EXPECT_LE(rel_err(ge.dq, gr.dq), 1e-10);
    EXPECT_LE(rel_err(ge.dbias, gr.dbias), 1e-10);
  }
}

// A bias constant along the keys (it spans no kv) shifts each row's LSE by itself and moves
// nothing else: softmax is invariant to a constant added to a row.
TEST(Bias, ConstantAlongKeysShiftsOnlyTheLse) {
  Case c = small_case(11, tensor_bias({true, true, true, false}, 3.0));
  c.mask = MaskExpr::all_visible();
  const Inputs in = generate_inputs(c);
  const Problem p = full_problem(c, in);
  Problem plain = p;
  plain.bias = {};
  const Forward f = reference_forward(p), f0 = reference_forward(plain);
  for (size_t e = 0; e < f.o.numel(); ++e) EXPECT_NEAR(f.o.data[e], f0.o.data[e], 1e-13);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t h = 0; h < 4; ++h)
      for (int64_t i = 0; i < 9; ++i) EXPECT_NEAR(*f.lse.at(b, h, i), *f0.lse.at(b, h, i) + p.bias_at(b, h, i, 0), 1e-12);
}

// Every composition cuts the bias with its calls (slice_bias): the merged result is the single
// call's, to float64 rounding.
TEST(Bias, CompositionsCutTheBiasWithTheirCalls) {
  ReferenceBackend ref;
  for (const ScoreBias& b : {tensor_bias({true, true, true, true}), tensor_bias({false, true, false, true}),
                             tensor_bias({true, false, true, false}), of_kind(ScoreBias::Kind::alibi), of_kind(ScoreBias::Kind::relative)}) {
    Case c = small_case(5, b);
    const Inputs in = generate_inputs(c);
    const ComposedResult whole = run_composition(ref, c, in, Composition{});
    Composition kv{Composition::Kind::kv_split, {4, 9}}, q{Composition::Kind::q_split, {3}};
    Composition band{Composition::Kind::mask_partition};
    band.window_left = 2;
    band.window_right = 0;
    for (const Composition& comp : {kv, q, band}) {
      const ComposedResult r = run_composition(ref, c, in, comp);
      SCOPED_TRACE(describe(comp) + " " + write_case(c));
      EXPECT_LE(rel_err(r.fwd.o, whole.fwd.o), 1e-12);
      EXPECT_LE(rel_err(r.grads.dq, whole.grads.dq), 1e-12);
      EXPECT_LE(rel_err(r.grads.dk, whole.grads.dk), 1e-12);
    }
    // dBias: each call's added back at its rows and keys, summed where the bias broadcasts.
    c.bias->requires_grad = true;
    const ComposedResult whole_db = run_composition(ref, c, in, Composition{});
    ASSERT_EQ(whole_db.grads.dbias.shape, c.bias->tensor_shape(c.shape));
    for (const Composition& comp : {kv, q, band, Composition{Composition::Kind::q_split, {5}, 0, 0, Align::top_left, {kv}}}) {
      const ComposedResult r = run_composition(ref, c, in, comp);
      SCOPED_TRACE("dBias " + describe(comp) + " " + write_case(c));
      EXPECT_LE(rel_err(r.grads.dbias, whole_db.grads.dbias), 1e-12);
    }
  }
}

// Rows of P sum to 1 and D_i = sum_j P_ij dP_ij, so the sum of dS over a row's keys is dLSE_i:
// a bias with no key dimension has dBias = the sum of dLSE over its broadcast rows (0 without
// one), however large its terms.
TEST(Bias, DbiasOverKeysIsTheDlseSum) {
  Case c = small_case(21, tensor_bias({true, true, true, false}));
  c.mask = MaskExpr::all_visible();
  c.bias->requires_grad = true;
  const Inputs in = generate_inputs(c);
  ReferenceBackend ref;
  const ComposedResult r = run_composition(ref, c, in, Composition{});
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t h = 0; h < 4; ++h)
      for (int64_t i = 0; i < 9; ++i) EXPECT_NEAR(*r.grads.dbias.at(b, h, i), *in.d_lse.at(b, h, i), 1e-12);
}

// A backend that ignores dLSE cannot have dLSE's term added to dBias (it needs P): it declines
// such a case, and runs it without a dLSE.
TEST(Bias, DbiasWithDlseIsDeclinedByABackendThatIgnoresDlse) {
  std::unique_ptr<Backend> sdpa;
  try {
    sdpa = make_backend("torch.sdpa.math");
  } catch (const std::exception& e) {
    GTEST_SKIP() << e.what();
  }
  ASSERT_FALSE(sdpa->backward_takes_dlse());
  EXPECT_FALSE(sdpa->envelope().dlse);
  Case c = small_case(23, tensor_bias({false, true, true, true}));
  c.bias->requires_grad = true;
  try {
    run_composition(*sdpa, c, generate_inputs(c));
    ADD_FAILURE() << "ran a case with dBias and a dLSE";
  } catch (const UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("dLSE"), std::string::npos) << e.what();
  }
  c.d_lse = ValueDist{ValueDist::Kind::zero};
  const ComposedResult r = run_composition(*sdpa, c, generate_inputs(c));
  EXPECT_EQ(r.grads.dbias.shape, c.bias->tensor_shape(c.shape));
}

// The bias_grad clause: refused unless taken, always enforced, also by the composition engine
// (a backend that takes a bias but would leave dBias unwritten never gets such a call).
TEST(Bias, DbiasClauseRefusesUnlessTaken) {
  Case c = small_case(1, tensor_bias({true, true, true, true}));
  c.bias->requires_grad = true;
  const Problem p = full_problem(c, generate_inputs(c));
  ASSERT_TRUE(p.bias_requires_grad);
  SupportEnvelope e;
  e.bias = true;
  e.library_decides = SupportEnvelope::library_decides_all_but({});
  EXPECT_EQ(e.refusal(p).value_or(""), "a bias that requires a gradient (returns no dBias)");
  e.bias_grad = true;
  EXPECT_FALSE(e.refusal(p).has_value());
  const auto j = nlohmann::json::parse(R"({"bias": true, "bias_grad": true})");
  const SupportEnvelope declared = declared_envelope(&j, {DType::f32});
  EXPECT_TRUE(declared.bias_grad);
  EXPECT_FALSE(declared.decided_by_library(EnvelopeClause::bias_grad));
  EXPECT_EQ(envelope_from_json(to_json(declared)), declared);
  std::unique_ptr<Backend> flash;
  try {
    flash = make_backend("torch.sdpa.cpu_flash");
  } catch (const std::exception& ex) {
    GTEST_SKIP() << ex.what();
  }
  c.shape.head_dim_v = c.shape.head_dim_qk;
  c.d_lse = ValueDist{ValueDist::Kind::zero};
  try {
    run_composition(*flash, c, generate_inputs(c));
    ADD_FAILURE() << "torch.sdpa.cpu_flash ran a case that asks dBias";
  } catch (const UnsupportedError& ex) {
    EXPECT_NE(std::string(ex.what()).find("dBias"), std::string::npos) << ex.what();
  }
}

TEST(Bias, EnvelopeClauseRefusesUnlessTaken) {
  const Case c = small_case(1, tensor_bias({true, true, true, true}));
  const Inputs in = generate_inputs(c);
  const Problem p = full_problem(c, in);
  SupportEnvelope e;
  EXPECT_EQ(e.refusal(p).value_or(""), "a score bias (takes none)");
  // A library that decides every clause still cannot take a bias it is never handed.
  e.library_decides = SupportEnvelope::library_decides_all_but({});
  EXPECT_TRUE(e.refusal(p).has_value());
  e.bias = true;
  EXPECT_FALSE(e.refusal(p).has_value());
  // Declared envelopes (plugins, Python adapters): "bias": true, and the clause stays enforced.
  const auto j = nlohmann::json::parse(R"({"bias": true})");
  const SupportEnvelope declared = declared_envelope(&j, {DType::f32});
  EXPECT_TRUE(declared.bias);
  EXPECT_FALSE(declared.decided_by_library(EnvelopeClause::bias));
  EXPECT_TRUE(declared_envelope(nullptr, {DType::f32}).refusal(p).has_value());
}

TEST(Bias, ShrinkerOffersLessBias) {
  Case c = small_case(1, of_kind(ScoreBias::Kind::relative));
  c.bias->values.sigma = 4;
  bool none = false, tensor = false, plain = false;
  for (const Case& x : shrink_candidates(c)) {
    none = none || !x.bias;
    tensor = tensor || (x.bias && x.bias->kind == ScoreBias::Kind::tensor);
    plain = plain || (x.bias && x.bias->kind == ScoreBias::Kind::relative && x.bias->values == ValueDist{});
  }
  EXPECT_TRUE(none);
  EXPECT_TRUE(tensor);
  EXPECT_TRUE(plain);
}

// LibTorch's float64 graph (torch.f64: scores + bias, broadcast by LibTorch) against the
// reference, every kind and broadcast: an implementation of the bias independent of ours.
TEST(Bias, LibTorchFloat64AgreesWithTheReference) {
  std::unique_ptr<Backend> f64;
  try {
    f64 = make_backend("torch.f64");
  } catch (const std::exception& e) {
    GTEST_SKIP() << e.what();
  }
  RandomCaseOptions opt;
  opt.max_seq = 24;
  opt.p_bias = 1.0;
  for (uint64_t seed = 0; seed < 30; ++seed) {
    const Case c = random_case(seed + 900, opt);
    const Inputs in = generate_inputs(c);
    ReferenceBackend ref;
    const ComposedResult a = run_composition(ref, c, in, Composition{}), b = run_composition(*f64, c, in, Composition{});
    SCOPED_TRACE(write_case(c));
    EXPECT_LE(rel_err(b.fwd.o, a.fwd.o), 1e-11);
    EXPECT_LE(rel_err(b.grads.dq, a.grads.dq), 1e-10);
    EXPECT_LE(rel_err(b.grads.dk, a.grads.dk), 1e-10);
    EXPECT_LE(rel_err(b.grads.dv, a.grads.dv), 1e-10);
    if (c.bias->requires_grad) {
      EXPECT_LE(rel_err(b.grads.dbias, a.grads.dbias), 1e-10);
    }
  }
}

// A backend with a bias bug, around a correct one (torch.math): the bias left out, multiplied by
// the softmax scale (applied before scaling instead of after), with its query and key axes
// swapped, or added before the softcap.
enum class BiasBug { none, ignored, scaled, transposed, before_softcap, dbias_scaled, dbias_tail_dropped };

class BuggyBias final : public Backend {
 public:
  BuggyBias(std::unique_ptr<Backend> inner, BiasBug bug) : inner_(std::move(inner)), bug_(bug) {}
  std::string name() const override { return inner_->name(); }
  std::optional<Contract> contract(DType d) const override { return inner_->contract(d); }
  SupportEnvelope envelope() const override { return inner_->envelope(); }
  HostScores host_scores() const override { return inner_->host_scores(); }
  Forward forward(const Problem& p) override { return inner_->forward(planted(p)); }
  Gradients backward(const Problem& p, const Forward& f, const Tensor& d_out, const Tensor& d_lse) override {
    Gradients g = inner_->backward(planted(p), f, d_out, d_lse);
    if (!p.bias_requires_grad) return g;
    switch (bug_) {
      case BiasBug::dbias_scaled:  // a 2% error in dBias alone
        for (double& x : g.dbias.data) x *= 1.02;
        break;
      case BiasBug::dbias_tail_dropped: {  // the last keys' dBias never written (a kernel's last key tile)
        const int64_t width = g.dbias.shape[3];
        for (size_t e = 0; e < g.dbias.numel(); ++e)
          if (static_cast<int64_t>(e % static_cast<size_t>(width)) >= width - 4) g.dbias.data[e] = 0;
        break;
      }
      default:
        break;
    }
    return g;
  }

 private:

  Problem planted(const Problem& p) const {
    Problem x = p;
    switch (bug_) {
      case BiasBug::none:
      case BiasBug::dbias_scaled:
      case BiasBug::dbias_tail_dropped:
        break;
      case BiasBug::ignored:
        for (double& b : x.bias.data) b = 0;
        break;
      case BiasBug::scaled:
        for (double& b : x.bias.data) b *= p.scale;
        break;
      case BiasBug::transposed: {  // a square call: bias[i][j] read as bias[j][i]
        const auto& n = p.bias.shape;
        for (int64_t bh = 0; bh < n[0] * n[1]; ++bh)
          for (int64_t i = 0; i < n[2]; ++i)
            for (int64_t j = 0; j < n[3]; ++j)
              x.bias.data[static_cast<size_t>((bh * n[2] + i) * n[3] + j)] = p.bias.data[static_cast<size_t>((bh * n[2] + j) * n[3] + i)];
        break;
      }
      case BiasBug::before_softcap: {  // softcap(S + b) - softcap(S), folded into the bias the inner backend adds after its cap
        const double c = *p.softcap;
        const Shape& s = p.shape;
        x.bias = Tensor({s.batch, s.heads_q, s.seq_q, s.seq_kv});
        for (int64_t b = 0; b < s.batch; ++b)
          for (int64_t h = 0; h < s.heads_q; ++h)
            for (int64_t i = 0; i < s.seq_q; ++i)
              for (int64_t j = 0; j < s.seq_kv; ++j) {
                double dot = 0;
                for (int64_t d = 0; d < s.head_dim_qk; ++d) dot += p.q.at(b, h, i)[d] * p.k.at(b, h / s.group(), j)[d];
                const double sc = p.scale * dot, bias = p.bias_at(b, h, i, j);
                x.bias.at(b, h, i)[j] = c * std::tanh((sc + bias) / c) - c * std::tanh(sc / c);
              }
        break;
      }
    }
    return x;
  }
  std::unique_ptr<Backend> inner_;
  BiasBug bug_;
};

TEST(Bias, PlantedBiasBugsAreFlaggedAndTheCorrectBackendIsNot) {
  std::unique_ptr<Backend> probe;
  try {
    probe = make_backend("torch.math");
  } catch (const std::exception& e) {
    GTEST_SKIP() << e.what();
  }
  struct Row {
    BiasBug bug;
    const char* name;
    int flagged = 0, cases = 0;
  };
  Row rows[] = {{BiasBug::none, "none"},
                {BiasBug::ignored, "ignored"},
                {BiasBug::scaled, "scaled"},
                {BiasBug::transposed, "transposed"},
                {BiasBug::before_softcap, "before_softcap"},
                {BiasBug::dbias_scaled, "dbias_scaled"},
                {BiasBug::dbias_tail_dropped, "dbias_tail_dropped"}};
  for (uint64_t seed = 0; seed < 12; ++seed)
    for (DType dtype : {DType::bf16, DType::f16, DType::f32}) {
      Case c = small_case(seed + 40, tensor_bias({seed % 2 == 0, true, true, true}, 2.0));
      c.bias->requires_grad = true;  // dBias judged too: the dBias bugs are flagged there, the others anywhere
      c.shape = {1, 2, 2, 16, 16, 16, 16};
      c.dtype = dtype;
      c.softcap = 5.0;
      for (Row& r : rows) {
        BuggyBias be(make_backend("torch.math"), r.bug);
        DiffOptions opt;
        opt.check_determinism = false;
        const DiffReport rep = run_differential(c, {&be}, default_oracles(), opt);
        ++r.cases;
        r.flagged += !rep.findings.empty();
      }
    }
  for (const Row& r : rows) {
    std::printf("bias bug %-15s flagged in %d of %d cases\n", r.name, r.flagged, r.cases);
    SCOPED_TRACE(r.name);
    if (r.bug == BiasBug::none)
      EXPECT_EQ(r.flagged, 0);
    else
      EXPECT_EQ(r.flagged, r.cases);
  }
}

}  // namespace
}  // namespace attnfuzz
