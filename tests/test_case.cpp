#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "campaign/repro.h"
#include "generators/random_case.h"
#include "harness/case_json.h"
#include "harness/errors.h"
#include "harness/inputs.h"
#include "harness/json_input.h"

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
  EXPECT_EQ(rejected_field(with("\"seed\":1", R"("seed":1,"composition":{"kind":"kv_split","bounds":[5,2]})")), "composition.bounds");
  EXPECT_EQ(rejected_field(with("\"seed\":1", R"("seed":1,"values":{"q":{"dist":"normal","sigma":-1}})")), "values.q.sigma");
  // Issue 26, item 22: the older one-layout key is named as given, not as layouts.q.
  EXPECT_EQ(rejected_field(with("\"seed\":1", R"("seed":1,"layout":{"order":"bhsd","row_padding":5000})")), "layout.row_padding");
  EXPECT_EQ(rejected_field(with("\"seed\":1", R"("seed":1,"layouts":{"k":{"row_padding":5000}})")), "layouts.k.row_padding");
}

// Issue 26, item 11: values the case dtype cannot hold, and scores or dO V^T the fp32
// accumulators cannot, are refused up front naming the field (they overflowed and the
// reference was judged a finding against itself); ordinary large values still run.
TEST(CaseJson, RejectsValuesThatOverflowTheCaseDtype) {
  auto case_with = [](const std::string& extra) { return with("\"seed\":1", "\"seed\":1," + extra); };
  EXPECT_EQ(rejected_field(case_with(R"("dtype":"fp16","values":{"q":{"dist":"normal","sigma":1e5}})")), "values.q");
  EXPECT_EQ(rejected_field(case_with(R"("dtype":"fp16","values":{"v":{"dist":"normal","mean":1e29,"sigma":0}})")), "values.v");
  EXPECT_EQ(rejected_field(case_with(R"("dtype":"fp16","grads":{"d_out":{"dist":"normal","sigma":1e29}})")), "grads.d_out");
  EXPECT_EQ(rejected_field(case_with(R"("dtype":"fp16","values":{"k":{"dist":"outliers","fraction":0.1,"magnitude":1e29}})")), "values.k");
  EXPECT_EQ(rejected_field(case_with(R"("dtype":"bf16","values":{"q":{"dist":"normal","sigma":1e20},"k":{"dist":"normal","sigma":1e20}})")),
            "values.q");
  EXPECT_EQ(rejected_field(case_with(R"("scale":1e308)")), "scale");
  EXPECT_EQ(rejected_field(case_with(R"("values":{"v":{"dist":"normal","sigma":1e19}},"grads":{"d_out":{"dist":"normal","sigma":1e19}})")),
            "grads.d_out");
  EXPECT_EQ(rejected_field(case_with(R"("dtype":"fp16","values":{"q":{"dist":"normal","sigma":1000}})")), "");
  EXPECT_EQ(rejected_field(case_with(R"("dtype":"bf16","values":{"q":{"dist":"normal","sigma":1e5}})")), "");
}

TEST(CaseJson, RejectsHugeCasesBeforeAllocating) {
  // 10^12 elements in Q alone: refused by the memory estimate, which saturates instead of overflowing.
  EXPECT_EQ(
      rejected_field(R"({"format":"attnfuzz-case/1","seed":1,"shape":{"batch":1000,"heads_q":1000,"seq_q":1000,"head_dim_qk":1000}})"),
      "shape");
  EXPECT_EQ(
      rejected_field(
          R"({"format":"attnfuzz-case/1","seed":1,"shape":{"batch":2147483648,"heads_q":2147483648,"seq_q":2147483648,"head_dim_qk":2147483648}})"),
      "shape");
  Case c;
  c.shape = {1 << 30, 1 << 30, 1 << 30, 1 << 30, 1 << 30, 1 << 30, 1 << 30};
  EXPECT_EQ(estimate_host_bytes(c), UINT64_MAX);
  // A budget can be chosen: the same case passes with a large enough one.
  const std::string mid = R"({"format":"attnfuzz-case/1","seed":1,"shape":{"heads_q":1,"seq_q":4096,"head_dim_qk":64}})";
  EXPECT_THROW(case_from_string(mid, Limits{64 << 20}), CaseError);
  EXPECT_NO_THROW(case_from_string(mid, Limits{uint64_t{4} << 30}));
}

