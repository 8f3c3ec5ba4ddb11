// Support envelopes (harness/envelope.h) and the cases aimed at them
// (generators/envelope_cases.h): one declaration, read by the backends' refusals and by the
// generators, and the two agree.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "campaign/coverage.h"
#include "generators/envelope_cases.h"
#include "generators/mutate.h"
#include "harness/differential.h"
#include "harness/feature_cell.h"
#include "harness/backend.h"
#include "harness/case_json.h"
#include "harness/compose.h"
#include "harness/inputs.h"
#include "backends/registry.h"

namespace attnfuzz {
namespace {

// Records, for every call a composition makes, the first clause of `e` the call breaks.
class ClauseProbe final : public Backend {
 public:
  explicit ClauseProbe(SupportEnvelope e) : e_(std::move(e)) {}
  std::string name() const override { return "clause-probe"; }
  SupportEnvelope envelope() const override { return e_; }
  std::optional<std::string> unsupported_reason(const Problem&) const override { return std::nullopt; }
  Forward forward(const Problem& p) override {
    broken.push_back(e_.broken_clause(p));
    const Shape& s = p.shape;
    return Forward{Tensor({s.batch, s.heads_q, s.seq_q, s.head_dim_v}), Tensor({s.batch, s.heads_q, s.seq_q})};
  }
  Gradients backward(const Problem& p, const Forward&, const Tensor&, const Tensor&) override {
    return Gradients{Tensor(p.q.shape), Tensor(p.k.shape), Tensor(p.v.shape)};
  }
  std::vector<std::optional<EnvelopeClause>> broken;

