#include "backends/shared_tensors.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>


namespace attnfuzz {
namespace {

size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

}  // namespace

const char* shm_type_name(ShmType t) {
  switch (t) {
    case ShmType::f32:
      return "fp32";
    case ShmType::f16:
      return "fp16";
    case ShmType::bf16:
      return "bf16";
    case ShmType::u8:
      return "u8";
  }
  return "?";
}

SharedArena::SharedArena() {
  fd_ = ::memfd_create("attnfuzz-bridge", MFD_CLOEXEC);
  if (fd_ < 0) throw std::runtime_error(std::string("memfd_create failed: ") + std::strerror(errno));
}

SharedArena::~SharedArena() {
  if (base_) ::munmap(base_, mapped_);
  if (fd_ >= 0) ::close(fd_);
}

std::string SharedArena::path_for_peer() const { return "/proc/" + std::to_string(::getpid()) + "/fd/" + std::to_string(fd_); }

size_t SharedArena::reserve(size_t bytes) {
  const size_t at = round_up(used_, 64), end = at + std::max<size_t>(bytes, 1);
  if (end > mapped_) {
    // Grow geometrically (a few MiB at least), so a campaign settles on one size quickly.
    const size_t want = round_up(std::max({end, mapped_ * 2, size_t{4} << 20}), 4096);
    if (::ftruncate(fd_, static_cast<off_t>(want)) != 0)
      throw std::runtime_error("cannot grow the bridge's shared memory to " + std::to_string(want) + " bytes: " + std::strerror(errno));
    void* p = base_ ? ::mremap(base_, mapped_, want, MREMAP_MAYMOVE) : ::mmap(nullptr, want, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    if (p == MAP_FAILED) throw std::runtime_error(std::string("cannot map the bridge's shared memory: ") + std::strerror(errno));
    base_ = static_cast<unsigned char*>(p);
    mapped_ = want;
  }
  used_ = end;
  return at;
}

const ShmTensor& ShmLayout::add(TensorId as, const Placement& pl, ShmType type) {
  ShmTensor t{pl, type, 0};
  const size_t bytes = static_cast<size_t>(pl.extent) * shm_type_size(type);
  if (pl.buffer != layout_of(as)) {
    auto it = shared_.find(pl.buffer);
    t.buffer = it != shared_.end() ? it->second : (shared_[pl.buffer] = arena_.reserve(bytes));
  } else {
    t.buffer = arena_.reserve(bytes);
  }
  return tensors_[as] = t;
}

void shm_store(SharedArena& arena, const ShmTensor& t, const Tensor& src) { store_placed(arena.at(t.buffer), t.pl, t.type, src); }

void shm_poison(SharedArena& arena, const ShmTensor& t) { poison_elements(arena.at(t.buffer), static_cast<size_t>(t.pl.extent), t.type); }

void shm_surround(SharedArena& arena, const ShmTensor& t, Surround::Fill fill) {
  fill_surround(arena.at(t.buffer), static_cast<size_t>(t.pl.extent), t.type, fill);
}

Tensor shm_load(SharedArena& arena, const ShmTensor& t, size_t* unwritten) { return load_placed(arena.at(t.buffer), t.pl, t.type, unwritten); }

}  // namespace attnfuzz