TEST(CaseJson, ReadsTheCaseInsideAReproducer) {
  const std::string repro = std::string(R"({"format":"attnfuzz-repro/1","case":)") + kMinimal + "}";
  EXPECT_EQ(case_from_string(repro), case_from_string(kMinimal));
}

// The reproducers kept in docs/findings/ (real findings recorded on a GPU machine, and fixed
// false alarms recorded wherever they were found) still load with this harness, and the inputs
// regenerated here are bit-identical to the ones they checksummed: a reproducer replays the
// same numbers anywhere.
TEST(Reproducers, RecordedFindingsLoadAndRegenerateTheirInputsBitForBit) {
  namespace fs = std::filesystem;
  int files = 0;
  for (const std::string sub : {"repro", "fixed"}) {  // known deviations, and fixed false alarms
    for (const auto& e : fs::directory_iterator(fs::path(ATTNFUZZ_SOURCE_DIR) / "docs" / "findings" / sub)) {
      if (e.path().extension() != ".json") continue;
      ++files;
      SCOPED_TRACE(e.path().filename().string());
      const Reproducer r = load_repro(e.path().string());
      EXPECT_FALSE(r.finding.signature.backend.empty());
      ASSERT_EQ(r.environment.count("libtorch"), 1u);
      ASSERT_EQ(r.environment.count("gpu"), 1u);
      if (sub == "repro") {
        EXPECT_NE(r.environment.at("gpu"), "none") << "a known deviation of a GPU library";
      }
      ASSERT_NE(r.input_checksum, 0u);
      EXPECT_EQ(checksum(generate_inputs(r.c)), r.input_checksum);
    }
  }
  EXPECT_GE(files, 6);
}

// --- issue 16: limits on what a small file may demand -------------------------------------

Composition nested_kv_split(int depth, int bounds) {
  Composition c;
  c.kind = Composition::Kind::kv_split;
  for (int i = 1; i <= bounds; ++i) c.bounds.push_back(i);
  if (depth > 1) c.children.push_back(nested_kv_split(depth - 1, bounds));
  return c;
}

Case small_case() { return case_from_string(kMinimal); }

TEST(Limits, NestedSplitsOfTenToTheTenCallsAreRefusedBeforeAnyWork) {
  Case c = small_case();
  c.shape.seq_kv = 64;
  c.composition = nested_kv_split(8, 17);  // 18^8 ~ 1.1e10 backend calls
  EXPECT_EQ(composition_cost(c, c.composition).leaf_calls, 11019960576u);
  try {
    validate(c);
    FAIL() << "accepted";
  } catch (const CaseError& e) {
    EXPECT_EQ(e.field(), "composition");
    EXPECT_NE(std::string(e.what()).find("backend calls"), std::string::npos) << e.what();
  }
  // Even the memory estimate does not walk the tree: it saturates.
  EXPECT_EQ(estimate_host_bytes(c), UINT64_MAX);
  c.composition = nested_kv_split(2, 17);  // 324 calls: fine
  EXPECT_NO_THROW(validate(c));
}

TEST(Limits, CompositionWorkIsBoundedRelativeToTheSingleCall) {
  Case c = small_case();
  c.shape.seq_q = c.shape.seq_kv = 256;
  // Nested mask partitions: 2^depth calls over the whole problem each.
  Composition part;
  part.kind = Composition::Kind::mask_partition;
  part.window_left = 4;
  Composition nested = part;
  for (int d = 1; d < 8; ++d) {
    Composition outer = part;
    outer.children = {nested};
    nested = outer;
  }
  c.composition = nested;  // 256 calls over the whole problem: 256x the single call
  EXPECT_THROW(validate(c), CaseError);
  Composition five = part;
  for (int d = 1; d < 5; ++d) {
    Composition outer = part;
    outer.children = {five};
    five = outer;
  }
  c.composition = five;  // 32x: fine
  EXPECT_NO_THROW(validate(c));
}

