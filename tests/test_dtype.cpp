#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <random>

#include "harness/dtype.h"

#if ATTNFUZZ_HAVE_CUDA_FP16
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

namespace attnfuzz {
namespace {

// Widening by formula: sign * 2^(e-15) * (1 + m/1024), or subnormal m * 2^-24.
double half_value(uint16_t h) {
  const int e = (h >> 10) & 31, m = h & 1023;
  const double s = (h & 0x8000) ? -1.0 : 1.0;
  if (e == 31) return m ? std::numeric_limits<double>::quiet_NaN() : s * std::numeric_limits<double>::infinity();
  if (e == 0) return s * std::ldexp(m, -24);
  return s * std::ldexp(1024 + m, e - 25);
}

TEST(Half, WideningAllBitPatternsMatchesFormula) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = half_bits_to_float(static_cast<uint16_t>(h));
    const double want = half_value(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(f)) << h;
    } else {
      EXPECT_EQ(static_cast<double>(f), want) << h;
      EXPECT_EQ(std::signbit(f), (h & 0x8000) != 0) << h;
      EXPECT_EQ(float_to_half_bits(f), h) << "narrowing must invert widening for " << h;
    }
  }
}

TEST(BFloat16, WideningAllBitPatternsInvertsNarrowing) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = bf16_bits_to_float(static_cast<uint16_t>(b));
    EXPECT_EQ(std::bit_cast<uint32_t>(f), b << 16);
    if (!std::isnan(f)) {
      EXPECT_EQ(float_to_bf16_bits(f), b);
    }
  }
}

std::vector<float> edge_floats() {
  std::vector<float> v{0.0f,
                       -0.0f,
                       1.0f,
                       -1.0f,
                       65504.0f,
                       65519.996f,
                       65520.0f,
                       65536.0f,
                       1e10f,
                       std::numeric_limits<float>::infinity(),
                       -std::numeric_limits<float>::infinity(),
                       std::numeric_limits<float>::quiet_NaN(),
                       std::numeric_limits<float>::max(),
                       std::numeric_limits<float>::min(),
                       std::numeric_limits<float>::denorm_min(),
                       std::ldexp(1.0f, -24),
                       std::ldexp(1.0f, -25),
                       std::ldexp(1.5f, -25),
                       std::ldexp(1.0f, -26),
                       std::ldexp(1.0f, -14),
                       std::ldexp(1023.0f, -24),
                       std::ldexp(1023.5f, -24),
                       std::ldexp(3.0f, -26)};
  // Exact ties between neighbouring halfs and bfloat16s, and their neighbours.
  for (uint32_t h : {0x0001u, 0x0002u, 0x03ffu, 0x0400u, 0x3c00u, 0x3c01u, 0x7bfeu}) {
    const float a = half_bits_to_float(static_cast<uint16_t>(h)), b = half_bits_to_float(static_cast<uint16_t>(h + 1));
    const float mid = static_cast<float>((static_cast<double>(a) + b) / 2);
    v.insert(v.end(), {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f), -mid});
  }
  for (uint32_t b : {0x3f80u, 0x3f81u, 0x0001u, 0x7f7fu, 0x0080u}) {
    const uint32_t tie = (b << 16) | 0x8000u;
    for (uint32_t x : {tie, tie - 1, tie + 1, tie | 0x80000000u}) v.push_back(std::bit_cast<float>(x));
  }
  return v;
}

#if ATTNFUZZ_HAVE_CUDA_FP16
TEST(Half, WideningMatchesCudaHeaders) {
  for (uint32_t h = 0; h < 65536; ++h) {
    __half_raw raw;
    raw.x = static_cast<unsigned short>(h);
    const float cuda = __half2float(__half(raw));
    const float ours = half_bits_to_float(static_cast<uint16_t>(h));
    if (std::isnan(cuda)) {
      EXPECT_TRUE(std::isnan(ours));
    } else {
      EXPECT_EQ(std::bit_cast<uint32_t>(cuda), std::bit_cast<uint32_t>(ours)) << h;
    }
  }
}

uint16_t cuda_half_bits(float f) { return static_cast<__half_raw>(__float2half_rn(f)).x; }
uint16_t cuda_bf16_bits(float f) { return static_cast<__nv_bfloat16_raw>(__float2bfloat16_rn(f)).x; }

void expect_same_narrowing(float f) {
  const uint16_t h = float_to_half_bits(f), ch = cuda_half_bits(f);
  const uint16_t b = float_to_bf16_bits(f), cb = cuda_bf16_bits(f);
  if (std::isnan(f)) {  // any NaN pattern is fine, as long as it stays NaN
    EXPECT_TRUE(std::isnan(half_bits_to_float(h)));
    EXPECT_TRUE(std::isnan(bf16_bits_to_float(b)));
    return;
  }
  ASSERT_EQ(h, ch) << "fp16 narrowing of " << f << " (bits " << std::hex << std::bit_cast<uint32_t>(f) << ")";
  ASSERT_EQ(b, cb) << "bf16 narrowing of " << f << " (bits " << std::hex << std::bit_cast<uint32_t>(f) << ")";
}

