#pragma once
#include <memory>

#include "harness/backend.h"
#include "oracles/torch_oracle.h"

namespace attnfuzz {

enum class SdpaKind { math, cpu_flash };
std::unique_ptr<Backend> make_torch_sdpa_backend(SdpaKind kind, Device device = Device::cpu);

}  // namespace attnfuzz