TEST(Limits, TheCompositionCountsInTheMemoryEstimate) {
  Case c = small_case();
  const uint64_t single = estimate_host_bytes(c);
  c.composition = nested_kv_split(2, 40);  // 41^2 parts, each keeping the full rows' O and LSE
  EXPECT_GT(estimate_host_bytes(c), single + 41 * 41 * 8 * c.shape.seq_q * c.shape.heads_q);
}

// Issue 26, item 10: the estimate counts what runs on the host, and nothing else. The CPU oracle
// set keeps one head's Sq x Skv float64 matrices there, LibTorch's math backends every head's;
// the GPU set and fused backends leave the tensors and masks alone (docs/campaigns.md, "Memory").
TEST(Limits, TheEstimateCountsOnlyTheWorkOnTheHost) {
  Case c = small_case();
  c.shape = {1, 8, 8, 2048, 2048, 64, 64};
  const uint64_t head = 2048 * 2048, pairs = 8 * head;
  const HostWork gpu = HostWork::least();
  const HostWork cpu_oracles{HostWork::Oracles::host, HostScores::none};
  const HostWork reference_backend{HostWork::Oracles::device, HostScores::one_head};
  const HostWork torch_math{HostWork::Oracles::device, HostScores::every_head};
  EXPECT_EQ(estimate_host_bytes(c), estimate_host_bytes(c, HostWork{}));  // the default counts everything
  const uint64_t least = estimate_host_bytes(c, gpu);
  EXPECT_GE(estimate_host_bytes(c, cpu_oracles) - least, 150 * head);  // ~20 float64 matrices of one head
  EXPECT_EQ(estimate_host_bytes(c, reference_backend), estimate_host_bytes(c, cpu_oracles));
  EXPECT_GE(estimate_host_bytes(c, torch_math) - least, 40 * pairs);  // torch.f64's graph of every head
  EXPECT_GE(estimate_host_bytes(c), estimate_host_bytes(c, cpu_oracles));
  EXPECT_GE(estimate_host_bytes(c), estimate_host_bytes(c, torch_math));
  EXPECT_LT(least, estimate_host_bytes(c) / 2);
  // The float64 tensors and the masks count wherever the oracles run.
  EXPECT_GE(least, 8 * 20 * (8 * 2048 * 129 + 8 * 2048 * 128) + pairs);
}

// A reproducer is read without the budget (found with its scores on a GPU, perhaps), and
// checked where it runs for the work done there: the same budget that the GPU set's work fits
// refuses the CPU set's.
TEST(Limits, ACaseIsCheckedForTheWorkWhereItRuns) {
  const std::string text = R"({"format":"attnfuzz-case/1","seed":1,"shape":{"heads_q":8,"seq_q":2048,"head_dim_qk":64}})";
  Case c;
  ASSERT_NO_THROW(c = case_from_string(text, kNoMemoryBudget));
  EXPECT_THROW(case_from_string(text, Limits{uint64_t{2} << 30}), CaseError);  // read as for every kind of work
  EXPECT_NO_THROW(check_memory_budget(c, Limits{uint64_t{2} << 30, HostWork::least()}));
  try {
    check_memory_budget(c, Limits{uint64_t{2} << 30, HostWork{}});
    FAIL() << "accepted";
  } catch (const CaseError& e) {
    EXPECT_EQ(e.field(), "shape");
    EXPECT_NE(std::string(e.what()).find("over the memory budget of 2048 MiB"), std::string::npos) << e.what();
  }
  // A shape whose estimate saturates is read, and refused by any budget where it runs.
  Case huge = c;
  huge.shape = {1 << 30, 1 << 30, 1 << 30, 1 << 30, 1 << 30, 1 << 30, 1 << 30};
  EXPECT_THROW(check_memory_budget(huge, Limits{uint64_t{1} << 60, HostWork::least()}), CaseError);
}

