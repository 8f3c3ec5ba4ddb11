#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <filesystem>

#include "generators/random_case.h"
#include "harness/case_json.h"
#include "harness/errors.h"
#include "harness/inputs.h"
#include "harness/repro.h"

namespace attnfuzz {
namespace {

RC_GTEST_PROP(CaseJson, ParseOfWriteIsIdentity, (uint64_t seed)) {
  RandomCaseOptions opt;
  opt.max_seq = 40;
  const Case c = random_case(seed, opt);
  validate(c);
  const Case back = case_from_string(write_case(c));
  RC_ASSERT(back == c);
  RC_ASSERT(write_case(back) == write_case(c));
}

// The field named in the one-line message, or "" when the text parses.
std::string rejected_field(const std::string& text) {
  try {
    case_from_string(text);
  } catch (const CaseError& e) {
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "one line: " << e.what();
    return e.field();
  }
  return "";
}

const char* kMinimal = R"({"format":"attnfuzz-case/1","seed":1,"shape":{"heads_q":4,"heads_kv":2,"seq_q":8,"head_dim_qk":16}})";

std::string with(const std::string& replace_from, const std::string& replace_to) {
  std::string s = kMinimal;
  const auto pos = s.find(replace_from);
  EXPECT_NE(pos, std::string::npos);
  return s.replace(pos, replace_from.size(), replace_to);
}

TEST(CaseJson, MinimalCaseTakesDefaults) {
  const Case c = case_from_string(kMinimal);
  EXPECT_EQ(c.shape.batch, 1);
  EXPECT_EQ(c.shape.seq_kv, 8);
  EXPECT_EQ(c.shape.head_dim_v, 16);
  EXPECT_EQ(c.dtype, DType::f32);
  EXPECT_DOUBLE_EQ(c.effective_scale(), 0.25);
  EXPECT_EQ(c.d_lse.kind, ValueDist::Kind::zero);
  EXPECT_EQ(c.composition.kind, Composition::Kind::single);
}

TEST(CaseJson, RejectsBadInputNamingTheField) {
  EXPECT_EQ(rejected_field("{not json"), "<json>");
  // Found by the parser fuzz target: a number too large for a double threw out_of_range.
  EXPECT_EQ(rejected_field(with("\"seed\":1", "\"seed\":1,\"scale\":23.060757784E81863")), "<json>");
  EXPECT_EQ(rejected_field("[1,2]"), "<root>");
  EXPECT_EQ(rejected_field(with("attnfuzz-case/1", "attnfuzz-case/9")), "format");
  EXPECT_EQ(rejected_field(with("\"heads_kv\":2", "\"heads_kv\":3")), "shape.heads_kv");
  EXPECT_EQ(rejected_field(with("\"seq_q\":8", "\"seq_q\":0")), "shape.seq_q");
  EXPECT_EQ(rejected_field(with("\"seq_q\":8", "\"seq_q\":-3")), "shape.seq_q");
  EXPECT_EQ(rejected_field(with("\"seq_q\":8", "\"seq_q\":8.5")), "shape.seq_q");
  EXPECT_EQ(rejected_field(with("\"seq_q\":8", "\"seq_q\":\"8\"")), "shape.seq_q");
  EXPECT_EQ(rejected_field(with("\"seq_q\":8", "\"seq_q\":8,\"sequence\":3")), "shape.sequence");
  EXPECT_EQ(rejected_field(with("\"seed\":1", "\"seed\":-1")), "seed");
  EXPECT_EQ(rejected_field(with("\"seed\":1", "\"seed\":1,\"dtype\":\"fp64\"")), "dtype");
  EXPECT_EQ(rejected_field(with("\"seed\":1", "\"seed\":1,\"softcap\":-2")), "softcap");
  EXPECT_EQ(rejected_field(with("\"seed\":1", "\"seed\":1,\"mask\":{\"kind\":\"causa\"}")), "mask.kind");
  EXPECT_EQ(rejected_field(with("\"seed\":1", "\"seed\":1,\"mask\":{\"kind\":\"not\",\"args\":[]}")), "mask.args");
  EXPECT_EQ(rejected_field(with("\"seed\":1", R"("seed":1,"mask":{"kind":"document","segments_q":[4,4],"segments_kv":[4,3]})")),
            "mask.segments_kv");
  EXPECT_EQ(rejected_field(with("\"seed\":1", R"("seed":1,"mask":{"kind":"block_sparse","block_q":4,"block_kv":4,"rows":["1","1"]})")),
            "mask.rows");
  EXPECT_EQ(rejected_field(with("\"seed\":1", R"("seed":1,"composition":{"kind":"kv_split","bounds":[5,2]})")),
            "composition.bounds");
  EXPECT_EQ(rejected_field(with("\"seed\":1", R"("seed":1,"values":{"q":{"dist":"normal","sigma":-1}})")), "values.q.sigma");
}

TEST(CaseJson, RejectsHugeCasesBeforeAllocating) {
  // 10^12 elements in Q alone: refused by the memory estimate, which saturates instead of overflowing.
  EXPECT_EQ(rejected_field(R"({"format":"attnfuzz-case/1","seed":1,"shape":{"batch":1000,"heads_q":1000,"seq_q":1000,"head_dim_qk":1000}})"),
            "shape");
  EXPECT_EQ(rejected_field(R"({"format":"attnfuzz-case/1","seed":1,"shape":{"batch":2147483648,"heads_q":2147483648,"seq_q":2147483648,"head_dim_qk":2147483648}})"),
            "shape");
  Case c;
  c.shape = {1 << 30, 1 << 30, 1 << 30, 1 << 30, 1 << 30, 1 << 30, 1 << 30};
  EXPECT_EQ(estimate_host_bytes(c), UINT64_MAX);
  // A budget can be chosen: the same case passes with a large enough one.
  const std::string mid = R"({"format":"attnfuzz-case/1","seed":1,"shape":{"heads_q":1,"seq_q":4096,"head_dim_qk":64}})";
  EXPECT_THROW(case_from_string(mid, Limits{64 << 20}), CaseError);
  EXPECT_NO_THROW(case_from_string(mid, Limits{uint64_t{2} << 30}));
}

TEST(CaseJson, ReadsTheCaseInsideAReproducer) {
  const std::string repro = std::string(R"({"format":"attnfuzz-repro/1","case":)") + kMinimal + "}";
  EXPECT_EQ(case_from_string(repro), case_from_string(kMinimal));
}

// The reproducers of real findings kept in docs/findings/ (recorded on a GPU machine) still
// load with this harness, and the inputs regenerated here are bit-identical to the ones the
// GPU machine checksummed: a reproducer replays the same numbers anywhere.
TEST(Reproducers, RecordedFindingsLoadAndRegenerateTheirInputsBitForBit) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(ATTNFUZZ_SOURCE_DIR) / "docs" / "findings" / "repro";
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".json") continue;
    ++files;
    SCOPED_TRACE(e.path().filename().string());
    const Reproducer r = load_repro(e.path().string());
    EXPECT_FALSE(r.finding.signature.backend.empty());
    ASSERT_EQ(r.environment.count("libtorch"), 1u);
    ASSERT_EQ(r.environment.count("gpu"), 1u);
    EXPECT_NE(r.environment.at("gpu"), "none");
    ASSERT_NE(r.input_checksum, 0u);
    EXPECT_EQ(checksum(generate_inputs(r.c)), r.input_checksum);
  }
  EXPECT_GE(files, 6);
}

}  // namespace
}  // namespace attnfuzz
