#include "harness/dtype.h"

#include <bit>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace attnfuzz {

std::string_view to_string(DType d) {
  switch (d) {
    case DType::f32:
      return "fp32";
    case DType::f16:
      return "fp16";
    case DType::bf16:
      return "bf16";
  }
  return "?";
}

DType dtype_from_string(std::string_view s) {
  if (s == "fp32" || s == "float32") return DType::f32;
  if (s == "fp16" || s == "float16") return DType::f16;
  if (s == "bf16" || s == "bfloat16") return DType::bf16;
  throw std::invalid_argument("unknown dtype '" + std::string(s) + "' (expected fp32, fp16 or bf16)");
}

double unit_roundoff(DType d) {
  switch (d) {
    case DType::f32:
      return std::ldexp(1.0, -24);
    case DType::f16:
      return std::ldexp(1.0, -11);
    case DType::bf16:
      return std::ldexp(1.0, -8);
  }
  return 0;
}

double smallest_normal(DType d) { return std::ldexp(1.0, d == DType::f16 ? -14 : -126); }

double overflow_threshold(DType d) {
  switch (d) {
    case DType::f32:
      return std::ldexp(static_cast<double>((1 << 25) - 1), 103);  // (2^24 - 1/2) 2^104
    case DType::f16:
      return 65520.0;
    case DType::bf16:
      return std::ldexp(511.0, 119);  // (2^8 - 1/2) 2^120
  }
  return std::numeric_limits<double>::infinity();
}

double largest_finite(DType d) {
  switch (d) {
    case DType::f32:
      return static_cast<double>(std::numeric_limits<float>::max());
    case DType::f16:
      return 65504.0;
    case DType::bf16:
      return std::ldexp(255.0, 120);  // 0x7f7f: 1.1111111b x 2^127
  }
  return 0.0;
}

double smallest_subnormal(DType d) {
  switch (d) {
    case DType::f32:
      return std::ldexp(1.0, -149);
    case DType::f16:
      return std::ldexp(1.0, -24);
    case DType::bf16:
      return std::ldexp(1.0, -133);
  }
  return 0;
}

uint16_t float_to_half_bits(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or NaN
    if (abs == 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u);
    return static_cast<uint16_t>(sign | 0x7fffu);  // canonical NaN, as cuda_fp16.h
  }
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: inf
  const int exp = static_cast<int>(abs >> 23) - 127;
  if (exp >= -14) {  // normal half
    uint32_t mant = abs & 0x7fffffu;
    uint32_t h = (static_cast<uint32_t>(exp + 15) << 10) | (mant >> 13);
    const uint32_t rem = mant & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // carries into the exponent correctly
    return static_cast<uint16_t>(sign | h);
  }
  if (exp < -25) return static_cast<uint16_t>(sign);  // below half the smallest subnormal
  // Subnormal half: value = m * 2^-24 with the implicit bit made explicit.
  const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
  const int shift = -exp - 14 + 13;  // 14..24 + ... bits dropped
  uint32_t h = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

float half_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    const float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t float_to_bf16_bits(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>(((x >> 16) & 0x8000u) | 0x7fffu);
  const uint32_t lsb = (x >> 16) & 1u;
  return static_cast<uint16_t>((x + 0x7fffu + lsb) >> 16);
}

float bf16_bits_to_float(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

double round_to(DType d, double x) {
  const float f = static_cast<float>(x);
  switch (d) {
    case DType::f32:
      return f;
    case DType::f16:
      return half_bits_to_float(float_to_half_bits(f));
    case DType::bf16:
      return bf16_bits_to_float(float_to_bf16_bits(f));
  }
  return f;
}

float round_mantissa(float f, int mantissa_bits) {
  if (mantissa_bits >= 23 || !std::isfinite(f)) return f;
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const int drop = 23 - mantissa_bits;
  const uint32_t half = 1u << (drop - 1);
  const uint32_t lsb = (x >> drop) & 1u;
  const uint32_t r = (x + half - 1u + lsb) & ~((1u << drop) - 1u);
  return std::bit_cast<float>(r);
}

float round_tf32x3(float f) {
  if (!std::isfinite(f)) return f;
  const float big = round_mantissa(f, 10);
  return big + round_mantissa(f - big, 10);
}

}  // namespace attnfuzz
