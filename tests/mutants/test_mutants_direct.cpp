// The mutant zoo, loaded directly through the C ABI (no harness loader, no composition):
// the correct build matches the float64 reference on every feature the bugs hide in, and
// each planted bug shows on its trigger case and stays silent on a neighbour that does
// not trigger it. The crash and hang mutants are only loaded, never run, here.
#include <gtest/gtest.h>

#include <cstdio>
#include <ostream>
#include <string>

#include "tests/plugins/plugin_test_util.h"

namespace attnfuzz {
namespace {

using namespace plugin_test;

std::string mutant_path(const std::string& name) { return std::string(ATTNFUZZ_MUTANT_DIR) + "/libattnfuzz_mutant_" + name + ".so"; }

// Agreement with float64 for the declared contract: fp32 strict; fp16/bf16 with P, dS and
// every output rounded to the dtype.
double tolerance(DType d) { return d == DType::f32 ? 1e-5 : d == DType::f16 ? 5e-3 : 2e-2; }

MaskExpr op(MaskExpr::Kind k, std::vector<MaskExpr> args) { return MaskExpr::op(k, std::move(args)); }
MaskExpr causal_br() { return MaskExpr::causal_mask(Align::bottom_right); }
MaskExpr document(std::vector<int64_t> q, std::vector<int64_t> kv) {
  MaskExpr m;
  m.kind = MaskExpr::Kind::document;
  m.segments_q = std::move(q);
  m.segments_kv = std::move(kv);
  return m;
}
MaskExpr random_mask(double density, uint64_t seed) {
  MaskExpr m;
  m.kind = MaskExpr::Kind::random;
  m.density = density;
  m.seed = seed;
  return m;
}
const Layouts kBshdPadded = Layouts::uniform({TensorLayout::Order::bshd, 3});
const Layouts kBhsdPadded = Layouts::uniform({TensorLayout::Order::bhsd, 1});

struct NamedCase {
  std::string name;
  Case c;
};

// Everything the bugs hide in: GQA, softcap, dLSE, Sq != Skv, Skv % 8 != 0, Dqk != Dv,
// fully masked rows, strided layouts, three dtypes.
std::vector<NamedCase> ok_cases() {
  return {
      // Queries 0..4 form a document with no keys: fully masked rows.
      {"gqa_softcap_dlse_doc_random_fp32_bshd",
       make_case(1, {2, 4, 2, 13, 21, 16, 8}, DType::f32, op(MaskExpr::Kind::and_, {document({5, 8}, {0, 21}), random_mask(0.7, 3)}), true,
                 2.0, kBshdPadded)},
      {"causal_br_sq_lt_skv_dlse_fp32", make_case(2, {1, 2, 2, 8, 20, 16, 16}, DType::f32, causal_br(), true)},
      // Bottom-right with Sq > Skv: the first Sq - Skv rows see no key.
      {"mqa_causal_br_sq_gt_skv_fp32_bhsd",
       make_case(3, {1, 2, 1, 20, 11, 8, 12}, DType::f32, causal_br(), true, std::nullopt, kBhsdPadded)},
      {"plain_fp32", make_case(4, {1, 2, 2, 16, 16, 16, 16}, DType::f32)},
      {"window_dlse_fp16", make_case(5, {1, 3, 3, 33, 33, 16, 16}, DType::f16, MaskExpr::window(5, 2, Align::top_left), true)},
      {"gqa_softcap_causal_br_bf16_bshd", make_case(6, {1, 4, 2, 24, 37, 32, 16}, DType::bf16, causal_br(), true, 3.0, kBshdPadded)},
      // Every tensor its own order, padding and unaligned offset; packed QKV in, packed dK/dV out.
      {"exotic_layouts_packed_fp16",
       make_case(7, {2, 2, 2, 17, 17, 16, 16}, DType::f16, causal_br(), true, std::nullopt, exotic_layouts(Packing::qkv, Packing::kv))},
      {"exotic_layouts_gqa_bf16",
       make_case(8, {2, 4, 2, 9, 23, 16, 8}, DType::bf16, MaskExpr::window(4, 1, Align::top_left), true, 2.0, exotic_layouts())},
  };
}

Compared run_mutant(const std::string& name, const Case& c) {
  auto lib = open_plugin(mutant_path(name));
  EXPECT_TRUE(lib->plugin) << mutant_path(name) << ": " << lib->error;
  if (!lib->plugin) return {};
  Compared r = compare_with_reference(*lib->plugin, c);
  EXPECT_EQ(r.run.error, "");
  EXPECT_EQ(r.run.unwritten, 0u);
  EXPECT_EQ(r.run.padding_touched, 0u);
  return r;
}

TEST(MutantZoo, EveryMutantLoadsWithAbiVersion1) {
  for (const char* n : {"ok", "ignores_dlse", "tf32_backward", "causal_align", "last_tile_unmasked", "masked_rows_nan", "gqa_backward_map",
                        "crash", "hang", "underflow_rows_masked", "batch_dependent_split", "tall_causal_tile_noise",
                        "split_exp_overflow"}) {
    auto lib = open_plugin(mutant_path(n));
    ASSERT_TRUE(lib->plugin) << n << ": " << lib->error;
    EXPECT_EQ(lib->abi_version, ATTNFUZZ_PLUGIN_ABI_VERSION);
    EXPECT_EQ(lib->plugin->abi_version, ATTNFUZZ_PLUGIN_ABI_VERSION);
    EXPECT_EQ(std::string(lib->plugin->name), std::string("mutant_") + n);
    EXPECT_EQ(lib->plugin->flags, AF_BACKWARD_TAKES_DLSE | AF_MASKED_ROWS_ZERO | AF_BATCH_INVARIANT);
    EXPECT_STREQ(lib->plugin->contract_json, R"({"fp32":"fp32","fp16":"fp16","bf16":"bf16"})");
  }
}

// Test names show the case name, not a byte dump of the parameter.
void PrintTo(const NamedCase& c, std::ostream* os) { *os << c.name; }

class MutantOk : public ::testing::TestWithParam<NamedCase> {};

TEST_P(MutantOk, MatchesReference) {
  const Case& c = GetParam().c;
  const Compared r = run_mutant("ok", c);
  std::printf("[ measured ] mutant_ok %-40s %s\n", GetParam().name.c_str(), r.err.str().c_str());
  EXPECT_LE(r.err.max(), tolerance(c.dtype)) << r.err.str();
}
INSTANTIATE_TEST_SUITE_P(Cases, MutantOk, ::testing::ValuesIn(ok_cases()), [](const auto& info) { return info.param.name; });

// A bug, where it shows, and where it must not.
struct Bug {
  std::string mutant;
  Case trigger, quiet;
  std::vector<double Errors::*> deviating;  // tensors off on the trigger case
  bool forward_right;                       // O and LSE still match on the trigger case
  double min_error = 1e-2;                  // how far off "clearly" is
};

std::string bug_name(const ::testing::TestParamInfo<Bug>& info) { return info.param.mutant; }

std::vector<Bug> bugs() {
  const Shape mha{1, 2, 2, 16, 16, 16, 16};
  return {
      {"ignores_dlse",
       make_case(11, mha, DType::f32, {}, true),
       make_case(11, mha, DType::f32, {}, false),
       {&Errors::dq, &Errors::dk},
       true},
      // TF32 operands: about 2^-11 relative, far above fp32 but below 1e-2.
      {"tf32_backward",
       make_case(12, {1, 2, 2, 16, 24, 32, 32}, DType::f32, {}, true),
       make_case(12, {1, 2, 2, 16, 24, 32, 32}, DType::bf16, {}, true),
       {&Errors::dq, &Errors::dk, &Errors::dv},
       true,
       1e-4},
      {"causal_align",
       make_case(13, {1, 2, 2, 8, 20, 16, 16}, DType::f32, causal_br(), true),
       make_case(13, mha, DType::f32, causal_br(), true),
       {&Errors::dq, &Errors::dk, &Errors::dv},
       true},
      {"last_tile_unmasked",
       make_case(14, {1, 2, 2, 16, 21, 16, 16}, DType::f32),
       make_case(14, mha, DType::f32),
       {&Errors::o, &Errors::lse, &Errors::dq, &Errors::dk, &Errors::dv},
       false},
      // O is NaN on the fully masked rows (checked below), so every forward error is infinite.
      {"masked_rows_nan",
       make_case(15, {1, 2, 2, 20, 11, 16, 16}, DType::f32, causal_br()),
       make_case(15, mha, DType::f32, causal_br()),
       {&Errors::o},
       false},
      {"gqa_backward_map",
       make_case(16, {1, 4, 2, 16, 16, 16, 16}, DType::f32, {}, true),
       make_case(16, {1, 4, 1, 16, 16, 16, 16}, DType::f32, {}, true),
       {&Errors::dk, &Errors::dv},
       true},
  };
}

void PrintTo(const Bug& b, std::ostream* os) { *os << b.mutant; }

class MutantBug : public ::testing::TestWithParam<Bug> {};

TEST_P(MutantBug, ShowsOnItsTrigger) {
  const Bug& bug = GetParam();
  const Compared r = run_mutant(bug.mutant, bug.trigger);
  std::printf("[ measured ] mutant_%-20s trigger %s\n", bug.mutant.c_str(), r.err.str().c_str());
  for (auto e : bug.deviating) EXPECT_GT(r.err.*e, bug.min_error) << r.err.str();
  if (bug.forward_right) {
    EXPECT_LE(r.err.o, tolerance(bug.trigger.dtype)) << r.err.str();
    EXPECT_LE(r.err.lse, tolerance(bug.trigger.dtype)) << r.err.str();
  }
  if (bug.mutant == "masked_rows_nan") {
    EXPECT_GT(count_nan(r.run.fwd.o), 0u);
  }
}

TEST_P(MutantBug, SilentOnANeighbour) {
  const Bug& bug = GetParam();
  const Compared r = run_mutant(bug.mutant, bug.quiet);
  std::printf("[ measured ] mutant_%-20s quiet   %s\n", bug.mutant.c_str(), r.err.str().c_str());
  EXPECT_LE(r.err.max(), tolerance(bug.quiet.dtype)) << r.err.str();
}
INSTANTIATE_TEST_SUITE_P(Zoo, MutantBug, ::testing::ValuesIn(bugs()), bug_name);

}  // namespace
}  // namespace attnfuzz
