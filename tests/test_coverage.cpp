// Coverage counts (campaign/coverage.h): per case a backend's outcome is errored > ran >
// skipped over its compositions; reasons group with stand-alone numbers masked; the JSON
// form round-trips (state.json, merge) and lists the backends that ran nothing; the feature map
// counts a backend's judged cases per cell and side feature, and knows the cells outside its envelope.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>

#include "campaign/coverage.h"
#include "campaign/feature_cells.h"
#include "campaign/guided_corpus.h"

namespace attnfuzz {
namespace {

TEST(Coverage, ReasonGroupsMaskStandAloneNumbersOnly) {
  EXPECT_EQ(reason_group("head_dim_qk 72 not supported"), "head_dim_qk # not supported");
  EXPECT_EQ(reason_group("head_dim_qk 80 not supported"), "head_dim_qk # not supported");
  EXPECT_EQ(reason_group("dtype fp16 not supported, Sq=37"), "dtype fp16 not supported, Sq=#");
  EXPECT_EQ(reason_group("first line\nsecond line 5"), "first line");
  EXPECT_EQ(reason_group("tile 64x32 too big"), "tile 64x32 too big");
}

TEST(Coverage, ABackendsOutcomeForACaseIsErroredThenRanThenSkipped) {
  Coverage c;
  c.add_backend("never_reached");
  c.add_case({{"a", CompositionClass::single, Outcome::ran, ""}, {"a", CompositionClass::merged, Outcome::skipped, "no LSE"}});
  c.add_case({{"a", CompositionClass::single, Outcome::skipped, "head_dim 72"}, {"a", CompositionClass::merged, Outcome::errored, "boom"}});
  c.add_case({{"a", CompositionClass::single, Outcome::skipped, "head_dim 80"}});
  const CoverageCounts& a = c.backends().at("a");
  EXPECT_EQ(a.ran, 1u);
  EXPECT_EQ(a.errored, 1u);
  EXPECT_EQ(a.skipped, 1u);
  EXPECT_EQ(c.compositions().at("a").at("single").skipped, 2u);
  EXPECT_EQ(c.compositions().at("a").at("single").reasons.at("head_dim #").count, 2u);
  EXPECT_EQ(c.compositions().at("a").at("single").reasons.at("head_dim #").example, "head_dim 72");
  EXPECT_EQ(c.compositions().at("a").at("merged").errored, 1u);
  EXPECT_EQ(c.untested(), std::vector<std::string>{"never_reached"});
  ASSERT_EQ(c.warnings().size(), 1u);
  EXPECT_NE(c.warnings()[0].find("never_reached ran no case: 0 skipped, 0 errored (it was never reached)"), std::string::npos);
}

TEST(Coverage, UntestedBackendWarningNamesItsTopReasons) {
  Coverage c;
  for (int i = 0; i < 3; ++i) c.add_case({{"x", CompositionClass::single, Outcome::skipped, "needs a GPU"}, {"y", CompositionClass::single, Outcome::ran, ""}});
  c.add_case({{"x", CompositionClass::single, Outcome::errored, "CUDA error 700"}, {"y", CompositionClass::single, Outcome::ran, ""}});
  EXPECT_EQ(c.untested(), std::vector<std::string>{"x"});
  ASSERT_EQ(c.warnings().size(), 1u);
  EXPECT_EQ(c.warnings()[0], "backend x ran no case: 3 skipped, 1 errored; top reasons: 3x \"needs a GPU\" 1x \"CUDA error 700\"");
  EXPECT_EQ(c.progress_text(), "x 0/3/1 NOTHING RAN, y 4/0/0");
}

TEST(Coverage, JsonRoundTripsAndSums) {
  Coverage c;
  c.add_backend("z");
  for (int i = 0; i < 9; ++i) c.add_case({{"x", CompositionClass::single, Outcome::skipped, "reason " + std::string(1, char('a' + i))}});
  c.add_case_error("bad case");
  const Coverage back = Coverage::from_json(c.to_json(SIZE_MAX));
  EXPECT_EQ(back.to_json(SIZE_MAX), c.to_json(SIZE_MAX));
  Coverage twice = back;
  twice.add(c);
  EXPECT_EQ(twice.backends().at("x").skipped, 18u);
  EXPECT_EQ(twice.case_errors().errored, 2u);
  // summary.json keeps the top 5 reasons; the other four are summed under one entry.
  const auto top = c.to_json(5)["backends"]["x"]["reasons"];
  ASSERT_EQ(top.size(), 6u);
  EXPECT_EQ(top[5]["reason"], "(other reasons)");
  EXPECT_EQ(top[5]["count"], 4);
  EXPECT_EQ(c.to_json()["untested"], nlohmann::json({"x", "z"}));
}

TEST(Coverage, ACaseIsJudgedWhenABackendRanOrTheWorkerDied) {
  Coverage c;
  c.add_case({{"a", CompositionClass::single, Outcome::ran, ""}, {"b", CompositionClass::single, Outcome::skipped, "no"}});           // judged
  c.add_case({{"a", CompositionClass::single, Outcome::skipped, "no"}, {"b", CompositionClass::merged, Outcome::skipped, "no"}});     // nothing ran
  c.add_case({{"a", CompositionClass::single, Outcome::errored, "threw"}, {"b", CompositionClass::single, Outcome::skipped, "no"}});  // nothing ran to the end
  c.add_case({{"a", CompositionClass::none, Outcome::errored, "crash: SIGSEGV"}}, /*died=*/true);                        // a crash is a verdict
  c.add_case_error("unreadable request");                                                             // the worker could not judge
  EXPECT_EQ(c.judged_cases(), 2u);
  EXPECT_EQ(c.no_backend_ran_cases(), 2u);
  EXPECT_EQ(c.unjudged_cases(), 3u);
  EXPECT_NE(c.progress_text().find(", cases the worker could not judge 1, cases no backend ran 2"), std::string::npos);
  const Coverage back = Coverage::from_json(c.to_json(SIZE_MAX));  // state.json, merge
  EXPECT_EQ(back.judged_cases(), 2u);
  EXPECT_EQ(back.unjudged_cases(), 3u);
  Coverage twice = back;
  twice.add(c);
  EXPECT_EQ(twice.judged_cases(), 4u);
  EXPECT_EQ(twice.no_backend_ran_cases(), 4u);
  // A summary written before judged cases were counted reads as none judged, never as all.
  nlohmann::json old = c.to_json();
  old.erase("judged_cases");
  EXPECT_EQ(Coverage::from_json(old).judged_cases(), 0u);
}

// replay says `fixed` only when the blamed backend ran the case to the end and returned the
// tensor (issue 26, item 9); anything else is untested, with the reason.
TEST(Coverage, AFindingIsFixedOnlyWhenItsBackendRanItToTheEnd) {
  const Signature merged_dq{"b", CompositionClass::merged, TensorId::dQ, FindingClass::mismatch, DType::f32, "causal"};
  const RunOutcome single_ran{"b", CompositionClass::single, Outcome::ran, "", {TensorId::O, TensorId::LSE, TensorId::dQ, TensorId::dK, TensorId::dV}};
  const RunOutcome merged_ran{"b", CompositionClass::merged, Outcome::ran, "", {TensorId::O, TensorId::LSE, TensorId::dQ, TensorId::dK, TensorId::dV}};
  EXPECT_FALSE(why_untested(merged_dq, {single_ran, merged_ran}));
  // Errored, declined, not run at all, or run without the composition or the tensor.
  const auto errored = why_untested(merged_dq, {single_ran, {"b", CompositionClass::merged, Outcome::errored, "boom\nline 2", {}}});
  ASSERT_TRUE(errored);
  EXPECT_NE(errored->find("failed"), std::string::npos);
  EXPECT_EQ(errored->find('\n'), std::string::npos);
  EXPECT_TRUE(why_untested(merged_dq, {single_ran, {"b", CompositionClass::merged, Outcome::skipped, "no dLSE", {}}}));
  EXPECT_TRUE(why_untested(merged_dq, {{"reference", CompositionClass::merged, Outcome::ran, "", {TensorId::dQ}}}));
  EXPECT_TRUE(why_untested(merged_dq, {single_ran}));
  EXPECT_TRUE(why_untested(merged_dq, {{"b", CompositionClass::merged, Outcome::ran, "", {TensorId::O, TensorId::dK}}}));
  // A crash or hang blames no composition: every composition must have run.
  const Signature crash{"b", CompositionClass::none, std::nullopt, FindingClass::crash, DType::f32, Signature::kAnyMask};
  EXPECT_FALSE(why_untested(crash, {single_ran, merged_ran}));
  EXPECT_TRUE(why_untested(crash, {single_ran, {"b", CompositionClass::merged, Outcome::skipped, "declined", {}}}));
  EXPECT_TRUE(why_untested(crash, {}));
  // A consistency finding blames two backends: both must have run.
  const Signature pair{Signature::pair("b", "c"), CompositionClass::single, TensorId::O, FindingClass::mismatch, DType::f32, "none"};
  EXPECT_TRUE(why_untested(pair, {single_ran}));
  EXPECT_FALSE(why_untested(pair, {single_ran, {"c", CompositionClass::single, Outcome::ran, "", {TensorId::O}}}));
  // The tensors travel with the outcomes (the worker's reply).
  const auto back = run_outcomes_from_json(to_json(std::vector<RunOutcome>{merged_ran}));
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].tensors, merged_ran.tensors);
}

