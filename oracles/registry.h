#pragma once
// Every backend this build knows, by name, and why one is not available here.
#include <memory>
#include <string>
#include <vector>

#include "harness/backend.h"

namespace attnfuzz {

struct BackendInfo {
  std::string name;
  std::string description;
  bool available = false;
  std::string unavailable_reason;
};

std::vector<BackendInfo> list_backends();
// Throws std::invalid_argument for an unknown name, std::runtime_error (with the
// reason) for a known backend that cannot run here.
std::unique_ptr<Backend> make_backend(const std::string& name);

}  // namespace attnfuzz