TEST(Narrowing, EdgesMatchCudaHeaders) {
  for (float f : edge_floats()) expect_same_narrowing(f);
}

TEST(Narrowing, RandomFloatsMatchCudaHeaders) {
  std::mt19937_64 rng(12345);
  // Random bit patterns cover every exponent; random values in the half range stress rounding.
  for (int i = 0; i < 2'000'000; ++i) expect_same_narrowing(std::bit_cast<float>(static_cast<uint32_t>(rng())));
  std::uniform_real_distribution<float> u(-70000.0f, 70000.0f);
  for (int i = 0; i < 1'000'000; ++i) expect_same_narrowing(u(rng));
  std::normal_distribution<float> n(0.0f, 1e-5f);
  for (int i = 0; i < 1'000'000; ++i) expect_same_narrowing(n(rng));
}
#else
TEST(Narrowing, MatchesCudaHeaders) { GTEST_SKIP() << "cuda_fp16.h not found at configure time: comparison with the CUDA headers skipped"; }
#endif

TEST(Rounding, RoundToIsIdempotentAndMonotone) {
  std::mt19937_64 rng(7);
  std::normal_distribution<double> n(0.0, 100.0);
  for (DType d : {DType::f32, DType::f16, DType::bf16}) {
    double prev_r = -1e9;
    std::vector<double> xs;
    for (int i = 0; i < 20000; ++i) xs.push_back(n(rng));
    std::sort(xs.begin(), xs.end());
    for (double x : xs) {
      const double r = round_to(d, x);
      EXPECT_EQ(round_to(d, r), r);
      EXPECT_LE(std::fabs(r - x), unit_roundoff(d) * std::fabs(x) * 1.0001 + 1e-7);
      EXPECT_GE(r, prev_r) << "rounding must be monotone";
      prev_r = r;
    }
  }
}

TEST(Rounding, MantissaRoundingEmulatesTf32AndBf16) {
  EXPECT_EQ(round_mantissa(1.0f + std::ldexp(1.0f, -11), 10), 1.0f);                             // tie to even
  EXPECT_EQ(round_mantissa(1.0f + 3 * std::ldexp(1.0f, -11), 10), 1.0f + std::ldexp(1.0f, -9));  // tie to even, up
  EXPECT_EQ(round_mantissa(1.0f + std::ldexp(1.0f, -23), 10), 1.0f);
  std::mt19937_64 rng(3);
  for (int i = 0; i < 100000; ++i) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(rng()) & 0xbfffffffu);  // finite
    if (!std::isfinite(f)) continue;
    EXPECT_EQ(std::bit_cast<uint32_t>(round_mantissa(f, 7)), static_cast<uint32_t>(float_to_bf16_bits(f)) << 16) << f;
  }
}

// 3xTF32 carries an operand as two TF32 parts: about 21 mantissa bits, so its relative error is
// at most 2^-22 (small's rounding), four times fp32's operand unit and far finer than TF32's.
TEST(Rounding, Tf32x3KeepsTwoTf32PartsOfTheOperand) {
  EXPECT_EQ(round_tf32x3(1.0f + std::ldexp(1.0f, -11)), 1.0f + std::ldexp(1.0f, -11));  // big's tie, kept by small
  EXPECT_EQ(round_tf32x3(1.0f + std::ldexp(1.0f, -23)), 1.0f + std::ldexp(1.0f, -23));  // small keeps a lone low bit
  // A remainder of 12 significant bits loses its last (a tie, to even).
  EXPECT_EQ(round_tf32x3(1.0f + std::ldexp(1.0f, -12) + std::ldexp(1.0f, -23)), 1.0f + std::ldexp(1.0f, -12));
  EXPECT_EQ(round_tf32x3(-3.0f), -3.0f);
  EXPECT_TRUE(std::isinf(round_tf32x3(INFINITY)));
  std::mt19937_64 rng(5);
  double worst = 0, sum_sq = 0, tf32_sum_sq = 0;
  int n = 0;
  for (int i = 0; i < 100000; ++i) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(rng()) & 0xbfffffffu);
    if (!std::isfinite(f) || std::fabs(f) < 1e-30f || std::fabs(f) > 1e30f) continue;
    const double rel = std::fabs((static_cast<double>(round_tf32x3(f)) - f) / f);
    const double rel_tf32 = std::fabs((static_cast<double>(round_mantissa(f, 10)) - f) / f);
    worst = std::max(worst, rel);
    sum_sq += rel * rel;
    tf32_sum_sq += rel_tf32 * rel_tf32;
    ++n;
  }
  EXPECT_LE(worst, std::ldexp(1.0, -22));
  // Not fp32 itself (most values lose their last one or two bits) and not TF32 (2^11 finer).
  EXPECT_GT(std::sqrt(sum_sq / n), std::ldexp(1.0, -26));
  EXPECT_LT(std::sqrt(sum_sq / n) * 1000, std::sqrt(tf32_sum_sq / n));
}

}  // namespace
}  // namespace attnfuzz
