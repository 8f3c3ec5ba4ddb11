#pragma once
// Float64 tensors cross between host and device in the narrowest type that holds every element
// exactly: bf16, fp32 or float64 itself. The harness keeps every tensor in float64 (harness/
// tensor.h), but the case's inputs are drawn in the case dtype and the contract baselines store
// their outputs in it, so most of what the GPU oracles move is fp32- or bf16-valued. Widening is
// exact, so the device sees the same doubles, bit for bit, in a half or a quarter of the bytes;
// a tensor with one element that needs more (a float64 value, a NaN payload fp32 cannot carry, a
// double subnormal) travels as float64.
//
//   bf16 holds x  <=>  (double)(float)x has x's bits, and the float's low 16 bits are zero
//   fp32 holds x  <=>  (double)(float)x has x's bits
#include <cstddef>
#include <cstdint>

namespace attnfuzz {

enum class ExactWidth : uint8_t { bf16 = 2, f32 = 4, f64 = 8 };
inline size_t bytes_of(ExactWidth w) { return static_cast<size_t>(w); }
const char* to_string(ExactWidth w);

// The narrowest width holding every element of src[0, n) exactly (bf16 for an empty one).
ExactWidth narrowest_exact(const double* src, size_t n);
// src's elements in width w into dst (bytes_of(w) * n bytes); w must hold each of them exactly
// (narrowest_exact), else the packed value is not src's.
void pack_exact(const double* src, size_t n, ExactWidth w, void* dst);
// The inverse: dst[i] = the element i of src, widened (exact).
void unpack_exact(const void* src, size_t n, ExactWidth w, double* dst);

// A 64-bit digest of bytes [p, p + n), by which a device copy of host memory is found again
// (oracles/device_mirror.h): each 64 KiB chunk hashed in four lanes of
//   acc = rotl(acc + w P2, 31) P1   (xxHash64's round, w the chunk's 64-bit words in order),
// and the chunks' hashes folded in order with n. The chunks run over threads; the digest does
// not depend on how many.
uint64_t content_digest(const void* p, size_t n);

}  // namespace attnfuzz
