#include "oracles/torch_cuda_loader.h"

#include <ATen/Parallel.h>
#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <vector>

namespace attnfuzz {
namespace {

// The directory of the libtorch_cpu.so in this process: its CUDA half must be the same build.
std::string torch_cpu_dir() {
  Dl_info info{};
  if (!dladdr(reinterpret_cast<void*>(&at::set_num_threads), &info) || !info.dli_fname) return {};
  std::string path = info.dli_fname;
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? std::string{} : path.substr(0, slash);
}

struct LoadResult {
  bool ok = false;
  std::string why;
};

LoadResult load_once() {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("ATTNFUZZ_LIBTORCH_CUDA"); env && *env) candidates.push_back(env);
  if (const std::string dir = torch_cpu_dir(); !dir.empty()) candidates.push_back(dir + "/libtorch_cuda.so");
  candidates.push_back("libtorch_cuda.so");
  std::string errors;
  for (const auto& c : candidates) {
    // RTLD_GLOBAL: LibTorch's CUDA kernels register themselves into the dispatcher of the
    // libtorch_cpu already loaded, and later libraries resolve against its symbols.
    if (dlopen(c.c_str(), RTLD_NOW | RTLD_GLOBAL)) return {true, {}};
    const char* e = dlerror();
    errors += (errors.empty() ? "" : "; ") + std::string(e ? e : c + ": unknown error");
  }
  return {false, "libtorch_cuda.so did not load (" + errors + ")"};
}

}  // namespace

bool load_torch_cuda(std::string* why) {
  static std::once_flag once;
  static LoadResult result;
  std::call_once(once, [] { result = load_once(); });
  if (!result.ok && why) *why = result.why;
  return result.ok;
}

}  // namespace attnfuzz
