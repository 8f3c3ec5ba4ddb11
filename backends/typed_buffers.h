#pragma once
// Host memory handed to a backend out of process or through a C ABI (backends/plugin.cpp's
// buffers, the Python bridge's shared memory, backends/shared_tensors.h): tensors stored in the
// case dtype at their placement (harness/layout.h), outputs poisoned before the call and read
// back after it, counting the elements the backend left poisoned. One table of the poison, one
// copy each way, for every such backend.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "harness/layout.h"
#include "harness/tensor.h"

namespace attnfuzz {

// What one element of the memory is: LSE and dLSE are always f32; u8 is the dense mask.
enum class ElementType { f32, f16, bf16, u8 };
size_t element_type_size(ElementType t);

// The poison: NaNs with payloads no arithmetic produces (u8 has none).
inline constexpr uint32_t kPoisonF32 = 0x7fc0deadu;
inline constexpr uint16_t kPoisonF16 = 0x7e5au;
inline constexpr uint16_t kPoisonBF16 = 0x7fa5u;

// Fills `elements` elements from `buffer` with the poison (nothing for u8).
void poison_elements(unsigned char* buffer, size_t elements, ElementType t);
// Fills `elements` elements from `buffer` with the surround (harness/layout.h): zero, a quiet
// NaN (0x7fc00000, 0x7e00, 0x7fc0: not the poison, so a copied surround is not counted as
// unwritten) or the type's largest finite value (nothing but zero for u8).
void fill_surround(unsigned char* buffer, size_t elements, ElementType t, Surround::Fill fill);
// float64 values into the buffer at the placement, rounded to t (u8: 1 where nonzero): the one copy in.
void store_placed(unsigned char* buffer, const Placement& pl, ElementType t, const Tensor& src);
// The placement's elements back to float64 (the one copy out); *unwritten counts those still poisoned.
Tensor load_placed(const unsigned char* buffer, const Placement& pl, ElementType t, size_t* unwritten);
// Elements of a poisoned output buffer of `extent` elements that lie outside every placement
// sharing it (row and head padding, the gaps of a layout, the slack before the base offset) and
// no longer hold the poison: a backend wrote where the tensor is not (nothing for u8).
size_t written_outside(const unsigned char* buffer, int64_t extent, const std::vector<Placement>& placements, ElementType t);

}  // namespace attnfuzz
