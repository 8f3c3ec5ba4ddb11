#pragma once
// Where a backend computes. Spelled "cpu" and "cuda" at the edges: the Python bridge's hello,
// the worker protocol's profiles, `list`.
#include <optional>
#include <string_view>

namespace attnfuzz {

enum class Device { cpu, cuda };

inline std::string_view to_string(Device d) { return d == Device::cuda ? "cuda" : "cpu"; }

// Nothing for any other spelling.
inline std::optional<Device> device_from_string(std::string_view s) {
  if (s == "cpu") return Device::cpu;
  if (s == "cuda") return Device::cuda;
  return std::nullopt;
}

}  // namespace attnfuzz
