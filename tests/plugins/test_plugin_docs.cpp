// The documented plugins are the built plugins: docs/plugins.md carries minimal_plugin.c
// and minimal_cuda_plugin.cu verbatim, and the C one, loaded through the C ABI, matches the
// float64 reference (the CUDA one is run on a GPU by cuda_plugin_test.sh).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <ostream>
#include <sstream>

#include "tests/plugins/plugin_test_util.h"

namespace attnfuzz {
namespace {

using namespace plugin_test;

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

std::string plugin_path(const std::string& name) { return std::string(ATTNFUZZ_PLUGIN_DIR) + "/libattnfuzz_plugin_" + name + ".so"; }

TEST(PluginDocs, MinimalPluginSourceIsInTheDocsVerbatim) {
  const std::string src = read_file(ATTNFUZZ_SOURCE_DIR "/tests/plugins/minimal_plugin.c");
  const std::string doc = read_file(ATTNFUZZ_SOURCE_DIR "/docs/plugins.md");
  ASSERT_FALSE(src.empty());
  ASSERT_FALSE(doc.empty());
  EXPECT_NE(doc.find("```c\n" + src + "```\n"), std::string::npos)
      << "docs/plugins.md must hold tests/plugins/minimal_plugin.c verbatim in a ```c block";
}

// The CUDA plugin of the docs is the one the gpu preset builds and cuda_plugin_test.sh runs.
TEST(PluginDocs, MinimalCudaPluginSourceIsInTheDocsVerbatim) {
  const std::string src = read_file(ATTNFUZZ_SOURCE_DIR "/tests/plugins/minimal_cuda_plugin.cu");
  const std::string doc = read_file(ATTNFUZZ_SOURCE_DIR "/docs/plugins.md");
  ASSERT_FALSE(src.empty());
  EXPECT_NE(doc.find("```cuda\n" + src + "```\n"), std::string::npos)
      << "docs/plugins.md must hold tests/plugins/minimal_cuda_plugin.cu verbatim in a ```cuda block";
}

struct NamedCase {
  std::string name;
  Case c;
};

std::vector<NamedCase> cases() {
  MaskExpr doc;  // queries 0..2 form a document without keys: fully masked rows
  doc.kind = MaskExpr::Kind::document;
  doc.segments_q = {3, 9};
  doc.segments_kv = {0, 19};
  return {
      {"gqa_softcap_dlse_document_bshd",
       make_case(21, {2, 4, 2, 12, 19, 16, 8}, DType::f32, doc, true, 2.5, Layouts::uniform({TensorLayout::Order::bshd, 3}))},
      {"causal_br_sq_gt_skv_dlse", make_case(22, {1, 2, 1, 17, 9, 8, 8}, DType::f32, MaskExpr::causal_mask(Align::bottom_right), true)},
      {"window_dqk_ne_dv_bhsd_padded",
       make_case(23, {1, 3, 3, 20, 26, 12, 20}, DType::f32, MaskExpr::window(4, 3, Align::top_left), false, std::nullopt,
                 Layouts::uniform({TensorLayout::Order::bhsd, 2}))},
  };
}

// Test names show the case name, not a byte dump of the parameter.
void PrintTo(const NamedCase& c, std::ostream* os) { *os << c.name; }

class PluginMinimal : public ::testing::TestWithParam<NamedCase> {};

TEST_P(PluginMinimal, MatchesReference) {
  auto lib = open_plugin(plugin_path("minimal"));
  ASSERT_TRUE(lib->plugin) << lib->error;
  const Compared r = compare_with_reference(*lib->plugin, GetParam().c);
  ASSERT_EQ(r.run.error, "");
  std::printf("[ measured ] minimal %-32s %s\n", GetParam().name.c_str(), r.err.str().c_str());
  EXPECT_EQ(r.run.unwritten, 0u);
  EXPECT_EQ(r.run.padding_touched, 0u);
  EXPECT_LE(r.err.max(), 1e-5) << r.err.str();
}
INSTANTIATE_TEST_SUITE_P(Fp32, PluginMinimal, ::testing::ValuesIn(cases()), [](const auto& info) { return info.param.name; });

TEST(PluginMinimalContract, RejectsOtherDtypesWithAReason) {
  auto lib = open_plugin(plugin_path("minimal"));
  ASSERT_TRUE(lib->plugin) << lib->error;
  EXPECT_STREQ(lib->plugin->contract_json, R"({"fp32":"fp32"})");
  EXPECT_EQ(lib->plugin->flags, AF_BACKWARD_TAKES_DLSE | AF_MASKED_ROWS_ZERO);
  const Case c = make_case(24, {1, 1, 1, 4, 4, 8, 8}, DType::bf16);
  const Compared r = compare_with_reference(*lib->plugin, c);
  EXPECT_EQ(r.run.error, "supports: minimal plugin: fp32 only");
}

TEST(PluginWrongAbi, ReportsItsVersionAndIsNotAskedForItsTable) {
  auto lib = open_plugin(plugin_path("wrong_abi"));
  EXPECT_EQ(lib->error, "");
  EXPECT_EQ(lib->abi_version, 999u);
  EXPECT_EQ(lib->plugin, nullptr);
}

}  // namespace
}  // namespace attnfuzz