TEST(Limits, MaskExpressionSize) {
  auto and_of = [](size_t n) {
    std::string s =
        R"({"format":"attnfuzz-case/1","seed":1,"shape":{"heads_q":1,"seq_q":64,"head_dim_qk":8},"mask":{"kind":"and","args":[)";
    for (size_t i = 0; i < n; ++i) s += std::string(i ? "," : "") + R"({"kind":"causal"})";
    return s + "]}}";
  };
  EXPECT_NO_THROW(case_from_string(and_of(kMaxMaskSize - 1)));
  EXPECT_EQ(rejected_field(and_of(kMaxMaskSize)), "mask");
  EXPECT_EQ(rejected_field(and_of(20000)), "mask.args");  // refused while parsing, before building
  // Document segments count: each is a step of every evaluation.
  Case c = small_case();
  c.mask.kind = MaskExpr::Kind::document;
  c.mask.segments_q.assign(kMaxMaskSize, 0);
  c.mask.segments_kv.assign(kMaxMaskSize, 0);
  c.mask.segments_q.back() = c.shape.seq_q;
  c.mask.segments_kv.back() = c.shape.seq_kv;
  EXPECT_THROW(validate(c), CaseError);
}

TEST(Limits, DuplicateKeysAreRejectedAtEveryLevel) {
  EXPECT_EQ(rejected_field(R"({"format":"attnfuzz-case/1","seed":1,"seed":2,"shape":{"heads_q":1,"seq_q":8,"head_dim_qk":8}})"), "<json>");
  EXPECT_EQ(rejected_field(R"({"format":"attnfuzz-case/1","seed":1,"shape":{"heads_q":1,"seq_q":8,"seq_q":9,"head_dim_qk":8}})"), "<json>");
  EXPECT_EQ(rejected_field(R"({"format":"attnfuzz-case/1","seed":1,"shape":{"heads_q":1,"seq_q":8,"head_dim_qk":8},
      "mask":{"kind":"and","args":[{"kind":"causal","align":"top_left","align":"bottom_right"}]}})"),
            "<json>");
  // The same key in sibling objects is fine.
  EXPECT_EQ(rejected_field(R"({"format":"attnfuzz-case/1","seed":1,"shape":{"heads_q":1,"seq_q":8,"head_dim_qk":8},
      "mask":{"kind":"and","args":[{"kind":"causal"},{"kind":"causal"}]}})"),
            "");
}

