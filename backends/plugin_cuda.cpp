#include "backends/plugin_cuda.h"

#include <atomic>
#include <stdexcept>

#if ATTNFUZZ_HAVE_CUDA_PLUGINS
#include <cuda_runtime_api.h>
#endif

namespace attnfuzz {

#if ATTNFUZZ_HAVE_CUDA_PLUGINS

namespace {

std::atomic<bool> device_used{false};

void check(cudaError_t e, const char* call) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA ") + call + ": " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
}

}  // namespace

std::optional<std::string> cuda_plugins_unavailable() {
  static const std::optional<std::string> why = []() -> std::optional<std::string> {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) return std::string("no usable CUDA device for CUDA plugins: ") + cudaGetErrorString(e);
    if (n == 0) return std::string("no CUDA device for CUDA plugins");
    return std::nullopt;
  }();
  return why;
}

std::optional<std::string> cuda_plugin_health() {
  if (!device_used) return std::nullopt;
  const cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
  return std::nullopt;
}

DeviceArena::DeviceArena() {
  if (auto why = cuda_plugins_unavailable()) throw std::runtime_error(*why);
  check(cudaGetDevice(&device_), "cudaGetDevice");
  check(cudaSetDevice(device_), "cudaSetDevice");
  device_used = true;
}

DeviceArena::~DeviceArena() {
  for (auto& [host, dev] : copies_) (void)cudaFree(dev);  // after a fault this fails too; nothing to do about it
}

void* DeviceArena::upload(const void* base, size_t bytes) {
  for (const auto& [host, dev] : copies_)
    if (host == base) return dev;  // a packed group's next member: the group's one copy
  void* dev = nullptr;
  check(cudaMalloc(&dev, bytes ? bytes : 1), "cudaMalloc");
  copies_.emplace_back(base, dev);
  check(cudaMemcpy(dev, base, bytes, cudaMemcpyHostToDevice), "cudaMemcpy (to the device)");
  return dev;
}

void DeviceArena::download(void* base, size_t bytes) {
  for (const auto& [host, dev] : copies_)
    if (host == base) return check(cudaMemcpy(base, dev, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy (to the host)");
  throw std::logic_error("DeviceArena::download: no device copy of this buffer");
}

void DeviceArena::synchronize(const std::string& after) {
  const cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) throw std::runtime_error("CUDA error after " + after + ": " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
}

#else  // no CUDA runtime in this build

std::optional<std::string> cuda_plugins_unavailable() {
  return std::string("CUDA plugins need the gpu build of attnfuzz (configured with ATTNFUZZ_WITH_CUDA=ON); this build has no CUDA runtime");
}

std::optional<std::string> cuda_plugin_health() { return std::nullopt; }

DeviceArena::DeviceArena() { throw std::runtime_error(*cuda_plugins_unavailable()); }
DeviceArena::~DeviceArena() { copies_.clear(); }
void* DeviceArena::upload(const void*, size_t) { throw std::logic_error("no CUDA runtime"); }
void DeviceArena::download(void*, size_t) { throw std::logic_error("no CUDA runtime"); }
void DeviceArena::synchronize(const std::string&) {}

#endif

}  // namespace attnfuzz
