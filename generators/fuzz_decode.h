#pragma once
// Structure-aware decoding of fuzzer bytes into a valid Case: every byte string maps to
// one case (short inputs take defaults), so libFuzzer's mutations move through the case
// space rather than through JSON syntax. Used by the differential fuzz target and by
// `attnfuzz import`, which must decode an artifact exactly as the target did.
#include <cstddef>
#include <cstdint>

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

Case decode_case(const uint8_t* data, size_t size);

}  // namespace attnfuzz
