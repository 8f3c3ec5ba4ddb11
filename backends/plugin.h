#pragma once
// Loads a backend from a shared library that exports the plugin C ABI
// (backends/attnfuzz_plugin.h). Another ABI version is refused with a clear error.
#include <memory>
#include <string>

#include "harness/backend.h"

namespace attnfuzz {

// `spec` is a path or a file name, found as harness/plugin_path.h says. Throws
// std::runtime_error naming the path and the problem (not found, cannot load, not a plugin,
// wrong ABI version, malformed contract).
std::unique_ptr<Backend> load_plugin(const std::string& spec);

}  // namespace attnfuzz
