#pragma once
// A dense float64 tensor in logical row-major order ([B][H][S][D] for Q/K/V/O and
// their gradients, [B][H][S] for LSE). Backends of lower precision store their
// results here exactly (every fp32/fp16/bf16 value is a double), so all
// comparisons happen in one representation.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <type_traits>
#include <utility>
#include <vector>

namespace attnfuzz {

// A std::allocator whose construction without a value default-initializes, so a vector's sized
// construction and resize leave doubles unset; construction with a value is unchanged.
// With -DATTNFUZZ_POISON_UNINIT those elements are NaN instead, so a read before a write shows
// in the verdicts (docs/gpu.md, "Harness speed").
template <class T, class A = std::allocator<T>>
struct DefaultInitAllocator : A {
  using A::A;
  template <class U>
  struct rebind {
    using other = DefaultInitAllocator<U, typename std::allocator_traits<A>::template rebind_alloc<U>>;
  };
  template <class U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
#ifdef ATTNFUZZ_POISON_UNINIT
    if constexpr (std::numeric_limits<U>::has_quiet_NaN)
      ::new (static_cast<void*>(p)) U(std::numeric_limits<U>::quiet_NaN());
    else
#endif
      ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    std::allocator_traits<A>::construct(static_cast<A&>(*this), p, std::forward<Args>(args)...);
  }
};

using TensorData = std::vector<double, DefaultInitAllocator<double>>;

// Every element := value (over threads from parallel_min_elements(), harness/parallel.h).
void fill_elements(TensorData& data, double value);

// The tag of Tensor's constructor that leaves the elements unset.
struct Uninitialized {
  explicit Uninitialized() = default;
};
inline constexpr Uninitialized uninitialized{};

struct Tensor {
  std::vector<int64_t> shape;
  TensorData data;

  Tensor() = default;
  // Filled over threads at real size (fill_elements): a real-size case makes a hundred such
  // tensors, and filling them on one thread was a tenth of its wall time.
  explicit Tensor(std::vector<int64_t> s, double fill = 0.0) : shape(std::move(s)), data(numel_of(shape)) { fill_elements(data, fill); }
  // Elements unset, for tensors a download, a copy or a kernel wholly overwrites before any read:
  // value-initializing them was 16% of a real-size case's wall time.
  Tensor(std::vector<int64_t> s, Uninitialized) : shape(std::move(s)), data(numel_of(shape)) {}

  static size_t numel_of(const std::vector<int64_t>& s) {
    return static_cast<size_t>(std::accumulate(s.begin(), s.end(), int64_t{1}, std::multiplies<>()));
  }
  size_t numel() const { return data.size(); }
  int64_t dim(size_t i) const { return shape.at(i); }
  double* ptr() { return data.data(); }
  const double* ptr() const { return data.data(); }
  // Row (b, h, s) of a 4-D tensor, or element (b, h, s) of a 3-D one.
  double* at(int64_t b, int64_t h, int64_t s) { return data.data() + offset(b, h, s); }
  const double* at(int64_t b, int64_t h, int64_t s) const { return data.data() + offset(b, h, s); }
  bool operator==(const Tensor&) const = default;

 private:
  size_t offset(int64_t b, int64_t h, int64_t s) const {
    const int64_t d = shape.size() > 3 ? shape[3] : 1;
    return static_cast<size_t>(((b * shape[1] + h) * shape[2] + s) * d);
  }
};

// Rows [s0, s1) of dimension 2 of a 3-D or 4-D tensor.
Tensor slice_seq(const Tensor& t, int64_t s0, int64_t s1);
// dst[..., s0 : s0 + src.S, ...] += src (or = src when accumulate is false).
void place_seq(Tensor& dst, const Tensor& src, int64_t s0, bool accumulate);

}  // namespace attnfuzz
