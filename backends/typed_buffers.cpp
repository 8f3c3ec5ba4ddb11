#include "backends/typed_buffers.h"

#include <bit>
#include <cstring>
#include <vector>

#include "harness/dtype.h"

namespace attnfuzz {

size_t element_type_size(ElementType t) { return t == ElementType::f32 ? 4 : t == ElementType::u8 ? 1 : 2; }

void poison_elements(unsigned char* buffer, size_t elements, ElementType t) {
  if (t == ElementType::f32) {
    for (size_t i = 0; i < elements; ++i) std::memcpy(buffer + 4 * i, &kPoisonF32, 4);
  } else if (t != ElementType::u8) {
    const uint16_t v = t == ElementType::f16 ? kPoisonF16 : kPoisonBF16;
    for (size_t i = 0; i < elements; ++i) std::memcpy(buffer + 2 * i, &v, 2);
  }
}

void fill_surround(unsigned char* buffer, size_t elements, ElementType t, Surround::Fill fill) {
  if (fill == Surround::Fill::zero || t == ElementType::u8) {
    std::memset(buffer, 0, elements * element_type_size(t));
    return;
  }
  const bool nan = fill == Surround::Fill::nan;
  if (t == ElementType::f32) {
    const uint32_t v = nan ? 0x7fc00000u : 0x7f7fffffu;
    for (size_t i = 0; i < elements; ++i) std::memcpy(buffer + 4 * i, &v, 4);
  } else {
    const uint16_t v = t == ElementType::f16 ? (nan ? 0x7e00u : 0x7bffu) : (nan ? 0x7fc0u : 0x7f7fu);
    for (size_t i = 0; i < elements; ++i) std::memcpy(buffer + 2 * i, &v, 2);
  }
}

void store_placed(unsigned char* buffer, const Placement& pl, ElementType t, const Tensor& src) {
  pl.for_each([&](size_t i, size_t off) {
    const float f = static_cast<float>(src.data[i]);
    switch (t) {
      case ElementType::f32:
        std::memcpy(buffer + off * 4, &f, 4);
        break;
      case ElementType::f16: {
        const uint16_t h = float_to_half_bits(f);
        std::memcpy(buffer + off * 2, &h, 2);
        break;
      }
      case ElementType::bf16: {
        const uint16_t h = float_to_bf16_bits(f);
        std::memcpy(buffer + off * 2, &h, 2);
        break;
      }
      case ElementType::u8:
        buffer[off] = src.data[i] != 0;
        break;
    }
  });
}

Tensor load_placed(const unsigned char* buffer, const Placement& pl, ElementType t, size_t* unwritten) {
  Tensor out(std::vector<int64_t>(pl.sizes.begin(), pl.sizes.begin() + pl.ndim), uninitialized);
  size_t bad = 0;
  pl.for_each([&](size_t i, size_t off) {
    if (t == ElementType::f32) {
      uint32_t u;
      std::memcpy(&u, buffer + off * 4, 4);
      bad += u == kPoisonF32;
      out.data[i] = std::bit_cast<float>(u);
    } else if (t == ElementType::u8) {
      out.data[i] = buffer[off];
    } else {
      uint16_t h;
      std::memcpy(&h, buffer + off * 2, 2);
      bad += h == (t == ElementType::f16 ? kPoisonF16 : kPoisonBF16);
      out.data[i] = t == ElementType::f16 ? half_bits_to_float(h) : bf16_bits_to_float(h);
    }
  });
  if (unwritten) *unwritten = bad;
  return out;
}

size_t written_outside(const unsigned char* buffer, int64_t extent, const std::vector<Placement>& placements, ElementType t) {
  if (t == ElementType::u8 || extent <= 0) return 0;
  std::vector<bool> inside(static_cast<size_t>(extent), false);
  for (const Placement& pl : placements) pl.for_each([&](size_t, size_t off) { inside[off] = true; });
  size_t n = 0;
  for (size_t i = 0; i < inside.size(); ++i) {
    if (inside[i]) continue;
    if (t == ElementType::f32) {
      uint32_t u;
      std::memcpy(&u, buffer + i * 4, 4);
      n += u != kPoisonF32;
    } else {
      uint16_t h;
      std::memcpy(&h, buffer + i * 2, 2);
      n += h != (t == ElementType::f16 ? kPoisonF16 : kPoisonBF16);
    }
  }
  return n;
}

}  // namespace attnfuzz
