#include "oracles/exact_transfer.h"

#include <atomic>
#include <bit>
#include <cstring>

#include "harness/parallel.h"

namespace attnfuzz {
namespace {

// The width element x needs: 0 bf16, 1 fp32, 2 float64.
int width_rank(double x) {
  const float f = static_cast<float>(x);
  if (std::bit_cast<uint64_t>(static_cast<double>(f)) != std::bit_cast<uint64_t>(x)) return 2;
  return (std::bit_cast<uint32_t>(f) & 0xffffu) == 0 ? 0 : 1;
}

}  // namespace

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