 private:
  SupportEnvelope e_;
};

// The first clause each call of the case breaks: its single call, then every call of its composition.
std::vector<std::optional<EnvelopeClause>> broken_in_calls(const Case& c, const SupportEnvelope& e) {
  const Inputs in = generate_inputs(c);
  ClauseProbe probe(e);
  probe.broken.push_back(e.broken_clause(full_problem(c, in)));
  run_composition(probe, c, in);
  return probe.broken;
}

// Envelopes that restrict every clause a case can break, alone and together, in the shapes the
// project's backends declare (backends/flash_backends.cpp, backends/cudnn_sdpa.cpp, backends/torch_sdpa_cuda.cpp).
std::map<std::string, SupportEnvelope> sample_envelopes() {
  std::map<std::string, SupportEnvelope> out;
  SupportEnvelope flash;
  flash.dtypes = {DType::f16, DType::bf16};
  flash.max_head_dim = 128;
  flash.max_batch_heads = 65535;
  out["flash-kernel"] = flash;
  SupportEnvelope cudnn = flash;
  cudnn.head_dim_multiple = 8;
  cudnn.min_seq_kv = 2;
  cudnn.softcap = false;
  cudnn.alignment_bytes = 16;
  cudnn.packed_lse = true;
  cudnn.library_decides = SupportEnvelope::library_decides_all_but({EnvelopeClause::dtype, EnvelopeClause::alignment});
  out["cudnn"] = cudnn;
  SupportEnvelope torch_flash = cudnn;
  torch_flash.min_seq_kv = 1;
  torch_flash.packed_lse = false;
  torch_flash.distinct_head_dims = false;
  torch_flash.masks = MaskSupport::causal_or_none;
  out["torch-flash"] = torch_flash;
  SupportEnvelope efficient = cudnn;
  efficient.dtypes = {DType::f32, DType::f16, DType::bf16};
  efficient.grouped_heads = false;
  efficient.packed_lse = false;
  efficient.min_seq_kv = 1;
  out["efficient"] = efficient;
  // The varlen interfaces (backends/torch_varlen_cuda.cpp, backends/cudnn_varlen.cpp): ragged
  // batches, the mask read per sequence.
  SupportEnvelope varlen = torch_flash;
  varlen.ragged = true;
  out["varlen"] = varlen;
  return out;
}

RandomCaseOptions small_tier() {
  RandomCaseOptions o = RandomCaseOptions::for_tier(domain::SizeTier::small);
  o.max_seq = 40;  // keeps 200 cases per envelope fast
  return o;
}

// The small tier's mix aimed inside `e` alone, nothing put outside.
CaseMix inside_mix(const std::string& name, const SupportEnvelope& e) {
  CaseMix mix;
  mix.gen = small_tier();
  mix.targets = {{name, e, true}};
  mix.edge_share = 0.0;
  if (e.ragged) mix.gen.p_ragged = 0.5;
  return mix;
}

// A valid case, every call of it inside `e`.
void expect_inside(const Case& c, const SupportEnvelope& e, const std::string& what) {
  ASSERT_NO_THROW(validate(c)) << what;
  const auto broken = broken_in_calls(c, e);
  for (size_t i = 0; i < broken.size(); ++i)
    ASSERT_FALSE(broken[i].has_value()) << what << ", call " << i << " breaks " << clause_name(*broken[i]);
}

TEST(Envelope, FittedCasesAreInsideInEveryCall) {
  for (const auto& [name, e] : sample_envelopes()) {
    const CaseMix mix = inside_mix(name, e);
    for (uint64_t g = 0; g < 200; ++g) {
      const AimedCase a = aimed_campaign_case(17, g, mix);
      ASSERT_EQ(a.aim, CaseAim::inside);
      ASSERT_EQ(a.target, name);
      expect_inside(a.c, e, name + " case " + std::to_string(g));
    }
  }
}

// A case aimed at a varlen envelope keeps its ragged batch, with a mask each sequence reads as
// none or causal aligned bottom-right (the mask clause of a ragged call).
TEST(Envelope, CasesAimedAtAVarlenEnvelopeStayRagged) {
  const SupportEnvelope e = sample_envelopes().at("varlen");
  const CaseMix mix = inside_mix("varlen", e);
  int ragged = 0, causal = 0;
  for (uint64_t g = 0; g < 200; ++g) {
    const Case c = aimed_campaign_case(23, g, mix).c;
    if (!c.ragged) continue;
    ++ragged;
    causal += c.mask.kind == MaskExpr::Kind::causal;
    const Problem p = full_problem(c, generate_inputs(c));
    EXPECT_FALSE(e.breach(p, EnvelopeClause::mask)) << write_case(c);
  }
  EXPECT_GT(ragged, 60);
  EXPECT_GT(causal, 10);
  // Top-left causal over a short sequence is outside, with the per-sequence reason.
  Case c = aimed_campaign_case(23, 0, mix).c;
  c.shape.seq_q = c.shape.seq_kv = 6;
  c.ragged = Ragged{};
  c.ragged->lens_q = std::vector<int64_t>(c.shape.batch, 3);
  c.ragged->lens_kv = std::vector<int64_t>(c.shape.batch, 5);
  c.mask = MaskExpr::causal_mask(Align::top_left);
  c.composition = Composition{};
  conform_ragged(c);
  const auto why = e.breach(full_problem(c, generate_inputs(c)), EnvelopeClause::mask);
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("bottom-right in every sequence"), std::string::npos) << *why;
  c.mask = MaskExpr::causal_mask(Align::bottom_right);
  EXPECT_FALSE(e.breach(full_problem(c, generate_inputs(c)), EnvelopeClause::mask));
}

// A ragged batch is all visible inside each sequence's block, but a backend that takes it padded
// (its lengths only in the dense mask) must see the padding masked: the padded extent reads the
// whole call, and says neither unless every sequence has the padded lengths.
TEST(Envelope, MaskShapeOfTheWholePaddedCallSeesARaggedBatchsPadding) {
  Case c;
  c.shape = Shape{2, 2, 1, 6, 6, 8, 8};
  c.ragged = Ragged{};
  c.ragged->lens_q = {6, 3};
  c.ragged->lens_kv = {6, 5};
  conform_ragged(c);
  const Problem ragged = full_problem(c, generate_inputs(c));
  EXPECT_TRUE(mask_shape(ragged, Align::top_left).all);
  const MaskShape padded = mask_shape(ragged, Align::top_left, MaskExtent::padded);
  EXPECT_FALSE(padded.all);
  EXPECT_FALSE(padded.causal);
  c.ragged->lens_q = {6, 6};
  c.ragged->lens_kv = {6, 6};
  const Problem full = full_problem(c, generate_inputs(c));
  EXPECT_TRUE(mask_shape(full, Align::top_left, MaskExtent::padded).all);
  c.mask = MaskExpr::causal_mask(Align::top_left);
  EXPECT_TRUE(mask_shape(full_problem(c, generate_inputs(c)), Align::top_left, MaskExtent::padded).causal);
}

// A guided campaign's mutants (generators/mutate.h) stay valid and inside the envelope they are
// meant for, in every call, and follow from the parent and the seed alone.
TEST(Envelope, MutantsAreValidAndInsideInEveryCall) {
  for (const auto& [name, e] : sample_envelopes()) {
    const CaseMix mix = inside_mix(name, e);
    int changed = 0;
    for (uint64_t g = 0; g < 150; ++g) {
      const Case parent = aimed_campaign_case(23, g, mix).c;
      const std::optional<Case> m = mutate_case(parent, g, e, mix);
      if (!m) continue;
      ++changed;
      ASSERT_NE(*m, parent);
      ASSERT_EQ(*m, *mutate_case(parent, g, e, mix)) << "mutant of case " << g << " is not a function of its seed";
      expect_inside(*m, e, name + " mutant of case " + std::to_string(g));
    }
    EXPECT_GT(changed, 140) << name << ": most parents have a mutant";
  }
}

// The feature map's outside cells (harness/feature_cell.h, cell_outside) against the calls
// themselves: a blind case's single call or composition that is inside in every call never falls
// in a cell called outside. Four envelopes x 600 blind cases of the small tier.
TEST(Envelope, NoCompositionInsideFallsInACellCalledOutside) {
  RandomCaseOptions opt = small_tier();
  int inside_single = 0, inside_composed = 0;
  for (uint64_t g = 0; g < 600; ++g) {
    const Case c = random_case(g, opt);
    for (const auto& [name, e] : sample_envelopes()) {
      const auto broken = broken_in_calls(c, e);
      if (!broken[0]) {
        ++inside_single;
        EXPECT_EQ(cell_outside(e, true, feature_cell(c, CompositionClass::single)), std::nullopt) << name << " case " << g;
      }
      const bool composed = !(c.composition == Composition{});
      if (composed && std::none_of(broken.begin() + 1, broken.end(), [](const auto& b) { return b.has_value(); })) {
        ++inside_composed;
        EXPECT_EQ(cell_outside(e, true, feature_cell(c, composition_class(c.composition))), std::nullopt) << name << " case " << g;
      }
    }
  }
  EXPECT_GT(inside_single, 100);
  EXPECT_GT(inside_composed, 50);
}

// Steering's builder (generators/envelope_cases.h, case_in_cell) reaches every cell that is not
// outside an envelope, at the small tier's lengths: the case lands in the cell, is valid, and
// every call of the cell's composition is inside (its single call too, but for the tall causal
// split of an envelope that takes causal only on square calls).
TEST(Envelope, EveryCellNotOutsideGetsACaseInsideThroughItsComposition) {
  for (const auto& [name, e] : sample_envelopes()) {
    const CaseMix mix = inside_mix(name, e);
    int cells = 0;
    for (const FeatureCell& cell : all_feature_cells()) {
      const std::string what = name + " " + to_string(cell);
      if (cell_outside(e, true, cell)) {
        EXPECT_EQ(case_in_cell(aimed_campaign_case(5, 0, mix).c, cell, e, mix, 1), std::nullopt) << what;
        continue;
      }
      ++cells;
      int built = 0;
      for (uint64_t g = 0; g < 6; ++g) {
        const Case drawn = aimed_campaign_case(29, g, mix).c;
        const std::optional<Case> c = case_in_cell(drawn, cell, e, mix, g);
        if (!c) continue;
        ++built;
        ASSERT_EQ(*c, *case_in_cell(drawn, cell, e, mix, g)) << what << ": not a function of its seed";
        ASSERT_NO_THROW(validate(*c)) << what;
        ASSERT_EQ(feature_cell(*c, composition_class(c->composition)), cell) << what;
        const auto broken = broken_in_calls(*c, e);
        for (size_t i = 1; i < broken.size(); ++i)
          ASSERT_FALSE(broken[i].has_value()) << what << ", call " << i << " breaks " << clause_name(*broken[i]);
        const bool tall_causal_split =
            e.masks == MaskSupport::causal_or_none && cell.mask == MaskClass::causal && cell.composition != CompositionClass::single;
        if (tall_causal_split) {
          ASSERT_GT(c->shape.seq_q, c->shape.seq_kv) << what;
        } else {
          ASSERT_FALSE(broken[0].has_value()) << what << ": the single call breaks " << clause_name(*broken[0]);
        }
      }
      EXPECT_GE(built, 4) << what << ": built " << built << " of 6";
    }
    EXPECT_GE(cells, 24) << name;
  }
}

TEST(Envelope, EdgeCasesBreakTheAimedClauseFirst) {
  for (const auto& [name, e] : sample_envelopes()) {
    CaseMix mix;
    mix.gen = small_tier();
    mix.targets = {{name, e, true}};
    mix.edge_share = 1.0;
    std::map<std::string, int> aimed, hit;
    const bool edges = !breakable_clauses(e).empty();
    for (uint64_t g = 0; g < 200; ++g) {
      const AimedCase a = aimed_campaign_case(23, g, mix);
      // An envelope that enforces every clause gets no edge: nothing but its own refusal would see it.
      ASSERT_EQ(a.aim, edges ? CaseAim::edge : CaseAim::inside) << name;
      if (!edges) continue;
      ASSERT_TRUE(a.outside.has_value());
      ASSERT_NO_THROW(validate(a.c)) << name << " case " << g;
      const auto broken = e.broken_clause(full_problem(a.c, generate_inputs(a.c)));
      ++aimed[clause_name(*a.outside)];
      // Never an earlier clause than the aimed one; the aimed one itself nearly always (a random
      // mask on a tiny shape can come out causal).
      if (broken) {
        ASSERT_GE(static_cast<int>(*broken), static_cast<int>(*a.outside)) << name << " case " << g;
      }
      if (broken == a.outside) ++hit[clause_name(*a.outside)];
    }
    for (EnvelopeClause c : breakable_clauses(e)) {
      const std::string n = clause_name(c);
      EXPECT_GE(aimed[n], 10) << name << ": clause " << n << " aimed at too rarely";
      EXPECT_GE(hit[n], aimed[n] * 9 / 10) << name << ": clause " << n << " broken in " << hit[n] << " of " << aimed[n];
    }
  }
}

TEST(Envelope, MixSharesTheStreamAndKeepsTheEdgeShare) {
  const auto envs = sample_envelopes();
  CaseMix mix;
  mix.gen = small_tier();
  for (const auto& [name, e] : envs) mix.targets.push_back({name, e, true});
  std::map<std::string, int> per_target;
  int edges = 0;
  const int n = 2000;
  for (uint64_t g = 0; g < static_cast<uint64_t>(n); ++g) {
    const AimedCase a = aimed_campaign_case(5, g, mix);
    ++per_target[a.target];
    edges += a.aim == CaseAim::edge;
  }
  int with_edges = 0;
  for (const auto& [name, e] : envs) {
    EXPECT_EQ(per_target[name], n / static_cast<int>(envs.size())) << name;
    with_edges += !breakable_clauses(e).empty();
  }
  EXPECT_NEAR(static_cast<double>(edges) / n, kDefaultEdgeShare * with_edges / static_cast<double>(envs.size()), 0.025);
}

TEST(Envelope, BlindStreamIsTheRandomStream) {
  CaseMix mix;
  mix.gen = small_tier();
  for (uint64_t g = 0; g < 300; ++g) {
    const AimedCase a = aimed_campaign_case(9, g, mix);
    EXPECT_EQ(a.aim, CaseAim::blind);
    EXPECT_TRUE(a.c == campaign_case(9, g, mix.gen)) << g;
  }
}

TEST(Envelope, BudgetShrinksBatchAndHeadsOnly) {
  Case c;
  c.shape = {2, 16, 4, 4096, 4096, 128, 128};
  c.dtype = DType::bf16;
  ASSERT_GT(estimate_host_bytes(c), uint64_t{8} << 30);
  const Case fitted = fit_budget(c, uint64_t{8} << 30);
  EXPECT_LE(estimate_host_bytes(fitted), uint64_t{8} << 30);
  EXPECT_EQ(fitted.shape.seq_q, 4096);
  EXPECT_EQ(fitted.shape.group(), 4);
  EXPECT_NO_THROW(validate(fitted));
}

// Issue 26, item 10: a GPU campaign's real tier is judged by the GPU oracle set, so the CPU set's
// per-head matrices and LibTorch's CPU graphs never shrink it; what its workers keep on the host
// (the float64 tensors, the masks) still does.
TEST(Envelope, TheBudgetCountsOnlyTheHostWorkOfTheCase) {
  Case c;
  c.shape = {1, 16, 4, 4096, 4096, 128, 128};
  c.dtype = DType::bf16;
  const HostWorkOf on_gpu = [](const Shape&) { return HostWork::least(); };
  ASSERT_LE(estimate_host_bytes(c, HostWork::least()), uint64_t{8} << 30);
  EXPECT_EQ(fit_budget(c, uint64_t{8} << 30, on_gpu).shape, c.shape);
  EXPECT_NE(fit_budget(c, uint64_t{8} << 30).shape, c.shape);  // everything on the host: it shrinks
  // The work may depend on the shape (the CPU set below kGpuOracleMinWork): asked for each one tried.
  std::vector<Shape> asked;
  const HostWorkOf recording = [&asked](const Shape& s) {
    asked.push_back(s);
    return HostWork{};
  };
  const Case fitted = fit_budget(c, uint64_t{8} << 30, recording);
  ASSERT_GE(asked.size(), 2u);
  EXPECT_EQ(asked.front(), c.shape);
  EXPECT_EQ(asked.back(), fitted.shape);
}

TEST(Envelope, RefusalNamesTheEnforcedClauseOnly) {
  Case c;
  c.shape = {1, 4, 2, 8, 8, 12, 12};
  c.dtype = DType::f16;
  const Problem p = full_problem(c, generate_inputs(c));
  SupportEnvelope e;
  e.head_dim_multiple = 8;   // broken: 12
  e.grouped_heads = false;   // broken: 4 != 2
  e.alignment_bytes = 16;    // broken: 24-byte rows
  EXPECT_EQ(e.broken_clause(p), EnvelopeClause::head_dim);
  ASSERT_TRUE(e.refusal(p).has_value());
  EXPECT_EQ(e.refusal(p)->rfind("head dims", 0), 0u) << *e.refusal(p);
  e.library_decides = SupportEnvelope::bit(EnvelopeClause::head_dim) | SupportEnvelope::bit(EnvelopeClause::gqa);
  EXPECT_EQ(e.broken_clause(p), EnvelopeClause::head_dim);
  ASSERT_TRUE(e.refusal(p).has_value());
  EXPECT_EQ(e.refusal(p)->rfind("alignment: ", 0), 0u) << *e.refusal(p);
  e.library_decides = SupportEnvelope::library_decides_all_but({});
  EXPECT_FALSE(e.refusal(p).has_value());
}

TEST(Envelope, JsonRoundTrip) {
  for (const auto& [name, e] : sample_envelopes()) {
    const SupportEnvelope back = envelope_from_json(to_json(e));
    EXPECT_TRUE(back == e) << name << ": " << to_json(e).dump();
    EXPECT_FALSE(describe(e).empty());
  }
  nlohmann::json bad = to_json(SupportEnvelope{});
  bad["library_decides"] = {"nonsense"};
  EXPECT_THROW(envelope_from_json(bad), std::invalid_argument);
  bad = to_json(SupportEnvelope{});
  bad["head_dim_multiple"] = 0;
  EXPECT_THROW(envelope_from_json(bad), std::invalid_argument);
}

// The case mix survives summary.json and a --resume: counted per target, merged by add.
TEST(Envelope, CaseMixCountsRoundTripAndMerge) {
  auto one = [](const std::string& target, CaseAim aim, std::optional<EnvelopeClause> clause, bool ran) {
    Coverage c;
    c.add_case({{target, CompositionClass::single, ran ? Outcome::ran : Outcome::skipped, ran ? "" : "declined"}});
    AimedCase a;
    a.target = aim == CaseAim::blind ? "" : target;
    a.aim = aim;
    a.outside = clause;
    c.add_aim(a);
    return c;
  };
  Coverage total;
  total.add(one("torch.flash", CaseAim::inside, std::nullopt, true));
  total.add(one("torch.flash", CaseAim::inside, std::nullopt, false));
  total.add(one("torch.flash", CaseAim::edge, EnvelopeClause::alignment, true));
  total.add(one("cudnn", CaseAim::edge, EnvelopeClause::head_dim, false));
  total.add(one("cudnn", CaseAim::blind, std::nullopt, true));
  const Coverage back = Coverage::from_json(total.to_json());
  const Coverage* both[] = {&total, &back};
  for (const Coverage* c : both) {
    ASSERT_EQ(c->aims().size(), 2u);
    const AimCounts& f = c->aims().at("torch.flash");
    EXPECT_EQ(f.inside, 2u);
    EXPECT_EQ(f.inside_ran, 1u);
    EXPECT_EQ(f.edge, 1u);
    EXPECT_EQ(f.edge_ran, 1u);
    EXPECT_EQ(f.edge_by_clause.at("alignment"), 1u);
    const AimCounts& d = c->aims().at("cudnn");
    EXPECT_EQ(d.edge, 1u);
    EXPECT_EQ(d.edge_ran, 0u);
    EXPECT_EQ(c->blind_cases(), 1u);
  }
}

// The breaking values a campaign drew survive summary.json and a --resume (and a shard merge):
// cases per value feature, and how many of them were judged.
TEST(Envelope, BreakingValueCountsRoundTripAndMerge) {
  auto one = [](const Case& k, bool ran) {
    Coverage c;
    c.add_case({{"torch.math", CompositionClass::single, ran ? Outcome::ran : Outcome::skipped, ran ? "" : "declined"}});
    c.add_values(k);
    return c;
  };
  Case shifted;
  shifted.q = ValueDist{ValueDist::Kind::row_shift, 0.0, 1.0, 0.5, -40.0};
  shifted.k = ValueDist{ValueDist::Kind::row_shift, 0.0, 1.0, 1.0, 40.0};
  Case sparse;
  sparse.d_out = ValueDist{ValueDist::Kind::sparse_rows, 0.0, 1.0, 0.05, 0.0};
  sparse.d_lse = ValueDist{ValueDist::Kind::normal, 0.0, 256.0, 0.0, 0.0};
  Coverage total;
  total.add(one(shifted, true));
  total.add(one(shifted, false));
  total.add(one(sparse, true));
  total.add(one(Case{}, true));
  const Coverage back = Coverage::from_json(total.to_json());
  const Coverage* both[] = {&total, &back};
  for (const Coverage* c : both) {
    ASSERT_EQ(c->values().size(), 3u) << total.to_json().dump();
    EXPECT_EQ(c->values().at(ValueFeature::lse_far_below_zero).cases, 2u);
    EXPECT_EQ(c->values().at(ValueFeature::lse_far_below_zero).judged, 1u);
    EXPECT_EQ(c->values().at(ValueFeature::d_out_zero_rows).judged, 1u);
    EXPECT_EQ(c->values().at(ValueFeature::d_lse_large).cases, 1u);
  }
  nlohmann::json bad = total.to_json();
  bad["case_mix"]["values"]["nonsense"] = {{"cases", 1}, {"judged", 1}};
  EXPECT_THROW(Coverage::from_json(bad), std::runtime_error);
}

// The backends of this build that run here: each refuses exactly what its envelope's enforced
// clauses refuse (they decide nothing beyond it), on random cases of every kind. One exception,
// by name: where the mask clause is not enforced (the envelope says "none or causal" only for the
// aim), an adapter may decline a mask its entry point cannot express, in one line that says so
// (torch.nested.math: SDPA's is_causal is top-left in each sequence, which the envelope's clause,
// bottom-right per sequence, does not describe).
TEST(Envelope, CpuBackendsRefuseWhatTheirEnvelopeRefuses) {
  std::vector<std::string> names;
  for (const BackendInfo& b : list_backends())
    if (b.available && b.device == "cpu") names.push_back(b.name);
  ASSERT_FALSE(names.empty());
  RandomCaseOptions opt = small_tier();
  int refused = 0, checked = 0;
  for (const std::string& name : names) {
    const auto be = make_backend(name);
    const SupportEnvelope e = be->envelope();
    for (uint64_t seed = 0; seed < 150; ++seed) {
      const Case c = random_case(seed + 91'000, opt);
      const Problem p = full_problem(c, generate_inputs(c));
      const auto why = be->unsupported_reason(p);
      const bool adapter_mask = why && !e.refusal(p) && e.restricts(EnvelopeClause::mask) && e.decided_by_library(EnvelopeClause::mask) &&
                                why->find(" declines the mask") != std::string::npos && why->find('\n') == std::string::npos;
      if (!adapter_mask) {
        EXPECT_EQ(why, e.refusal(p)) << name << " seed " << seed;
      }
      refused += why.has_value();
      ++checked;
    }
  }
  std::cout << checked << " checks over " << names.size() << " backends, " << refused << " refused\n";
  if (std::find(names.begin(), names.end(), "torch.sdpa.math") != names.end()) {
    EXPECT_GT(refused, 0);  // the SDPA backends refuse softcaps: the comparison saw both answers
  }
}

}  // namespace
}  // namespace attnfuzz
