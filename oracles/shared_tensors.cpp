#include "oracles/shared_tensors.h"

#include <sys/mman.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "harness/dtype.h"

namespace attnfuzz {
namespace {

// The poison of oracles/plugin.cpp: NaNs with payloads no arithmetic produces.
constexpr uint32_t kPoisonF32 = 0x7fc0deadu;
constexpr uint16_t kPoisonF16 = 0x7e5au;
constexpr uint16_t kPoisonBF16 = 0x7fa5u;

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

size_t shm_type_size(ShmType t) { return t == ShmType::f32 ? 4 : t == ShmType::u8 ? 1 : 2; }

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

const ShmTensor& ShmLayout::add(const std::string& as, TensorRole role, const Placement& pl, ShmType type) {
  ShmTensor t{pl, type, 0};
  const size_t bytes = static_cast<size_t>(pl.extent) * shm_type_size(type);
  if (pl.buffer != role) {
    auto it = shared_.find(pl.buffer);
    t.buffer = it != shared_.end() ? it->second : (shared_[pl.buffer] = arena_.reserve(bytes));
  } else {
    t.buffer = arena_.reserve(bytes);
  }
  return tensors_[as] = t;
}

void shm_store(SharedArena& arena, const ShmTensor& t, const Tensor& src) {
  unsigned char* base = arena.at(t.buffer);
  t.pl.for_each([&](size_t i, size_t off) {
    const float f = static_cast<float>(src.data[i]);
    switch (t.type) {
      case ShmType::f32:
        std::memcpy(base + off * 4, &f, 4);
        break;
      case ShmType::f16: {
        const uint16_t h = float_to_half_bits(f);
        std::memcpy(base + off * 2, &h, 2);
        break;
      }
      case ShmType::bf16: {
        const uint16_t h = float_to_bf16_bits(f);
        std::memcpy(base + off * 2, &h, 2);
        break;
      }
      case ShmType::u8:
        base[off] = src.data[i] != 0;
        break;
    }
  });
}

void shm_poison(SharedArena& arena, const ShmTensor& t) {
  unsigned char* b = arena.at(t.buffer);
  const size_t n = static_cast<size_t>(t.pl.extent);
  if (t.type == ShmType::f32) {
    for (size_t i = 0; i < n; ++i) std::memcpy(b + 4 * i, &kPoisonF32, 4);
  } else if (t.type != ShmType::u8) {
    const uint16_t v = t.type == ShmType::f16 ? kPoisonF16 : kPoisonBF16;
    for (size_t i = 0; i < n; ++i) std::memcpy(b + 2 * i, &v, 2);
  }
}

Tensor shm_load(SharedArena& arena, const ShmTensor& t, size_t* unwritten) {
  const unsigned char* base = arena.at(t.buffer);
  Tensor out(std::vector<int64_t>(t.pl.sizes.begin(), t.pl.sizes.begin() + t.pl.ndim));
  size_t bad = 0;
  t.pl.for_each([&](size_t i, size_t off) {
    if (t.type == ShmType::f32) {
      uint32_t u;
      std::memcpy(&u, base + off * 4, 4);
      bad += u == kPoisonF32;
      out.data[i] = std::bit_cast<float>(u);
    } else if (t.type == ShmType::u8) {
      out.data[i] = base[off];
    } else {
      uint16_t h;
      std::memcpy(&h, base + off * 2, 2);
      bad += h == (t.type == ShmType::f16 ? kPoisonF16 : kPoisonBF16);
      out.data[i] = t.type == ShmType::f16 ? half_bits_to_float(h) : bf16_bits_to_float(h);
    }
  });
  if (unwritten) *unwritten = bad;
  return out;
}

}  // namespace attnfuzz
