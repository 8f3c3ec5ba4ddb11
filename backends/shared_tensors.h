#pragma once
// Tensors in shared memory, for backends that run in another process (the Python bridge,
// backends/python_backend.h). One memfd per backend: the other process maps it once, and each
// call lays its tensors out in it afresh, so tensor data never travels through a pipe.
//
// A tensor sits in the memory exactly as a plugin receives it (backends/attnfuzz_plugin.h): in
// the case dtype (LSE and dLSE in float32), at its placement (harness/layout.h: any order,
// padded rows and heads, an offset, packed views of one buffer), outputs poisoned before the
// call. Storing is the one copy in (float64 to the case dtype), loading the one copy out.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "harness/layout.h"
#include "harness/tensor.h"
#include "harness/tensors.h"
#include "backends/typed_buffers.h"

namespace attnfuzz {

// Element types in the shared memory (those of a plugin's buffers); the names are the bridge's
// ("fp32", "fp16", "bf16", "u8").
using ShmType = ElementType;
const char* shm_type_name(ShmType t);
inline size_t shm_type_size(ShmType t) { return element_type_size(t); }

class SharedArena {
 public:
  SharedArena();  // throws std::runtime_error when no memfd can be made
  ~SharedArena();
  SharedArena(const SharedArena&) = delete;
  SharedArena& operator=(const SharedArena&) = delete;

  // The path another process of the same user opens to map this memory.
  std::string path_for_peer() const;
  // Starts the layout of a new call: every earlier reservation is dropped.
  void reset() { used_ = 0; }
  // Room for `bytes`, 64-byte aligned; grows the memory as needed. Returns the byte offset.
  // Growing may move the mapping: take pointers with at() only after the last reservation.
  size_t reserve(size_t bytes);
  unsigned char* at(size_t offset) { return base_ + offset; }
  size_t size() const { return mapped_; }

 private:
  int fd_ = -1;
  unsigned char* base_ = nullptr;
  size_t mapped_ = 0, used_ = 0;
};

// One tensor of a call in the arena: its placement and where its buffer starts.
struct ShmTensor {
  Placement pl;
  ShmType type = ShmType::f32;
  size_t buffer = 0;  // byte offset of the buffer (a packed group's members share it)
  size_t first_element() const { return buffer + static_cast<size_t>(pl.offset) * shm_type_size(type); }
};

// Lays out the tensors of one call: one buffer per tensor, or per packed group.
class ShmLayout {
 public:
  // The request's tensor table lists the tensors in the order of their wire names
  // (harness/tensors.def): the worker reads them by code, and a fixed order keeps a request's
  // bytes a function of the call alone.
  struct ByWireName {
    bool operator()(TensorId a, TensorId b) const { return std::string_view(wire_name(a)) < wire_name(b); }
  };
  using Tensors = std::map<TensorId, ShmTensor, ByWireName>;

  explicit ShmLayout(SharedArena& arena) : arena_(arena) { arena_.reset(); }
  // Tensor `t` at its placement (dLSE at LSE's: layout_of). Members of a packed group
  // (pl.buffer != layout_of(t)) share their group's one buffer.
  const ShmTensor& add(TensorId t, const Placement& pl, ShmType type);
  const Tensors& tensors() const { return tensors_; }

 private:
  SharedArena& arena_;
  Tensors tensors_;
  std::map<TensorId, size_t> shared_;  // a packed group's buffer, by its first member
};

// float64 values to the arena in the tensor's type, at its placement (the one copy in).
void shm_store(SharedArena& arena, const ShmTensor& t, const Tensor& src);
// Fills the tensor's whole buffer, padding included, with the poison pattern.
void shm_poison(SharedArena& arena, const ShmTensor& t);
// The tensor's whole buffer set to the case's surround (harness/layout.h), before any store
// into it: shared memory is reused from call to call, so without it an input's padding holds
// whatever the last call left there.
void shm_surround(SharedArena& arena, const ShmTensor& t, Surround::Fill fill);
// Back to float64 (the one copy out); counts elements still holding the poison.
Tensor shm_load(SharedArena& arena, const ShmTensor& t, size_t* unwritten);

}  // namespace attnfuzz
