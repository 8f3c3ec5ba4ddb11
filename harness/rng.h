#pragma once
// Counter-based random numbers (Philox4x32-10, Salmon et al., SC'11): the value
// of element i of tensor t under seed s is a pure function f(s, t, i), so the
// CPU, the GPU and every later replay produce identical inputs, in any order
// and in parallel. Only integer arithmetic and exact double operations are used
// (no libm), which is what makes the results bit-identical across compilers
// and devices.
#include <array>
#include <cstdint>

#if defined(__CUDACC__)
#define ATTNFUZZ_HD __host__ __device__
#else
#define ATTNFUZZ_HD
#endif

namespace attnfuzz {

using Philox4 = std::array<uint32_t, 4>;

ATTNFUZZ_HD inline Philox4 philox4x32_10(Philox4 ctr, uint64_t key64) {
  uint32_t k0 = static_cast<uint32_t>(key64), k1 = static_cast<uint32_t>(key64 >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * ctr[0];
    const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * ctr[2];
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    ctr = {hi1 ^ ctr[1] ^ k0, lo1, hi0 ^ ctr[3] ^ k1, lo0};
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return ctr;
}

// Four independent 32-bit words for (seed, stream, index, draw).
ATTNFUZZ_HD inline Philox4 random_words(uint64_t seed, uint32_t stream, uint64_t index, uint32_t draw) {
  return philox4x32_10({static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), stream, draw}, seed);
}

// Uniform in [0, 1) with 32 random bits; exact in double.
ATTNFUZZ_HD inline double uniform01(uint32_t w) { return static_cast<double>(w) * (1.0 / 4294967296.0); }

// Approximately standard normal: Irwin-Hall sum of 12 uniforms minus 6 (tails
// bounded at +-6). Every step is exact in double, so no device can disagree.
ATTNFUZZ_HD inline double standard_normal(uint64_t seed, uint32_t stream, uint64_t index) {
  uint64_t sum = 0;
  for (uint32_t draw = 0; draw < 3; ++draw) {
    const Philox4 w = random_words(seed, stream, index, draw);
    sum += static_cast<uint64_t>(w[0]) + w[1] + w[2] + w[3];
  }
  return static_cast<double>(sum) * (1.0 / 4294967296.0) - 6.0;
}

// SplitMix64: derives independent sub-seeds (per case, per shard) from one seed.
ATTNFUZZ_HD inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace attnfuzz
