#pragma once
// Structure-aware decoding of fuzzer bytes into a valid Case: every byte string maps to
// one case (short inputs take defaults), so libFuzzer's mutations move through the case
// space rather than through JSON syntax. Used by the differential fuzz target and by
// `attnfuzz import`, which must decode an artifact exactly as the target did.
#include <cstddef>
#include <cstdint>

#include "generators/domain.h"
#include "harness/case.h"

namespace attnfuzz {

// Reads integers from the front of the data, like FuzzedDataProvider's
// ConsumeIntegralInRange, returning the low end of the range once the data runs out.
class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t size) : p_(data), n_(size) {}
  uint64_t range(uint64_t lo, uint64_t hi);
  bool flag() { return range(0, 1) == 1; }
  size_t remaining() const { return n_; }

 private:
  const uint8_t* p_;
  size_t n_;
};

// The shape comes from the tier's bounds: `small` for the ASan target on the CPU, `real` for the
// target built with LibTorch and the GPU backends (ATTNFUZZ_FUZZ_TIER). `attnfuzz import --tier`
// must name the tier the target ran with.
Case decode_case(const uint8_t* data, size_t size, domain::SizeTier tier = domain::kFuzzTier);

}  // namespace attnfuzz
