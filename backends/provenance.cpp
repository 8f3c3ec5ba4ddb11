#include "backends/provenance.h"

#include <cstdio>

#include "attnfuzz_commit.h"  // generated at every build: cmake/CommitStamp.cmake

#if ATTNFUZZ_HAVE_TORCH
#include "oracles/torch_oracle.h"
#endif
#if ATTNFUZZ_HAVE_CUDNN
#include "backends/cudnn_sdpa.h"
#endif

namespace attnfuzz {

std::map<std::string, std::string> environment() {
  static const std::map<std::string, std::string> env = [] {
    std::map<std::string, std::string> e;
    e["harness_commit"] = ATTNFUZZ_COMMIT;
#if ATTNFUZZ_HAVE_TORCH
    e["libtorch"] = torch_version();
    for (const auto& [k, v] : torch_cuda_environment()) e[k] = v;
#else
    e["libtorch"] = "not built";
#endif
#if ATTNFUZZ_HAVE_CUDNN
    for (const auto& [k, v] : cudnn_sdpa_environment()) e[k] = v;
#endif
    // GPU and driver from nvidia-smi where there is one.
    std::string gpu;
    if (FILE* p = ::popen("nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null", "r")) {
      char buf[256];
      while (std::fgets(buf, sizeof buf, p)) gpu += buf;
      ::pclose(p);
    }
    while (!gpu.empty() && (gpu.back() == '\n' || gpu.back() == ' ')) gpu.pop_back();
    e["gpu"] = gpu.empty() ? "none" : gpu;
    return e;
  }();
  return env;
}

}  // namespace attnfuzz
