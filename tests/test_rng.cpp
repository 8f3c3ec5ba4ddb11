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
  EXPECT_EQ(a.k.data[17], round_to(DType::bf16, draw_value(c.k, c.seed, TensorId::K, 17, 3)));
  // Every value is representable in the dtype.
  for (double x : a.v.data) EXPECT_EQ(x, round_to(DType::bf16, x));
  Case other = c;
  other.seed = 100;
  EXPECT_NE(checksum(a), checksum(generate_inputs(other)));
  // Different tensors draw from different streams.
  EXPECT_NE(a.q.data[0], a.k.data[0]);
}

// The values that break kernels (harness/case.h): each holds what its name says.
TEST(Inputs, BreakingValuesHoldWhatTheyName) {
  Case c;
  c.seed = 11;
  c.shape = {1, 2, 2, 64, 48, 32, 32};
  c.dtype = DType::bf16;
  const double a = 80.0;  // scale 32^-0.5: query rows shifted by -a^2 / sqrt(32), about -1131
  c.q = ValueDist{ValueDist::Kind::row_shift, 0.0, 1.0, 0.5, -a};
  c.k = ValueDist{ValueDist::Kind::row_shift, 0.0, 1.0, 1.0, a};
  c.v = ValueDist{ValueDist::Kind::subnormal, 0.0, 1.0, 0.5, smallest_normal(DType::bf16)};
  c.d_out = ValueDist{ValueDist::Kind::sparse_rows, 0.0, 1.0, 0.25, 0.0};
  const Inputs in = generate_inputs(c);
  const Shape& s = c.shape;
  const double scale = c.effective_scale();
  int shifted = 0, plain = 0;
  for (int64_t i = 0; i < s.seq_q; ++i) {
    // K's column 0 is a in every row; Q's is -a in about half the rows.
    for (int64_t j = 0; j < s.seq_kv; ++j) ASSERT_EQ(in.k.at(0, 0, j)[0], a);
    double m = -INFINITY, sum = 0;
    std::vector<double> scores;
    for (int64_t j = 0; j < s.seq_kv; ++j) {
      double dot = 0;
      for (int64_t d = 0; d < s.head_dim_qk; ++d) dot += in.q.at(0, 0, i)[d] * in.k.at(0, 0, j)[d];
      scores.push_back(scale * dot);
      m = std::max(m, scale * dot);
    }
    for (double x : scores) sum += std::exp(x - m);
    const double lse = m + std::log(sum);
    if (in.q.at(0, 0, i)[0] == -a) {
      ++shifted;
      EXPECT_LT(lse, -1000.0) << "row " << i;  // far below where exp(S) alone underflows fp32 (about -103)
    } else {
      ++plain;
      EXPECT_GT(lse, -200.0) << "row " << i;
    }
  }
  EXPECT_GT(shifted, 16);
  EXPECT_GT(plain, 16);
  // dO: whole rows of exact zeros, about three quarters of them.
  int zero_rows = 0;
  for (int64_t i = 0; i < s.seq_q; ++i) {
    const double* row = in.d_out.at(0, 1, i);
    const bool zero = std::all_of(row, row + s.head_dim_v, [](double x) { return x == 0.0; });
    zero_rows += zero;
    if (!zero) {
      EXPECT_GT(std::count_if(row, row + s.head_dim_v, [](double x) { return x != 0.0; }), s.head_dim_v / 2);
    }
  }
  EXPECT_GT(zero_rows, s.seq_q / 2);
  EXPECT_LT(zero_rows, s.seq_q);
  // V: about half its elements subnormal in bf16 (nonzero, below 2^-126).
  const size_t subnormal = std::count_if(in.v.data.begin(), in.v.data.end(), [](double x) {
    return x != 0.0 && std::fabs(x) < smallest_normal(DType::bf16);
  });
  EXPECT_GT(subnormal, in.v.numel() / 3);
  EXPECT_LT(subnormal, in.v.numel() * 2 / 3);
  // A zero share of sparse rows is the zero dO.
  c.d_out.fraction = 0.0;
  const Inputs none = generate_inputs(c);
  EXPECT_TRUE(std::all_of(none.d_out.data.begin(), none.d_out.data.end(), [](double x) { return x == 0.0; }));
  // The new kinds leave the draws of the others as they were: K's columns past 0 are K's normal draws.
  Case plain_case = c;
  plain_case.k = ValueDist{};
  const Inputs ref = generate_inputs(plain_case);
  for (int64_t j = 0; j < s.seq_kv; ++j)
    for (int64_t d = 1; d < s.head_dim_qk; ++d) ASSERT_EQ(in.k.at(0, 1, j)[d], ref.k.at(0, 1, j)[d]);
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
  for (size_t i = 0; i < in.q.numel(); ++i) mismatches += in.q.data[i] != round_to(DType::f16, draw_value(c.q, c.seed, TensorId::Q, i, 128));
  for (size_t i = 0; i < in.v.numel(); ++i) mismatches += in.v.data[i] != round_to(DType::f16, draw_value(c.v, c.seed, TensorId::V, i, 136));
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
