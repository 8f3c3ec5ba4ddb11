#pragma once
// The case domain's bounds, defined once and shared by the random generator
// (random_case.cpp), the RapidCheck domains (rc_case.h), the fuzz decoder
// (fuzz_decode.cpp), the shrinker (shrink.cpp) and the campaigns' --tier.
//
// Size tiers (docs/fuzzing.md):
//   toy    Sq, Skv <= 24,   D <= 16,  B <= 2, Hkv <= 2, Hq/Hkv <= 3   unit tests, property tests
//   small  Sq, Skv <= 64,   D <= 256, B <= 2, Hkv <= 2, Hq/Hkv <= 4   the CPU default (CI, campaigns)
//   real   Sq, Skv <= 4096, D <= 256, B <= 2, Hkv <= 4, Hq/Hkv <= 4   GPU campaigns: the sizes models run
// Head dims favour the ones kernels instantiate (kKernelHeadDims) and their +-1 neighbours;
// sequence lengths favour tile corners (multiples of 16, 64 and 128, and +-1).
#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace attnfuzz::domain {

enum class SizeTier { toy, small, real, decode };

// max_seq bounds Skv, and Sq too unless max_seq_q (> 0) bounds it apart: the decode tier's few
// queries (one token, or a few in speculative decoding) against a long KV cache.
struct Bounds {
  int64_t max_batch, max_heads_kv, max_group, max_seq, max_dim, max_seq_q = 0;
  int64_t seq_q_bound() const { return max_seq_q > 0 ? max_seq_q : max_seq; }
};

inline constexpr Bounds bounds(SizeTier t) {
  switch (t) {
    case SizeTier::toy:
      return {2, 2, 3, 24, 16};
    case SizeTier::small:
      return {2, 2, 4, 64, 256};
    case SizeTier::real:
      return {2, 4, 4, 4096, 256};
    case SizeTier::decode:  // Sq <= 16 against Skv <= 64k, GQA groups up to 16
      return {2, 4, 16, 65536, 256, 16};
  }
  return {2, 2, 3, 24, 16};
}

inline constexpr SizeTier kDefaultCpuTier = SizeTier::small;  // campaigns, `attnfuzz generate`
inline constexpr SizeTier kTestTier = SizeTier::toy;          // RandomCaseOptions{}: fast unit tests
inline constexpr SizeTier kFuzzTier = SizeTier::small;        // the libFuzzer decoder (CPU, under ASan)

inline const char* tier_name(SizeTier t) {
  return t == SizeTier::toy ? "toy" : t == SizeTier::small ? "small" : t == SizeTier::real ? "real" : "decode";
}
inline constexpr std::array<SizeTier, 4> kAllTiers{SizeTier::toy, SizeTier::small, SizeTier::real, SizeTier::decode};
inline std::optional<SizeTier> tier_from_name(std::string_view s) {
  for (SizeTier t : kAllTiers)
    if (s == tier_name(t)) return t;
  return std::nullopt;
}

// The smallest value of every dimension (the shrinker's floor).
inline constexpr int64_t kMinDim = 1;

// Head dims real kernels instantiate (FlashAttention 2/3, cuDNN, xFormers).
inline constexpr std::array<int64_t, 7> kKernelHeadDims{32, 64, 80, 96, 128, 192, 256};

// Head-dim menu up to `max`: the kernel dims and their +-1 neighbours (odd ones).
inline std::vector<int64_t> head_dim_menu(int64_t max) {
  std::vector<int64_t> out;
  for (int64_t d : kKernelHeadDims)
    for (int64_t x : {d - 1, d, d + 1})
      if (x >= kMinDim && x <= max) out.push_back(x);
  return out;
}

// Tile corners up to `max`: 1, 2, and every multiple of 16 up to 128, then of 64 (and of
// 128) beyond, each with its +-1 neighbours.
inline std::vector<int64_t> size_corners(int64_t max) {
  std::vector<int64_t> out{1, 2};
  for (int64_t m = 16; m - 1 <= max; m += m < 128 ? 16 : 64)
    for (int64_t x : {m - 1, m, m + 1})
      if (x <= max && x > 2) out.push_back(x);
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// Bounds on Sq and Skv above which the non-corner draws are log-uniform, not uniform (the real
// tier: most cases mid-sized, the tile corners bring the very large ones).
inline constexpr int64_t kLogUniformFrom = 512;

// Layouts the generators draw (harness/layout.h; validate() allows up to 4096 each).
inline constexpr int64_t kMaxRowPadding = 8, kMaxHeadPadding = 24;
// Base offsets in elements: odd ones and ones that break 16-byte alignment for every dtype.
inline constexpr std::array<int64_t, 7> kOffsets{1, 2, 3, 4, 7, 8, 13};
// Guards around a buffer whose surround is not zero (harness/layout.h): none (the padding and
// gaps alone), a 16-byte vector of fp16, 128 bytes of fp16 (a TMA box's alignment), and past a
// tile of rows. Multiples of 8 elements keep every base pointer as aligned as without a guard,
// so a guard alone never makes a case an unaligned-pointer case.
inline constexpr std::array<int64_t, 4> kSurroundGuards{0, 8, 64, 1024};

}  // namespace attnfuzz::domain
