#include "oracles/exact_transfer.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>
#include <vector>

#include "harness/parallel.h"

namespace attnfuzz {
namespace {

// The width element x needs: 0 bf16, 1 fp32, 2 float64.
int width_rank(double x) {
  const float f = static_cast<float>(x);
  if (std::bit_cast<uint64_t>(static_cast<double>(f)) != std::bit_cast<uint64_t>(x)) return 2;
  return (std::bit_cast<uint32_t>(f) & 0xffffu) == 0 ? 0 : 1;
}

constexpr uint64_t kP1 = 0x9E3779B185EBCA87ull, kP2 = 0xC2B2AE3D27D4EB4Full, kP3 = 0x165667B19E3779F9ull,
                   kP4 = 0x85EBCA77C2B2AE63ull, kP5 = 0x27D4EB2F165667C5ull;
constexpr size_t kDigestChunk = size_t{1} << 16;

uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
uint64_t round64(uint64_t acc, uint64_t w) { return rotl(acc + w * kP2, 31) * kP1; }
uint64_t avalanche(uint64_t h) {
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  return h ^ (h >> 32);
}

// One chunk of at most kDigestChunk bytes: four lanes over its whole words, the tail's bytes
// zero-padded into one more word, then the lanes folded with the length.
uint64_t chunk_digest(const unsigned char* p, size_t n) {
  uint64_t lane[4] = {kP1 + kP2, kP2, 0, 0 - kP1};
  const size_t words = n / 8;
  size_t i = 0;
  for (; i + 4 <= words; i += 4)
    for (size_t l = 0; l < 4; ++l) {
      uint64_t w;
      std::memcpy(&w, p + 8 * (i + l), 8);
      lane[l] = round64(lane[l], w);
    }
  for (; i < words; ++i) {
    uint64_t w;
    std::memcpy(&w, p + 8 * i, 8);
    lane[i % 4] = round64(lane[i % 4], w);
  }
  if (n % 8) {
    uint64_t w = 0;
    std::memcpy(&w, p + 8 * words, n % 8);
    lane[0] = round64(lane[0], w ^ kP5);
  }
  uint64_t h = rotl(lane[0], 1) + rotl(lane[1], 7) + rotl(lane[2], 12) + rotl(lane[3], 18);
  return avalanche(h + n);
}

}  // namespace

uint64_t content_digest(const void* p, size_t n) {
  const auto* bytes = static_cast<const unsigned char*>(p);
  const size_t chunks = (n + kDigestChunk - 1) / kDigestChunk;
  std::vector<uint64_t> part(chunks);
  parallel_for(chunks, kDigestChunk / 8, [&](size_t begin, size_t end) {
    for (size_t c = begin; c < end; ++c) part[c] = chunk_digest(bytes + c * kDigestChunk, std::min(kDigestChunk, n - c * kDigestChunk));
  });
  uint64_t h = kP5 ^ n;
  for (uint64_t x : part) h = rotl(h ^ round64(0, x), 27) * kP1 + kP4;
  return avalanche(h);
}

const char* to_string(ExactWidth w) {
  switch (w) {
    case ExactWidth::bf16: return "bf16";
    case ExactWidth::f32: return "fp32";
    case ExactWidth::f64: return "float64";
  }
  return "?";
}

ExactWidth narrowest_exact(const double* src, size_t n) {
  std::atomic<int> rank{0};
  parallel_for(n, [&](size_t begin, size_t end) {
    int r = 0;
    for (size_t i = begin; i < end && r < 2; ++i) r = std::max(r, width_rank(src[i]));
    int seen = rank.load();
    while (r > seen && !rank.compare_exchange_weak(seen, r)) {
    }
  });
  return rank.load() == 0 ? ExactWidth::bf16 : rank.load() == 1 ? ExactWidth::f32 : ExactWidth::f64;
}

void pack_exact(const double* src, size_t n, ExactWidth w, void* dst) {
  if (w == ExactWidth::f64) {
    parallel_for(n, [&](size_t b, size_t e) { std::memcpy(static_cast<double*>(dst) + b, src + b, (e - b) * sizeof(double)); });
    return;
  }
  parallel_for(n, [&](size_t b, size_t e) {
    if (w == ExactWidth::f32) {
      float* out = static_cast<float*>(dst);
      for (size_t i = b; i < e; ++i) out[i] = static_cast<float>(src[i]);
    } else {
      uint16_t* out = static_cast<uint16_t*>(dst);
      for (size_t i = b; i < e; ++i) out[i] = static_cast<uint16_t>(std::bit_cast<uint32_t>(static_cast<float>(src[i])) >> 16);
    }
  });
}

void unpack_exact(const void* src, size_t n, ExactWidth w, double* dst) {
  parallel_for(n, [&](size_t b, size_t e) {
    switch (w) {
      case ExactWidth::f64: std::memcpy(dst + b, static_cast<const double*>(src) + b, (e - b) * sizeof(double)); break;
      case ExactWidth::f32:
        for (size_t i = b; i < e; ++i) dst[i] = static_cast<const float*>(src)[i];
        break;
      case ExactWidth::bf16:
        for (size_t i = b; i < e; ++i)
          dst[i] = std::bit_cast<float>(static_cast<uint32_t>(static_cast<const uint16_t*>(src)[i]) << 16);
        break;
    }
  });
}

}  // namespace attnfuzz