TEST(Coverage, CountsReadBackAreRangeCheckedAndSumsNeverWrap) {
  nlohmann::json j = Coverage{}.to_json();
  j["judged_cases"] = -1;
  EXPECT_THROW(Coverage::from_json(j), std::invalid_argument);
  Coverage big;
  nlohmann::json huge = big.to_json();
  huge["judged_cases"] = UINT64_MAX;
  Coverage sum = Coverage::from_json(huge);
  EXPECT_THROW(sum.add(Coverage::from_json(huge)), std::overflow_error);
}

}  // namespace
}  // namespace attnfuzz

namespace attnfuzz {
namespace {

Case feature_case(DType d, MaskExpr m, int64_t head_dim, bool dlse) {
  Case c;
  c.dtype = d;
  c.mask = m;
  c.shape = {1, 4, 2, 8, 16, head_dim, head_dim};
  if (dlse) c.d_lse = ValueDist{};
  return c;
}

TEST(FeatureMap, ACaseFallsInOneCellOfTheProductAndItsSides) {
  EXPECT_EQ(all_cells().size(), 3u * 4u * 3u * 3u);
  EXPECT_EQ(all_cells().front(), "fp32/none/single/d64");
  const Case c = feature_case(DType::bf16, MaskExpr::causal_mask(Align::bottom_right), 96, true);
  EXPECT_EQ(cell_of(c), "bf16/causal/single/d128");
  EXPECT_NE(std::find(all_cells().begin(), all_cells().end(), cell_of(c)), all_cells().end());
  Coverage cov;
  const std::vector<RunOutcome> runs{{"a", CompositionClass::single, Outcome::ran, ""}, {"b", CompositionClass::single, Outcome::skipped, "no"}};
  cov.add_case(runs);
  cov.add_features(c, runs);
  EXPECT_EQ(cov.cells().at("a").at("bf16/causal/single/d128"), 1u);
  EXPECT_FALSE(cov.cells().count("b"));  // it did not run the case
  EXPECT_EQ(cov.sides().at("a").at("heads").at("gqa"), 1u);
  EXPECT_EQ(cov.sides().at("a").at("seq").at("wide"), 1u);
  EXPECT_EQ(cov.sides().at("a").at("dlse").at("yes"), 1u);
}

TEST(FeatureMap, CellsOutsideAnEnvelopeAreLeftOutOfTheMinimum) {
  SupportEnvelope fused;
  fused.dtypes = {DType::f16, DType::bf16};
  fused.max_head_dim = 128;
  fused.masks = MaskSupport::causal_or_none;
  EXPECT_EQ(cell_outside(fused, true, "fp32/none/single/d64"), std::optional<std::string>("dtype fp32"));
  EXPECT_EQ(cell_outside(fused, true, "bf16/window/merged/d64"), std::optional<std::string>("mask window"));
  EXPECT_EQ(cell_outside(fused, true, "bf16/causal/merged/d256"), std::optional<std::string>("head dim d256"));
  EXPECT_EQ(cell_outside(fused, true, "fp16/causal/q_split/d128"), std::nullopt);
  EXPECT_EQ(cell_outside(fused, true, "fp16/causal/q_split"), std::optional<std::string>("not a cell"));
  EXPECT_TRUE(cell_outside(SupportEnvelope{}, false, "fp16/causal/merged/d64"));  // no LSE: no merge
  EXPECT_EQ(cell_outside(SupportEnvelope{}, false, "fp16/causal/q_split/d64"), std::nullopt);
  Coverage cov;
  cov.add_backend("fused");
  cov.set_outside_cells("fused", fused, true);
  // fp16 and bf16, none and causal, every composition, d64 and d128: 2 x 2 x 3 x 2 cells inside.
  EXPECT_EQ(cov.thin_cells(1).size(), 24u);
  const std::vector<RunOutcome> fused_ran{{"fused", CompositionClass::single, Outcome::ran, ""}};
  cov.add_case(fused_ran);
  cov.add_features(feature_case(DType::f16, MaskExpr::all_visible(), 64, false), fused_ran);
  const std::vector<std::string> thin = cov.thin_cells(1);
  EXPECT_EQ(thin.size(), 23u);
  EXPECT_EQ(thin.front(), "fused fp16/none/single/d128: 0 judged");  // the head dim varies fastest
  EXPECT_EQ(cov.thin_cells(2).size(), 24u);
  EXPECT_TRUE(cov.thin_cells(0).empty());
}

// A composed case is judged through each composition a backend ran to the end: the single call
// and its own, each in its cell; a composition the backend declined adds no cell.
TEST(FeatureMap, ACaseCountsInTheCellOfEachCompositionABackendRan) {
  Case c = feature_case(DType::f16, MaskExpr::causal_mask(Align::top_left), 64, false);
  c.composition.kind = Composition::Kind::q_split;
  c.composition.bounds = {1};
  const std::vector<RunOutcome> runs{{"both", CompositionClass::single, Outcome::ran, ""},
                                     {"both", CompositionClass::q_split, Outcome::ran, ""},
                                     {"one", CompositionClass::single, Outcome::ran, ""},
                                     {"one", CompositionClass::q_split, Outcome::skipped, "offset causal"},
                                     {"none", CompositionClass::single, Outcome::errored, "fault"}};
  Coverage cov;
  cov.add_case(runs);
  cov.add_features(c, runs);
  EXPECT_EQ(cov.cells().at("both"), (std::map<std::string, uint64_t>{{"fp16/causal/single/d64", 1}, {"fp16/causal/q_split/d64", 1}}));
  EXPECT_EQ(cov.cells().at("one"), (std::map<std::string, uint64_t>{{"fp16/causal/single/d64", 1}}));
  EXPECT_FALSE(cov.cells().count("none"));
  EXPECT_EQ(cov.sides().at("both").at("heads").at("gqa"), 1u);  // the sides once per backend and case
}

TEST(FeatureMap, TheMapRoundTripsThroughJsonAndSums) {
  Coverage a;
  const std::vector<RunOutcome> x_ran{{"x", CompositionClass::single, Outcome::ran, ""}};
  a.add_case(x_ran);
  a.add_features(feature_case(DType::f32, MaskExpr::all_visible(), 16, false), x_ran);
  SupportEnvelope half;
  half.dtypes = {DType::f16};
  a.set_outside_cells("x", half, false);
  const Coverage back = Coverage::from_json(a.to_json());
  EXPECT_EQ(back.cells(), a.cells());
  EXPECT_EQ(back.sides(), a.sides());
  EXPECT_EQ(back.outside_cells(), a.outside_cells());
  Coverage sum = back;
  sum.add(a);
  EXPECT_EQ(sum.cells().at("x").at("fp32/none/single/d64"), 2u);
  EXPECT_EQ(sum.sides().at("x").at("layout").at("dense"), 2u);
  // A summary written before the map: no cell counted.
  nlohmann::json old = a.to_json();
  old.erase("features");
  EXPECT_TRUE(Coverage::from_json(old).cells().empty());
}

// The guided corpus (campaign/guided_corpus.h): per backend and tensor the best kSlotSize passing
// cases, highest ratio first; failures stay out; a draw picks deterministically; the JSON form
// round-trips, and a union keeps every slot's best.
TEST(GuidedCorpus, KeepsTheBestPassingCasesPerSlot) {
  auto a_case = [](int64_t seq) {
    Case c;
    c.shape.seq_q = seq;
    return c;
  };
  const std::vector<RunOutcome> runs{{"b", CompositionClass::single, Outcome::ran, "", {TensorId::O, TensorId::LSE}, {0.5, 1.5}},
                                     {"b", CompositionClass::merged, Outcome::ran, "", {TensorId::O}, {0.625}}};
  const std::map<CorpusSlot, double> ratios = slot_ratios(runs);
  EXPECT_EQ(ratios.at(CorpusSlot{"b", TensorId::O}), 0.625);  // the largest over the compositions
  EXPECT_EQ(ratios.at(CorpusSlot{"b", TensorId::LSE}), 1.5);
  GuidedCorpus corpus;
  EXPECT_FALSE(corpus.pick(7));
  EXPECT_TRUE(corpus.offer(a_case(1), 0, ratios));
  EXPECT_EQ(corpus.entries(), 1u) << "the failing LSE stays out";
  for (int64_t i = 2; i < 20; ++i) corpus.offer(a_case(i), i, {{CorpusSlot{"b", TensorId::O}, 0.01 * static_cast<double>(i)}});
  const std::vector<CorpusEntry>& slot = corpus.slots().at(CorpusSlot{"b", TensorId::O});
  ASSERT_EQ(slot.size(), GuidedCorpus::kSlotSize);
  EXPECT_EQ(slot.front().ratio, 0.625);
  EXPECT_EQ(slot.back().ratio, 0.01 * 13);
  EXPECT_FALSE(corpus.offer(a_case(40), 40, {{CorpusSlot{"b", TensorId::O}, 0.05}})) << "below the weakest of a full slot";
  EXPECT_FALSE(corpus.offer(a_case(1), 41, {{CorpusSlot{"b", TensorId::O}, 0.5}})) << "a case already there keeps its higher ratio";
  for (uint64_t d = 0; d < 20; ++d) EXPECT_EQ(corpus.pick(d)->entry.c, corpus.pick(d)->entry.c);
  corpus.counts = {5, 2};

  const GuidedCorpus back = GuidedCorpus::from_json(nlohmann::json::parse(corpus.to_json().dump()));
  EXPECT_EQ(back.slots().at(CorpusSlot{"b", TensorId::O}).size(), GuidedCorpus::kSlotSize);
  EXPECT_EQ(back.slots().at(CorpusSlot{"b", TensorId::O}).front().c, a_case(1));
  EXPECT_EQ(back.counts.raised, 2u);

  GuidedCorpus other;
  other.offer(a_case(50), 50, {{CorpusSlot{"b", TensorId::O}, 0.875}, {CorpusSlot{"c", TensorId::dQ}, 0.25}});
  other.counts = {1, 1};
  GuidedCorpus both = back;
  both.add(other);
  EXPECT_EQ(both.slots().at(CorpusSlot{"b", TensorId::O}).front().ratio, 0.875);
  EXPECT_EQ(both.slots().at(CorpusSlot{"b", TensorId::O}).size(), GuidedCorpus::kSlotSize);
  EXPECT_EQ(both.slots().size(), 2u);
  EXPECT_EQ(both.counts.mutants, 6u);
}

}  // namespace
}  // namespace attnfuzz
