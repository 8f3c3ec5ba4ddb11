#pragma once
// Provenance recorded with every finding, apart from the backend registry: what built the
// harness and what it ran on.
#include <map>
#include <string>

namespace attnfuzz {

// The environment recorded with every finding: harness commit, LibTorch and its CUDA/cuDNN
// (or why none), the GPU and driver (nvidia-smi) or "none".
std::map<std::string, std::string> environment();

}  // namespace attnfuzz
