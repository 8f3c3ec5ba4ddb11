#pragma once
// GPU memory for plugins that declare AF_DEVICE_IS_CUDA (backends/plugin.cpp). Only the gpu
// build (ATTNFUZZ_WITH_CUDA) has the CUDA runtime; in any other build, and on a machine
// without a usable GPU, cuda_plugins_unavailable() says why and such plugins are skipped.
//
// The loader keeps the host path as it is (buffers in the case's layout, outputs poisoned)
// and mirrors each host buffer's whole byte extent, padding included, to the device: the
// plugin sees the same strides and offsets on the GPU as a CPU plugin sees on the host,
// whatever layout the buffers have. After the call the outputs' extents come back and are
// judged, poison and all, by the host code.
#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace attnfuzz {

// Why CUDA plugins cannot run in this process (no CUDA runtime in this build, no device),
// or nothing when they can.
std::optional<std::string> cuda_plugins_unavailable();
// The error the device gives after a CUDA plugin used it in this process (a sticky fault),
// or nothing (also when no CUDA plugin ran). Part of the registry's gpu_health().
std::optional<std::string> cuda_plugin_health();

// Device copies for one plugin call, on the current device (the worker's GPU: campaign
// workers see only theirs through CUDA_VISIBLE_DEVICES), freed at the end of the scope.
// Every CUDA error throws std::runtime_error naming the call and the error.
class DeviceArena {
 public:
  DeviceArena();
  ~DeviceArena();
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;

  int device() const { return device_; }
  // Copies [base, base + bytes) to new device memory; returns the device address of base.
  // A base uploaded before (the members of a packed group share one host buffer) gets the
  // device copy it already has, not another one.
  void* upload(const void* base, size_t bytes);
  // Copies the device copy of base back over [base, base + bytes).
  void download(void* base, size_t bytes);
  // Waits for all work on the device; throws if the plugin left a CUDA error behind.
  void synchronize(const std::string& after);

 private:
  int device_ = 0;
  std::vector<std::pair<const void*, void*>> copies_;  // host base -> device copy
};

}  // namespace attnfuzz
