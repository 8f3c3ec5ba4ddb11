// The case domain defined once (generators/domain.h): every generator keeps to its tier's
// bounds, and the default mixes reach the head dims kernels instantiate and the tile corners.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "generators/fuzz_decode.h"
#include "generators/mutate.h"
#include "generators/random_case.h"
#include "generators/shrink.h"

namespace attnfuzz {
namespace {

using domain::SizeTier;

void expect_within(const Case& c, const domain::Bounds& b) {
  const Shape& s = c.shape;
  EXPECT_LE(s.batch, b.max_batch);
  EXPECT_LE(s.heads_kv, b.max_heads_kv);
  EXPECT_LE(s.group(), b.max_group);
  EXPECT_LE(s.seq_q, b.seq_q_bound());
  EXPECT_LE(s.seq_kv, b.max_seq);
  EXPECT_LE(std::max(s.head_dim_qk, s.head_dim_v), b.max_dim);
  EXPECT_GE(std::min({s.batch, s.heads_q, s.seq_q, s.seq_kv, s.head_dim_qk, s.head_dim_v}), domain::kMinDim);
}

TEST(Domain, TiersGrowAndNameThemselves) {
  for (SizeTier t : domain::kAllTiers) EXPECT_EQ(domain::tier_from_name(domain::tier_name(t)), t);
  EXPECT_FALSE(domain::tier_from_name("huge"));
  EXPECT_LT(domain::bounds(SizeTier::toy).max_seq, domain::bounds(SizeTier::small).max_seq);
  EXPECT_LT(domain::bounds(SizeTier::small).max_seq, domain::bounds(SizeTier::real).max_seq);
  // The CPU default reaches every kernel head dim; tests stay on the fast toy tier.
  EXPECT_EQ(domain::bounds(domain::kDefaultCpuTier).max_dim, 256);
  EXPECT_LE(domain::bounds(domain::kDefaultCpuTier).max_seq, 64);
  const RandomCaseOptions test_default;
  EXPECT_EQ(test_default.max_seq, domain::bounds(domain::kTestTier).max_seq);
  EXPECT_EQ(test_default.max_dim, domain::bounds(domain::kTestTier).max_dim);
}

TEST(Domain, CornersAreTileMultiplesAndTheirNeighbours) {
  const std::vector<int64_t> c = domain::size_corners(300);
  for (int64_t x : {1, 2, 15, 16, 17, 63, 64, 65, 127, 128, 129, 191, 192, 193, 255, 256, 257})
    EXPECT_TRUE(std::count(c.begin(), c.end(), x)) << x;
  EXPECT_FALSE(std::count(c.begin(), c.end(), 100));
  EXPECT_TRUE(std::is_sorted(c.begin(), c.end()));
  const std::vector<int64_t> d = domain::head_dim_menu(256);
  for (int64_t x : {31, 32, 33, 79, 80, 81, 96, 127, 128, 129, 191, 192, 193, 255, 256})
    EXPECT_TRUE(std::count(d.begin(), d.end(), x)) << x;
  EXPECT_FALSE(std::count(d.begin(), d.end(), 257));
  EXPECT_TRUE(domain::head_dim_menu(16).empty());
}

std::map<int64_t, int> head_dims_of(const std::vector<Case>& cases) {
  std::map<int64_t, int> n;
  for (const Case& c : cases) ++n[c.shape.head_dim_qk], ++n[c.shape.head_dim_v];
  return n;
}

TEST(Domain, RandomCasesKeepToTheirTierAndReachKernelHeadDims) {
  for (SizeTier t : {SizeTier::toy, SizeTier::small, SizeTier::real}) {
    SCOPED_TRACE(domain::tier_name(t));
    const RandomCaseOptions opt = RandomCaseOptions::for_tier(t);
    std::vector<Case> cases;
    for (uint64_t seed = 0; seed < (t == SizeTier::real ? 600u : 3000u); ++seed) {
      cases.push_back(random_case(seed, opt));
      expect_within(cases.back(), domain::bounds(t));
    }
    if (t == SizeTier::toy) continue;
    const auto dims = head_dims_of(cases);
    for (int64_t d : domain::kKernelHeadDims) EXPECT_GE(dims.count(d) ? dims.at(d) : 0, 5) << "head dim " << d;
    int odd = 0, corner_seq = 0;
    for (const auto& [d, n] : dims) odd += d % 2 ? n : 0;
    for (const Case& c : cases) corner_seq += c.shape.seq_q % 64 == 0 || c.shape.seq_q % 64 == 1 || c.shape.seq_q % 64 == 63;
    EXPECT_GE(odd, 100);
    EXPECT_GE(corner_seq, static_cast<int>(cases.size()) / 10);
  }
}

TEST(Domain, FuzzDecoderKeepsToItsTierAndReachesKernelHeadDims) {
  SplitMix r(3);
  std::vector<Case> cases;
  for (int i = 0; i < 20000; ++i) {
    std::vector<uint8_t> bytes(static_cast<size_t>(r.range(0, 64)));
    for (auto& b : bytes) b = static_cast<uint8_t>(r.next());
    cases.push_back(decode_case(bytes.data(), bytes.size()));
    expect_within(cases.back(), domain::bounds(domain::kFuzzTier));
  }
  const auto dims = head_dims_of(cases);
  for (int64_t d : domain::kKernelHeadDims) EXPECT_GE(dims.count(d) ? dims.at(d) : 0, 5) << "head dim " << d;
  int max_seq = 0;
  for (const Case& c : cases) max_seq += c.shape.seq_q == domain::bounds(domain::kFuzzTier).max_seq;
  EXPECT_GE(max_seq, 20);
}

// The decode tier (issue 31's decode shapes): a few queries against a long KV cache, the groups of
// GQA up to 16; from the generator, the fuzz decoder and mutations alike.
TEST(Domain, DecodeTierDrawsFewQueriesAgainstLongKeys) {
  const domain::Bounds b = domain::bounds(SizeTier::decode);
  EXPECT_EQ(b.seq_q_bound(), 16);
  EXPECT_EQ(b.max_seq, 65536);
  const RandomCaseOptions opt = RandomCaseOptions::for_tier(SizeTier::decode);
  int one_query = 0, long_kv = 0, wide_group = 0;
  int64_t longest = 0;
  for (uint64_t seed = 0; seed < 1000; ++seed) {
    const Case c = random_case(seed, opt);
    expect_within(c, b);
    one_query += c.shape.seq_q == 1;
    long_kv += c.shape.seq_kv > 1024;
    wide_group += c.shape.group() > 4;
    longest = std::max(longest, c.shape.seq_kv);
  }
  EXPECT_GE(one_query, 50);    // single-token decode is common
  EXPECT_GE(long_kv, 250);     // Skv is log-uniform over [1, 64k] with tile corners
  EXPECT_GE(wide_group, 300);  // groups above the real tier's 4
  EXPECT_GT(longest, 32768);
  SplitMix r(5);
  for (int i = 0; i < 2000; ++i) {
    std::vector<uint8_t> bytes(static_cast<size_t>(r.range(0, 64)));
    for (auto& x : bytes) x = static_cast<uint8_t>(r.next());
    expect_within(decode_case(bytes.data(), bytes.size(), SizeTier::decode), b);
  }
  CaseMix mix;
  mix.gen = opt;
  int mutants = 0;
  for (uint64_t g = 0; g < 300; ++g)
    if (const std::optional<Case> m = mutate_case(random_case(g, opt), g, SupportEnvelope{}, mix)) {
      ++mutants;
      expect_within(*m, b);
    }
  EXPECT_GT(mutants, 250);
}

TEST(Domain, ShrinkerStepsDownThroughKernelHeadDims) {
  Case c;
  c.shape = {1, 1, 1, 4, 4, 192, 192};
  std::set<int64_t> dims;
  for (const Case& x : shrink_candidates(c)) dims.insert(x.shape.head_dim_qk);
  for (int64_t d : {1, 96, 191, 128, 80, 64, 32}) EXPECT_TRUE(dims.count(d)) << d;
  EXPECT_FALSE(dims.count(256));
}

}  // namespace
}  // namespace attnfuzz
