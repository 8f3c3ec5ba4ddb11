#pragma once
// Where a backend computes. Spelled "cpu" and "cuda" at the edges: the Python bridge's hello,
// the worker protocol's profiles, `list`.
#include <stdexcept>
#include <string>
#include <string_view>

namespace attnfuzz {

enum class Device { cpu, cuda };

inline std::string_view to_string(Device d) { return d == Device::cuda ? "cuda" : "cpu"; }

// Throws std::invalid_argument for any other spelling.
inline Device device_from_string(std::string_view s) {
  if (s == "cpu") return Device::cpu;
  if (s == "cuda") return Device::cuda;
  throw std::invalid_argument("unknown device '" + std::string(s) + "' (expected cpu or cuda)");
}

}  // namespace attnfuzz
