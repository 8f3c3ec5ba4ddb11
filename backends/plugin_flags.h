#pragma once
// What a plugin's flags (backends/attnfuzz_plugin.h) declare about its outputs: the
// AF_NONDETERMINISTIC_* bit of each tensor, from the table's abi column (harness/tensors.def).
#include <array>
#include <cstdint>
#include <vector>

#include "harness/tensors.h"
#include "backends/attnfuzz_plugin.h"

namespace attnfuzz {

namespace plugin_flags_detail {
// The abi column's NONE: a tensor the ABI has no nondeterminism flag for.
inline constexpr uint32_t AF_NONDETERMINISTIC_NONE = 0;
inline constexpr std::array<uint32_t, kTensorCount> kNondeterministicFlag{
#define TENSOR(e, kind, report, case_key, layout, draw, abi, wire, wire_name) uint32_t{AF_NONDETERMINISTIC_##abi},
#include "harness/tensors.def"
};
}  // namespace plugin_flags_detail

// The AF_NONDETERMINISTIC_* bit naming this tensor, or 0.
constexpr uint32_t nondeterministic_flag(TensorId t) { return plugin_flags_detail::kNondeterministicFlag[static_cast<size_t>(t)]; }

// The outputs a plugin with these flags declares may differ run to run (Backend::nondeterministic_outputs).
inline std::vector<TensorId> nondeterministic_outputs_of(uint32_t flags) {
  std::vector<TensorId> out;
  for (TensorId t : kOutputs)
    if (flags & nondeterministic_flag(t)) out.push_back(t);
  return out;
}

}  // namespace attnfuzz
