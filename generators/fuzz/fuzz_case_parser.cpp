// libFuzzer target: the reproducer/case JSON parser and validator. Any input must
// either parse into a valid Case or be rejected with a CaseError; crashes, leaks,
// UB and other exceptions are bugs. A parsed case must survive a write/parse round trip.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "harness/case_json.h"
#include "harness/errors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  attnfuzz::Case c;
  try {
    c = attnfuzz::case_from_string(text, attnfuzz::Limits{uint64_t{64} << 20});
  } catch (const attnfuzz::CaseError&) {
    return 0;
  }
  if (!(attnfuzz::case_from_string(attnfuzz::write_case(c), attnfuzz::Limits{uint64_t{64} << 20}) == c)) std::abort();
  return 0;
}
