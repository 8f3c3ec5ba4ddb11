#pragma once
// Element types a Case can ask for, and the exact rounding the harness applies to
// inputs and uses when it emulates a low-precision backend.
#include <cstdint>
#include <string>
#include <string_view>

namespace attnfuzz {

enum class DType { f32, f16, bf16 };

std::string_view to_string(DType d);
DType dtype_from_string(std::string_view s);  // throws std::invalid_argument
// Unit roundoff u = 2^-p of the type (half an ulp at 1.0).
double unit_roundoff(DType d);
// The smallest positive subnormal of the type.
double smallest_subnormal(DType d);
// The largest finite value of the type: 65504, about 3.39e38, about 3.40e38.
double largest_finite(DType d);
// The magnitude from which rounding to nearest gives infinity: the largest finite value plus half
// its ulp (65520 for fp16).
double overflow_threshold(DType d);
// The smallest normal value of the type: 2^-126 (fp32, bf16), 2^-14 (fp16).
double smallest_normal(DType d);
// fp32's smallest normal number, 2^-126: kernels flush what falls below it (FTZ, tensor cores).
inline constexpr double kSmallestNormalF32 = 1.1754943508222875e-38;

// IEEE binary16 and bfloat16 conversions, round to nearest even, with
// subnormals, overflow to infinity and NaN handled as the CUDA headers do.
uint16_t float_to_half_bits(float f);
float half_bits_to_float(uint16_t h);
uint16_t float_to_bf16_bits(float f);
float bf16_bits_to_float(uint16_t b);

// Rounds a double to the set of values representable in `d` (through float,
// which is how every backend receives its inputs).
double round_to(DType d, double x);
// Rounds a float's significand to `mantissa_bits` explicit bits, round to nearest
// even: 10 emulates TF32 operands, 7 bf16, 23 is the identity.
float round_mantissa(float f, int mantissa_bits);
// A 3xTF32 operand (Contract::tf32x3): big = tf32(x) plus small = tf32(x - big), the two
// parts a 3xTF32 matmul multiplies (it also drops small * small, at most 2^-22 of a product,
// which rounding each operand once does not emulate).
float round_tf32x3(float f);

}  // namespace attnfuzz
