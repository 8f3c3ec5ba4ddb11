#pragma once
// Memory layouts: where each tensor of an attention call lives in its buffer, one
// layout per tensor (docs/semantics.md, "Layouts and packed views"). Values never depend on the
// layout: element (b, h, s, d) has the same value in every layout.
//
// place() is the one function that turns a layout into strides, a base offset and the
// extent of the buffer. For a tensor of width w (its head dim; 1 for the 3-D LSE) and
// the order's dims x1 (outermost), x2, x3 (innermost) of B, H, S:
//
//   stride(D)  = 1
//   stride(x3) = w + row_padding                   (+ head_padding when x3 is H)
//   stride(xi) = size(x(i+1)) * stride(x(i+1))     (+ head_padding when xi is H)
//   offset     = layout.offset
//   extent     = offset + size(x1) * stride(x1)    (whole blocks: the last row's padding too)
//
// Packed groups (docs/semantics.md, "Layouts and packed views") are views of one
// [B][S][n][H][w + row_padding] buffer, laid out by the group's first member's row
// padding and offset (the members' own orders and paddings do not apply):
//
//   stride(D) = 1, stride(H) = w + row_padding, stride(n) = H * stride(H),
//   stride(S) = n * stride(n), stride(B) = S * stride(S)
//   offset(member i) = offset + i * stride(n),  extent = offset + B * stride(B)
//
// Every buffer then gets the surround's guard on either side: offset += guard, extent += 2 guard.
//
// A packing applies only where the call's shapes allow it (qkv: Hq == Hkv, Sq == Skv,
// Dqk == Dv; kv: Dqk == Dv); elsewhere the members keep their own layouts.
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "harness/dtype.h"
#include "harness/tensors.h"

namespace attnfuzz {

struct Shape;

// A layout for each tensor a case lays out one by one (kLaidOutTensors, harness/tensors.h): Q, K,
// V, dO, O, LSE, dQ, dK, dV. dLSE is laid out as LSE (a gradient shares its tensor's layout, as in
// PyTorch); the case format names them by case_key.
struct TensorLayout {
  // The order of B, H and S, outermost first; D is always innermost and contiguous.
  enum class Order { bhsd, bshd, hbsd, hsbd, sbhd, shbd };
  Order order = Order::bhsd;
  int64_t row_padding = 0;   // extra elements after each row (a padded row stride)
  int64_t head_padding = 0;  // extra elements after each head (heads padded apart)
  int64_t offset = 0;        // elements before element (0, 0, 0, 0): any value, 16-byte aligned or not
  bool operator==(const TensorLayout&) const = default;
};
inline constexpr std::array<TensorLayout::Order, 6> kAllOrders{TensorLayout::Order::bhsd, TensorLayout::Order::bshd,
                                                               TensorLayout::Order::hbsd, TensorLayout::Order::hsbd,
                                                               TensorLayout::Order::sbhd, TensorLayout::Order::shbd};
const char* order_name(TensorLayout::Order o);
std::optional<TensorLayout::Order> order_from_name(std::string_view name);

// Views of one buffer: qkv packs Q, K, V (or dQ, dK, dV) as [B][S][3][H][D]; kv packs
// K, V (or dK, dV) as [B][S][2][H][D].
enum class Packing { none, qkv, kv };
const char* packing_name(Packing p);
std::optional<Packing> packing_from_name(std::string_view name);

// What an input buffer holds where none of its tensors' elements are: the row and head padding,
// the gaps of an order, the slack before the base offset, and `guard` elements added before
// and after the buffer. A backend that reads only its tensors never sees these values; one that
// reads outside them (an unaligned vector load, a tile past the last row) reads them, and reads
// the same thing on every replay, so a bug that depends on that memory fails again from its
// reproducer instead of on whatever an allocator left there. Output buffers keep their poison
// (backends/typed_buffers.h) and get the same guard.
struct Surround {
  enum class Fill { zero, nan, large };  // large: the element type's largest finite value
  Fill fill = Fill::zero;
  int64_t guard = 0;  // elements before and after each buffer
  bool operator==(const Surround&) const = default;
};
inline constexpr int64_t kMaxSurroundGuard = 1 << 16;
const char* fill_name(Surround::Fill f);
std::optional<Surround::Fill> fill_from_name(std::string_view name);
// The value of one surrounding element of type `d` (harness/dtype.h, largest_finite).
double surround_value(Surround::Fill f, DType d);

struct Layouts {
  Packing inputs = Packing::none;  // Q, K, V
  Packing grads = Packing::none;   // dQ, dK, dV
  Surround surround;

  TensorLayout& operator[](TensorId r) { return tensors_[laid_out_index(r)]; }
  const TensorLayout& operator[](TensorId r) const { return tensors_[laid_out_index(r)]; }
  // Every tensor in one layout, nothing packed (what a case of the old `layout` key means).
  static Layouts uniform(const TensorLayout& l);
  // All tensors share one layout, nothing packed, the default surround: that layout; otherwise none.
  std::optional<TensorLayout> as_uniform() const;
  bool operator==(const Layouts&) const = default;

 private:
  std::array<TensorLayout, kLaidOutTensors.size()> tensors_{};  // indexed by laid_out_index
};

// Where a tensor lives: sizes and strides in the logical [B][H][S][D] order (3-D: [B][H][S]).
struct Placement {
  int32_t ndim = 4;
  std::array<int64_t, 4> sizes{}, strides{};
  int64_t offset = 0;                 // of element (0, 0, 0, 0) from the buffer's start, in elements
  int64_t extent = 0;                 // elements the buffer spans (shared by a packed group)
  TensorId buffer = TensorId::Q;  // whose buffer: the tensor itself, or its packed group's first member

  int64_t numel() const;
  int64_t at(int64_t b, int64_t h, int64_t s, int64_t d = 0) const {
    return offset + b * strides[0] + h * strides[1] + s * strides[2] + d * strides[3];
  }
  // f(logical row-major index, element offset in the buffer) for every element.
  template <class F>
  void for_each(F&& f) const {
    const int64_t w = ndim == 4 ? sizes[3] : 1;
    size_t i = 0;
    for (int64_t b = 0; b < sizes[0]; ++b)
      for (int64_t h = 0; h < sizes[1]; ++h)
        for (int64_t s = 0; s < sizes[2]; ++s)
          for (int64_t d = 0; d < w; ++d, ++i) f(i, static_cast<size_t>(at(b, h, s, d)));
  }
};

// The tensor's logical sizes in a call of this shape ([B][H][S][D], LSE [B][H][S]).
std::array<int64_t, 4> role_sizes(TensorId r, const Shape& s, int32_t* ndim = nullptr);
// Whether `packing` can join the group's tensors in a call of this shape.
bool packing_applies(Packing packing, const Shape& s);
// The one layout-to-memory function (formula above).
Placement place(const Layouts& layouts, TensorId r, const Shape& s);

// One line for reports: "default", or the non-default tensors and packings.
std::string describe(const Layouts& l);

}  // namespace attnfuzz
