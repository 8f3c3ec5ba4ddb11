#pragma once
// What a plugin's flags (backends/attnfuzz_plugin.h) declare about its outputs: one table from
// the AF_NONDETERMINISTIC_* bits to the outputs they name.
#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "harness/error_model.h"
#include "backends/attnfuzz_plugin.h"

namespace attnfuzz {

inline constexpr std::array<std::pair<uint32_t, Output>, 5> kNondeterministicFlags{{
    {AF_NONDETERMINISTIC_O, Output::O},
    {AF_NONDETERMINISTIC_LSE, Output::LSE},
    {AF_NONDETERMINISTIC_DQ, Output::dQ},
    {AF_NONDETERMINISTIC_DK, Output::dK},
    {AF_NONDETERMINISTIC_DV, Output::dV},
}};

// The outputs a plugin with these flags declares may differ run to run (Backend::nondeterministic_outputs).
inline std::vector<Output> nondeterministic_outputs_of(uint32_t flags) {
  std::vector<Output> out;
  for (const auto& [bit, output] : kNondeterministicFlags)
    if (flags & bit) out.push_back(output);
  return out;
}

}  // namespace attnfuzz
