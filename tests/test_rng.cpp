#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "harness/case.h"
#include "harness/inputs.h"
#include "harness/parallel.h"
#include "harness/rng.h"

namespace attnfuzz {
namespace {

// Known-answer vectors of Philox4x32-10 from the Random123 distribution (kat_vectors).
TEST(Philox, KnownAnswers) {
  EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, 0), (Philox4{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  EXPECT_EQ(philox4x32_10({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, 0xffffffffffffffffull),
            (Philox4{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  EXPECT_EQ(philox4x32_10({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, 0x299f31d0a4093822ull),
            (Philox4{0xd16cfe09u, 0x94fdcceBu, 0x5001e420u, 0x24126ea1u}));
}

TEST(Philox, NormalHasUnitMoments) {
  double sum = 0, sum2 = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const double x = standard_normal(42, 1, static_cast<uint64_t>(i));
    sum += x;
    sum2 += x * x;
  }
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(sum2 / n, 1.0, 0.01);
}

TEST(Inputs, DeterministicAndIndependentOfGenerationOrder) {
  Case c;
  c.seed = 99;
  c.shape = {2, 4, 2, 5, 7, 3, 6};
  c.dtype = DType::bf16;
  c.d_lse = ValueDist{};
  const Inputs a = generate_inputs(c), b = generate_inputs(c);
  EXPECT_EQ(checksum(a), checksum(b));
  EXPECT_EQ(a.q, b.q);
  // Element i is f(seed, tensor, i): recomputing one element alone gives the same value.
  EXPECT_EQ(a.k.data[17], round_to(DType::bf16, draw_value(c.k, c.seed, TensorId::K, 17)));
  // Every value is representable in the dtype.
  for (double x : a.v.data) EXPECT_EQ(x, round_to(DType::bf16, x));
  Case other = c;
  other.seed = 100;
  EXPECT_NE(checksum(a), checksum(generate_inputs(other)));
  // Different tensors draw from different streams.
  EXPECT_NE(a.q.data[0], a.k.data[0]);
}

// Tensors of at least kParallelMinElements are filled by several threads (harness/parallel.h):
// every element must still be the one serial draw gives, each index visited once.
TEST(Inputs, ThreadedGenerationEqualsSerialDraws) {
  Case c;
  c.seed = 7;
  c.shape = {1, 2, 2, 4099, 4099, 128, 136};  // 1.05M elements in Q: above the threshold, not a multiple of the split
  c.dtype = DType::f16;
  c.d_lse = ValueDist{};
  ASSERT_GE(static_cast<size_t>(c.shape.batch * c.shape.heads_q * c.shape.seq_q * c.shape.head_dim_qk), kParallelMinElements);
  const Inputs in = generate_inputs(c);
  size_t mismatches = 0;
  for (size_t i = 0; i < in.q.numel(); ++i) mismatches += in.q.data[i] != round_to(DType::f16, draw_value(c.q, c.seed, TensorId::Q, i));
  for (size_t i = 0; i < in.v.numel(); ++i) mismatches += in.v.data[i] != round_to(DType::f16, draw_value(c.v, c.seed, TensorId::V, i));
  EXPECT_EQ(mismatches, 0u);
  std::vector<int> visits(kParallelMinElements + 12345, 0);
  parallel_for(visits.size(), [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) ++visits[i];
  });
  EXPECT_EQ(std::count(visits.begin(), visits.end(), 1), static_cast<std::ptrdiff_t>(visits.size()));
}

TEST(Inputs, DistributionsDoWhatTheySay) {
  Case c;
  c.shape = {1, 1, 1, 64, 64, 16, 16};
  c.q = {ValueDist::Kind::near_constant, 0.1, 0.0, 0, 0};
  c.k = {ValueDist::Kind::outliers, 0.0, 1.0, 0.1, 50.0};
  c.v = {ValueDist::Kind::uniform, 2.0, 0.5, 0, 0};
  const Inputs in = generate_inputs(c);
  for (double x : in.q.data) EXPECT_EQ(x, static_cast<float>(0.1));
  int outliers = 0;
  for (double x : in.k.data) outliers += std::fabs(x) == 50.0;
  EXPECT_GT(outliers, 50);
  EXPECT_LT(outliers, 160);
  for (double x : in.v.data) {
    EXPECT_GE(x, 1.5);
    EXPECT_LE(x, 2.5);
  }
  for (double x : in.d_lse.data) EXPECT_EQ(x, 0.0);  // default dLSE: zero
}

}  // namespace
}  // namespace attnfuzz