TEST(Limits, QuotedInputIsCutInMessages) {
  const std::string huge(1 << 20, 'x');
  for (const std::string& text :
       {R"({"format":")" + huge + R"(","seed":1})",
        std::string(R"({"format":"attnfuzz-case/1","seed":1,"dtype":")") + huge + R"(","shape":{"heads_q":1,"seq_q":8,"head_dim_qk":8}})",
        std::string(R"({"format":"attnfuzz-case/1","seed":1,")") + huge + R"(":1,"shape":{"heads_q":1,"seq_q":8,"head_dim_qk":8}})",
        std::string(R"({"format":"attnfuzz-case/1","seed":1,"dtype":"a\nb","shape":{"heads_q":1,"seq_q":8,"head_dim_qk":8}})")}) {
    try {
      case_from_string(text);
      ADD_FAILURE() << "accepted";
    } catch (const CaseError& e) {
      EXPECT_LT(std::string(e.what()).size(), 1000u);
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
    }
  }
}

TEST(Limits, OnlyRegularFilesWithinTheSizeLimitAreRead) {
  namespace fs = std::filesystem;
  auto message = [](const std::string& path) {
    try {
      load_case_file(path);
    } catch (const CaseError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(message("/dev/zero").find("not a regular file"), std::string::npos);
  EXPECT_NE(message("/dev/urandom").find("not a regular file"), std::string::npos);
  const fs::path dir = fs::temp_directory_path() / ("attnfuzz-limits-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  EXPECT_NE(message(dir.string()).find("is a directory"), std::string::npos);
  const std::string fifo = (dir / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_NE(message(fifo).find("not a regular file"), std::string::npos);  // and does not wait for a writer
  const std::string big = (dir / "big.json").string();
  {
    std::ofstream out(big);
    out << R"({"format":"attnfuzz-case/1","seed":1,"pad":")" << std::string(kMaxInputFileBytes, ' ') << "\"}";
  }
  EXPECT_NE(message(big).find("size limit"), std::string::npos);
  fs::remove_all(dir);
}

// --- issue 16: reproducers carry a checksum of what decides their replay -------------------

Reproducer sample_repro() {
  Reproducer r;
  r.c = small_case();
  r.backends = {"reference", "torch.math"};
  r.finding.signature = Signature{"torch.math", CompositionClass::single, TensorId::dQ, FindingClass::mismatch, DType::f32, "none"};
  r.finding.detail = "rms 1e-3 over 1e-5";
  r.input_checksum = checksum(generate_inputs(r.c));
  return r;
}

nlohmann::json edit(const std::string& text, const std::function<void(nlohmann::json&)>& f) {
  nlohmann::json j = nlohmann::json::parse(text);
  f(j);
  return j;
}

TEST(ReproChecksum, AWrittenReproducerReadsBackVerified) {
  const Reproducer back = parse_repro(write_repro(sample_repro()));
  EXPECT_FALSE(back.legacy_checksum);
  EXPECT_EQ(back.c, sample_repro().c);
  EXPECT_EQ(write_repro(back), write_repro(sample_repro()));
}

TEST(ReproChecksum, AnyEditOfWhatDecidesTheReplayIsRefused) {
  const std::string text = write_repro(sample_repro());
  using J = nlohmann::json;
  const std::vector<std::pair<std::string, std::function<void(J&)>>> edits = {
      {"seed", [](J& j) { j["case"]["seed"] = 2; }},
      {"mask",
       [](J& j) {
         j["case"]["mask"] = J{{"kind", "causal"}};
       }},
      {"composition",
       [](J& j) {
         j["case"]["composition"] = J{{"kind", "kv_split"}, {"bounds", {4}}};
       }},
      {"backends", [](J& j) { j["backends"] = J::array({"reference"}); }},
      {"signature", [](J& j) { j["finding"]["signature"]["tensor"] = "dK"; }},
      {"input_checksum", [](J& j) { j["input_checksum"] = "0000000000000001"; }},
      {"no finding", [](J& j) { j.erase("finding"); }},
      {"no input_checksum", [](J& j) { j.erase("input_checksum"); }},
      {"no case", [](J& j) { j.erase("case"); }},
      {"no format", [](J& j) { j.erase("format"); }},
      {"format 2", [](J& j) { j["format"] = "attnfuzz-repro/2"; }},
  };
  for (const auto& [name, f] : edits) EXPECT_THROW(parse_repro(edit(text, f).dump()), CaseError) << name;
  // What does not decide the replay may change (detail, environment, case index).
  EXPECT_NO_THROW(parse_repro(edit(text, [](J& j) { j["finding"]["detail"] = "reworded"; }).dump()));
  for (const std::string& bad : std::vector<std::string>{"", "{", "[]", "null", text.substr(0, text.size() / 2)})
    EXPECT_THROW(parse_repro(bad), CaseError) << bad;
}

TEST(ReproChecksum, ReproducersWrittenBeforeTheFieldStillLoadAsLegacy) {
  const std::string text = edit(write_repro(sample_repro()), [](nlohmann::json& j) { j.erase("record_checksum"); }).dump();
  const Reproducer r = parse_repro(text);
  EXPECT_TRUE(r.legacy_checksum);
  EXPECT_EQ(r.input_checksum, sample_repro().input_checksum);
}

}  // namespace
}  // namespace attnfuzz
