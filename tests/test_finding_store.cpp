// The findings store (campaign/finding_store.h) and `merge` agree: one representative per
// bucket, the earliest in the case stream, under the bucket's file name, whatever the order
// in which shards or workers offer them.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "campaign/finding_store.h"
#include "campaign/output_file.h"

namespace attnfuzz {
namespace {
namespace fs = std::filesystem;

Reproducer finding(int64_t index, const std::string& dtype, const std::string& mask) {
  Reproducer r;
  r.c.seed = static_cast<uint64_t>(index);
  r.case_index = index;
  r.finding.signature = {"mutant", CompositionClass::single, TensorId::dK, FindingClass::mismatch, dtype_from_string(dtype), mask};
  return r;
}

std::set<std::string> files_in(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

class FindingStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("attnfuzz-store-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "-" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path root_;
};

TEST_F(FindingStoreTest, OneBucketOneFileTheEarliestCaseWinsInAnyOrder) {
  // One bucket (backend/composition/tensor/class) under two dtypes and masks: two full
  // signatures, as two shards would record them.
  const Reproducer early = finding(3, "bf16", "causal"), late = finding(8, "fp16", "none");
  FindingStore forward((root_ / "a").string()), backward((root_ / "b").string());
  EXPECT_TRUE(forward.record(late));
  EXPECT_TRUE(forward.record(early));  // earlier: replaces
  EXPECT_TRUE(backward.record(early));
  EXPECT_FALSE(backward.record(late));  // later: kept out
  EXPECT_EQ(forward.signatures(), backward.signatures());
  EXPECT_EQ(forward.signatures(), std::vector<std::string>{early.finding.signature.to_string()});
  EXPECT_EQ(files_in((root_ / "a").string()), files_in((root_ / "b").string()));
  EXPECT_EQ(files_in((root_ / "a").string()), std::set<std::string>{bucket_file_name(early.finding.signature)});
  EXPECT_EQ(load_repro((root_ / "a" / bucket_file_name(early.finding.signature)).string()).case_index, 3);
}

TEST_F(FindingStoreTest, AReplacedRepresentativeTakesItsMinimizedFileAlongAndDropsTheStaleOne) {
  const std::string dir = (root_ / "s").string();
  FindingStore store(dir);
  fs::create_directories(root_ / "src");
  const std::string min = (root_ / "src" / "x.min.json").string();
  write_file_atomic(min, write_repro(finding(9, "fp16", "none")));
  const std::string file = bucket_file_name(finding(9, "fp16", "none").finding.signature);
  const std::string min_name = file.substr(0, file.size() - 5) + ".min.json";
  EXPECT_TRUE(store.record(finding(9, "fp16", "none"), min));
  EXPECT_TRUE(fs::exists(dir + "/" + min_name));
  EXPECT_TRUE(store.record(finding(2, "bf16", "none")));  // no minimized file of its own
  EXPECT_FALSE(fs::exists(dir + "/" + min_name)) << "the old representative's minimization no longer belongs to the bucket";
}

TEST_F(FindingStoreTest, ReopeningTheDirectoryKeepsTheRepresentatives) {
  const std::string dir = (root_ / "r").string();
  {
    FindingStore store(dir);
    store.record(finding(4, "fp16", "none"));
  }
  FindingStore again(dir);
  EXPECT_FALSE(again.record(finding(6, "bf16", "none")));
  EXPECT_TRUE(again.record(finding(1, "bf16", "none")));
  EXPECT_EQ(again.by_class().at("mismatch"), 1);
}

}  // namespace
}  // namespace attnfuzz
