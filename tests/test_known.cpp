// Known deviations (campaign/known.h): predicates, patterns, and the recorded F-* reproducers
// of docs/findings/repro/ loaded as known deviations that cover their own findings.
#include <gtest/gtest.h>

#include "campaign/known.h"
#include "harness/case_json.h"

namespace attnfuzz {
namespace {

Case aligned_case() {
  Case c;
  c.shape.batch = 1;
  c.shape.heads_q = 2;
  c.shape.heads_kv = 2;
  c.shape.seq_q = 8;
  c.shape.seq_kv = 8;
  c.shape.head_dim_qk = 16;
  c.shape.head_dim_v = 16;
  c.dtype = DType::f16;
  return c;
}

TEST(KnownPredicate, UnalignedRowsLooksAtEveryInputsStridesAndOffset) {
  const CasePredicate unaligned = parse_case_predicate("unaligned_rows(16)");
  Case c = aligned_case();
  EXPECT_FALSE(unaligned(c));                // 16 fp16 elements per row: 32 bytes
  c.layouts[TensorId::K].row_padding = 3;  // rows of 19 elements: 38 bytes
  EXPECT_TRUE(unaligned(c));
  c = aligned_case();
  c.layouts[TensorId::dO].offset = 1;
  EXPECT_TRUE(unaligned(c));
  c = aligned_case();
  c.layouts[TensorId::O].offset = 1;  // an output: not what the predicate is about
  EXPECT_FALSE(unaligned(c));
  c = aligned_case();
  c.layouts[TensorId::Q].row_padding = 8;  // 24 elements, 48 bytes: aligned
  EXPECT_FALSE(unaligned(c));
  EXPECT_TRUE(parse_case_predicate("unaligned_rows(32)")(c));  // 48 is no multiple of 32
}

// A case as JSON: B=1 H=2, fp32 (a packing needs Sq = Skv for qkv), the rest given.
Case json_case(const std::string& shape, const std::string& rest) {
  return case_from_string(R"({"format":"attnfuzz-case/1","seed":7,"dtype":"fp32","shape":{"batch":1,"heads_q":2,"heads_kv":2,)" + shape +
                          "}," + rest + "}");
}

TEST(KnownPredicate, UnalignedRowsLooksAtEveryCallsLayoutNotOnlyTheWholeCases) {
  const CasePredicate unaligned = parse_case_predicate("unaligned_rows(16)");
  // Q, K, V packed into one buffer (aligned); V's own layout has an 8-byte offset, unused while
  // the packing fits. A key split gives parts with Sq != Skv, where a qkv packing cannot apply:
  // those calls get V at its own, unaligned, offset (docs/findings/README.md).
  const std::string shape = R"("seq_q":10,"seq_kv":10,"head_dim_qk":16,"head_dim_v":16)";
  const std::string layouts = R"("layouts":{"packing":{"inputs":"qkv","grads":"none"},"v":{"order":"bshd","offset":2}})";
  EXPECT_FALSE(unaligned(json_case(shape, layouts)));
  EXPECT_TRUE(unaligned(json_case(shape, layouts + R"(,"composition":{"kind":"kv_split","bounds":[9]})")));
}

TEST(KnownPredicate, MaskedRowsLooksAtEveryCallOfTheComposition) {
  const CasePredicate masked = parse_case_predicate("masked_rows");
  const std::string shape = R"("seq_q":8,"seq_kv":8,"head_dim_qk":16,"head_dim_v":16)";
  EXPECT_FALSE(masked(json_case(shape, R"("mask":{"kind":"causal","align":"top_left"})")));
  // Every query sees key 0; the parts of a key split at 4: keys 4.. hide everything from queries 0..3.
  EXPECT_TRUE(masked(json_case(shape, R"("mask":{"kind":"causal","align":"top_left"},"composition":{"kind":"kv_split","bounds":[4]})")));
  // A bottom-right causal mask with more queries than keys: the first queries see nothing.
  EXPECT_TRUE(masked(json_case(R"("seq_q":8,"seq_kv":5,"head_dim_qk":16,"head_dim_v":16)", R"("mask":{"kind":"causal","align":"bottom_right"})")));
  EXPECT_FALSE(masked(json_case(shape, R"("mask":{"kind":"none"},"composition":{"kind":"q_split","bounds":[3]})")));
}

TEST(KnownPredicate, BiasBroadcastOverTheKeysIsATensorBiasWithoutTheKvDimension) {
  const CasePredicate broadcast_kv = parse_case_predicate("bias_broadcast_kv");
  const std::string shape = R"("seq_q":8,"seq_kv":8,"head_dim_qk":16,"head_dim_v":16)";
  EXPECT_FALSE(broadcast_kv(json_case(shape, R"("mask":{"kind":"none"})"))) << "no bias";
  EXPECT_TRUE(broadcast_kv(json_case(shape, R"("bias":{"kind":"tensor","spans":["batch","heads","q"]})")));
  EXPECT_FALSE(broadcast_kv(json_case(shape, R"("bias":{"kind":"tensor","spans":["heads","kv"]})")));
  EXPECT_FALSE(broadcast_kv(json_case(shape, R"("bias":{"kind":"alibi"})"))) << "ALiBi spans the keys";
  EXPECT_FALSE(broadcast_kv(json_case(shape, R"("bias":{"kind":"relative"})")));
}

TEST(KnownPredicate, TermsCombineAndBadOnesAreRefusedByName) {
  Case c = aligned_case();
  c.layouts[TensorId::V].offset = 3;
  EXPECT_TRUE(parse_case_predicate("unaligned_rows(16) and dtype(fp16|bf16)")(c));
  EXPECT_FALSE(parse_case_predicate("unaligned_rows(16) and dtype(fp32)")(c));
  EXPECT_TRUE(parse_case_predicate("always")(c));
  for (const char* bad : {"", "unaligned_rows(0)", "unaligned_rows(x)", "dtype(fp8)", "sometimes", "unaligned_rows(16", "always and ",
                          "masked_rows(1)", "bias_broadcast_kv(1)"}) {
    SCOPED_TRACE(bad);
    EXPECT_THROW(parse_case_predicate(bad), std::invalid_argument);
  }
}

Reproducer finding(const std::string& backend, const std::string& tensor, FindingClass cls, const Case& c) {
  Reproducer r;
  r.c = c;
  r.finding.signature = {backend, CompositionClass::single, from_name(tensor), cls, DType::f16, "none"};
  return r;
}

TEST(KnownFindings, TheRecordedDeviationsCoverTheirOwnFindingsAndOnlyUnderTheirPredicates) {
  const KnownFindings known = KnownFindings::load({ATTNFUZZ_SOURCE_DIR "/docs/findings/repro"});
  ASSERT_GE(known.all().size(), 6u);
  for (const auto& k : known.all()) {
    SCOPED_TRACE(k.path);
    EXPECT_TRUE(k.covers(k.repro)) << "a known deviation covers the finding it was recorded from";
    EXPECT_EQ(k.when, k.id == "F-4"   ? "masked_rows"
                      : k.id == "F-5" ? "head_dims_differ"
                      : k.id == "F-6" ? "bias_broadcast_kv"
                                      : "unaligned_rows(16)");
  }
  Case unaligned = aligned_case();
  unaligned.layouts[TensorId::Q].row_padding = 1;
  const Case aligned = aligned_case();
  const KnownDeviation* k = known.covering(finding("torch.cudnn", "dK", FindingClass::nan_inf, unaligned));
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->id, "F-1");
  EXPECT_NE(known.covering(finding("torch.sdpa.cudnn", "O", FindingClass::mismatch, unaligned)), nullptr);
  EXPECT_EQ(known.covering(finding("torch.cudnn", "dK", FindingClass::nan_inf, aligned)), nullptr) << "aligned rows: a new bug";
  EXPECT_EQ(known.covering(finding("cudnn", "dK", FindingClass::nan_inf, unaligned)), nullptr) << "another backend: a new bug";
  // F-1 covers what its ledger row proves (docs/findings/LEDGER.md): wrong values and failed
  // executions, not every class a backend can show on unaligned rows.
  EXPECT_NE(known.covering(finding("torch.cudnn", "-", FindingClass::backend_error, unaligned)), nullptr);
  EXPECT_EQ(known.covering(finding("torch.cudnn", "dQ", FindingClass::nondeterministic, unaligned)), nullptr)
      << "F-1 never showed a nondeterministic output: a new bug";
  EXPECT_EQ(known.covering(finding("torch.cudnn", "O", FindingClass::contract_violation, unaligned)), nullptr);
  // F-5: cuDNN's backward with Dqk != Dv, through our cudnn backend only.
  const Case dqk_gt_dv = json_case(R"("seq_q":8,"seq_kv":8,"head_dim_qk":136,"head_dim_v":128)", R"("mask":{"kind":"none"})");
  const KnownDeviation* f5 = known.covering(finding("cudnn", "dK", FindingClass::mismatch, dqk_gt_dv));
  ASSERT_NE(f5, nullptr);
  EXPECT_EQ(f5->id, "F-5");
  EXPECT_EQ(known.covering(finding("cudnn", "dK", FindingClass::mismatch, aligned)), nullptr) << "Dqk == Dv: a new bug";
  // F-4: NaN dQ from LibTorch's cuDNN path, only where some call has a row that sees no key.
  const Case masked_rows = json_case(R"("seq_q":8,"seq_kv":5,"head_dim_qk":16,"head_dim_v":16)", R"("mask":{"kind":"causal","align":"bottom_right"})");
  const KnownDeviation* f4 = known.covering(finding("torch.cudnn", "dQ", FindingClass::nan_inf, masked_rows));
  ASSERT_NE(f4, nullptr);
  EXPECT_EQ(f4->id, "F-4");
  EXPECT_EQ(known.covering(finding("torch.cudnn", "dQ", FindingClass::nan_inf, json_case(R"("seq_q":8,"seq_kv":8,"head_dim_qk":16,"head_dim_v":16)", R"("mask":{"kind":"causal","align":"bottom_right"})"))),
            nullptr)
      << "every row sees a key: a new bug";
  EXPECT_EQ(known.covering(finding("torch.cudnn", "dK", FindingClass::nan_inf, masked_rows)), nullptr) << "another tensor: a new bug";
}

TEST(KnownFindings, AMissingPathIsAnError) { EXPECT_THROW(KnownFindings::load({"/nonexistent/known"}), std::runtime_error); }

}  // namespace
}  // namespace attnfuzz
