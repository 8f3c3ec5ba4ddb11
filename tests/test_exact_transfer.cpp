// oracles/exact_transfer.h: the width chosen for a tensor is the narrowest that holds every
// element bit for bit, and packing then unpacking in it gives back the same bits, on one thread
// and over several; the content digest that finds a device copy again (oracles/device_mirror.h)
// depends on the bytes alone and tells apart bytes that differ anywhere.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "harness/parallel.h"
#include "oracles/exact_transfer.h"

namespace attnfuzz {
namespace {

ExactWidth width_of(std::vector<double> v) { return narrowest_exact(v.data(), v.size()); }

double bf16_value(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

TEST(ExactTransfer, NarrowestWidthHoldsEveryElement) {
  EXPECT_EQ(width_of({}), ExactWidth::bf16);
  EXPECT_EQ(width_of({0.0, -0.0, 1.0, -2.5, bf16_value(0x3f81), std::numeric_limits<double>::infinity()}), ExactWidth::bf16);
  EXPECT_EQ(width_of({1.0, 1.0 + 0x1p-23}), ExactWidth::f32);            // fp32's last bit, past bf16's
  EXPECT_EQ(width_of({1.0, 1.0 + 0x1p-24}), ExactWidth::f64);            // past fp32's precision
  EXPECT_EQ(width_of({0x1p-149}), ExactWidth::f32);                      // fp32's smallest subnormal
  EXPECT_EQ(width_of({0x1p-133}), ExactWidth::bf16);                     // bf16's smallest subnormal
  EXPECT_EQ(width_of({0x1p-150}), ExactWidth::f64);                      // below fp32's range
  EXPECT_EQ(width_of({1e300}), ExactWidth::f64);                         // above it
  EXPECT_EQ(width_of({0.1}), ExactWidth::f64);
  EXPECT_EQ(width_of({static_cast<double>(0.1f)}), ExactWidth::f32);
}

TEST(ExactTransfer, NaNPayloadsFp32CannotCarryNeedFloat64) {
  const double odd_payload = std::bit_cast<double>(uint64_t{0x7ff8000000000001});
  EXPECT_EQ(width_of({1.0, odd_payload}), ExactWidth::f64);
  std::vector<double> in{odd_payload, std::numeric_limits<double>::quiet_NaN()}, out(2);
  std::vector<uint8_t> bytes(in.size() * 8);
  const ExactWidth w = narrowest_exact(in.data(), in.size());
  pack_exact(in.data(), in.size(), w, bytes.data());
  unpack_exact(bytes.data(), in.size(), w, out.data());
  EXPECT_EQ(std::memcmp(in.data(), out.data(), in.size() * sizeof(double)), 0);
}

// Elements of the given kind: bf16 values, fp32 values, or doubles.
std::vector<double> draw(size_t n, ExactWidth kind, uint64_t seed) {
  std::vector<double> v(n);
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> mantissa(-0.5, 0.5);
  std::uniform_int_distribution<int> exponent(-20, 20);
  for (size_t i = 0; i < n; ++i) {
    const double x = std::ldexp(mantissa(gen), exponent(gen));
    v[i] = kind == ExactWidth::f64 ? x : kind == ExactWidth::f32 ? static_cast<double>(static_cast<float>(x))
                                                                  : bf16_value(static_cast<uint16_t>(std::bit_cast<uint32_t>(static_cast<float>(x)) >> 16));
  }
  return v;
}

TEST(ExactTransfer, RoundTripIsBitForBitOnOneThreadAndMany) {
  const size_t saved = parallel_settings().min_elements.load();
  for (const size_t min_elements : {size_t{1} << 30, size_t{1}}) {
    parallel_settings().min_elements = min_elements;
    for (const ExactWidth kind : {ExactWidth::bf16, ExactWidth::f32, ExactWidth::f64}) {
      const std::vector<double> in = draw(100003, kind, 7 + static_cast<uint64_t>(kind));
      const ExactWidth w = narrowest_exact(in.data(), in.size());
      EXPECT_EQ(w, kind) << to_string(kind);
      std::vector<uint8_t> bytes(in.size() * bytes_of(w));
      pack_exact(in.data(), in.size(), w, bytes.data());
      std::vector<double> out(in.size());
      unpack_exact(bytes.data(), in.size(), w, out.data());
      EXPECT_EQ(std::memcmp(in.data(), out.data(), in.size() * sizeof(double)), 0) << to_string(kind);
    }
  }
  parallel_settings().min_elements = saved;
}

TEST(ExactTransfer, ATooNarrowWidthLosesBits) {
  // What the width choice guards against: fp32 values packed as bf16 do not come back.
  const std::vector<double> in = draw(1000, ExactWidth::f32, 3);
  std::vector<uint8_t> bytes(in.size() * 2);
  pack_exact(in.data(), in.size(), ExactWidth::bf16, bytes.data());
  std::vector<double> out(in.size());
  unpack_exact(bytes.data(), in.size(), ExactWidth::bf16, out.data());
  EXPECT_NE(std::memcmp(in.data(), out.data(), in.size() * sizeof(double)), 0);
}

TEST(ContentDigest, TheSameBytesGiveTheSameDigestOnOneThreadAndMany) {
  const std::vector<double> v = draw(300007, ExactWidth::f64, 11);  // 2.4 MB: 37 chunks, a short last one
  const size_t saved = parallel_settings().min_elements.load();
  parallel_settings().min_elements = size_t{1} << 30;
  const uint64_t one = content_digest(v.data(), v.size() * sizeof(double));
  parallel_settings().min_elements = 1;
  const uint64_t many = content_digest(v.data(), v.size() * sizeof(double));
  parallel_settings().min_elements = saved;
  EXPECT_EQ(one, many);
  const std::vector<double> copy = v;  // another address
  EXPECT_EQ(content_digest(copy.data(), copy.size() * sizeof(double)), one);
}

TEST(ContentDigest, AnyChangedBitOrLengthChangesTheDigest) {
  std::vector<double> v = draw(200003, ExactWidth::bf16, 5);
  const size_t bytes = v.size() * sizeof(double);
  const uint64_t d0 = content_digest(v.data(), bytes);
  auto* raw = reinterpret_cast<unsigned char*>(v.data());
  std::mt19937_64 gen(9);
  // Every byte of the first words, the chunk edges and the tail, and random ones: a flipped bit
  // anywhere is seen.
  std::vector<size_t> at;
  for (size_t i = 0; i < 64; ++i) at.push_back(i);
  for (size_t edge = size_t{1} << 16; edge < bytes; edge += size_t{1} << 16)
    for (size_t i = edge - 8; i < edge + 8; ++i) at.push_back(i);
  for (size_t i = bytes - 24; i < bytes; ++i) at.push_back(i);
  for (int i = 0; i < 300; ++i) at.push_back(static_cast<size_t>(gen() % bytes));
  for (size_t i : at) {
    const unsigned char bit = static_cast<unsigned char>(1u << (gen() % 8));
    raw[i] ^= bit;
    EXPECT_NE(content_digest(v.data(), bytes), d0) << "byte " << i;
    raw[i] ^= bit;
  }
  EXPECT_EQ(content_digest(v.data(), bytes), d0);
  // Two elements swapped, a prefix, and zeros of different lengths.
  std::swap(v[10], v[100000]);
  EXPECT_NE(content_digest(v.data(), bytes), d0);
  std::swap(v[10], v[100000]);
  EXPECT_NE(content_digest(v.data(), bytes - 8), d0);
  const std::vector<double> zeros(1000, 0.0);
  EXPECT_NE(content_digest(zeros.data(), 999 * sizeof(double)), content_digest(zeros.data(), 1000 * sizeof(double)));
  EXPECT_NE(content_digest(zeros.data(), 3), content_digest(zeros.data(), 4));
}

}  // namespace
}  // namespace attnfuzz
