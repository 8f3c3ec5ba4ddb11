#pragma once
// A dense float64 tensor in logical row-major order ([B][H][S][D] for Q/K/V/O and
// their gradients, [B][H][S] for LSE). Backends of lower precision store their
// results here exactly (every fp32/fp16/bf16 value is a double), so all
// comparisons happen in one representation.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <numeric>
#include <vector>

namespace attnfuzz {

struct Tensor {
  std::vector<int64_t> shape;
  std::vector<double> data;

  Tensor() = default;
  explicit Tensor(std::vector<int64_t> s, double fill = 0.0) : shape(std::move(s)), data(numel_of(shape), fill) {}

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
