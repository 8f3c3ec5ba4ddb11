#pragma once
// Device copies of host tensors, found again by their contents (oracles/device_mirror.cu).
//
// One case calls the GPU oracles about twenty times (the reference, sixteen contract baselines,
// the error terms) and judges a dozen tensors on the device, and each call used to send its
// inputs across the bus again: Q, K, V, dO and dLSE for every call, the reference's outputs back
// to the verdict's sums right after they came down. The mirror keeps the device copy of every
// tensor it sent or received, keyed by the digest of the host bytes (exact_transfer.h,
// content_digest) and their length: a host tensor with the same bytes, wherever it lives and
// whatever was written to it since, finds the copy; one whose bytes changed does not. Nothing
// depends on a caller keeping a tensor unchanged.
//
// Copies are kept, least recently used first out, within a budget of device memory:
// ATTNFUZZ_DEVICE_MIRROR_MIB (default 0: nothing is kept and every call uploads as before, until
// the mirror has run on a GPU; docs/gpu.md, "The device mirror"). A copy
// handed out lives as long as its holder does, whether or not the mirror still keeps it. Copies
// are read only: a kernel writes its outputs to fresh memory (DeviceCopy's constructor), which
// remember_copy then keeps once the host holds the same bytes.
#include <cstddef>
#include <cstdint>
#include <memory>

namespace attnfuzz::gpu {

// Device memory of the stream-ordered pool (legacy default stream), freed with its last owner.
class DeviceCopy {
 public:
  explicit DeviceCopy(size_t bytes);
  ~DeviceCopy();
  DeviceCopy(const DeviceCopy&) = delete;
  DeviceCopy& operator=(const DeviceCopy&) = delete;
  void* data() const { return p_; }
  size_t bytes() const { return bytes_; }
  const double* doubles() const { return static_cast<const double*>(p_); }
  const uint8_t* bytes_data() const { return static_cast<const uint8_t*>(p_); }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};
using SharedCopy = std::shared_ptr<const DeviceCopy>;

// The device copy of host[0, n): the mirror's, or uploaded now (float64 in the narrowest exact
// type, exact_transfer.h) and kept.
SharedCopy device_copy(const double* host, size_t n);
SharedCopy device_copy(const uint8_t* host, size_t n);
// host[0, n) now holds what `device` holds (a download): kept for whoever sends these bytes next.
void remember_copy(const double* host, size_t n, SharedCopy device);

struct MirrorCounts {
  uint64_t hits = 0, uploads = 0, remembered = 0, evicted = 0;
  size_t kept_bytes = 0, budget_bytes = 0;
};
MirrorCounts mirror_counts();
// Whether the budget lets the mirror keep anything.
bool mirror_keeps_copies();
// The budget from now on (ATTNFUZZ_DEVICE_MIRROR_MIB sets the first); past it, copies go least
// recently used first.
void set_mirror_budget(size_t bytes);

}  // namespace attnfuzz::gpu
