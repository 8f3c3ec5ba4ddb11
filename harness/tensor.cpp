#include "harness/tensor.h"

#include <algorithm>
#include <stdexcept>

#include "harness/parallel.h"

namespace attnfuzz {

void fill_elements(TensorData& data, double value) {
  parallel_for(data.size(), [&](size_t begin, size_t end) { std::fill(data.begin() + static_cast<std::ptrdiff_t>(begin), data.begin() + static_cast<std::ptrdiff_t>(end), value); });
}

Tensor slice_seq(const Tensor& t, int64_t s0, int64_t s1) {
  if (t.shape.size() < 3 || s0 < 0 || s1 > t.shape[2] || s0 > s1) throw std::out_of_range("slice_seq: bad range");
  std::vector<int64_t> shape = t.shape;
  shape[2] = s1 - s0;
  Tensor out(shape, uninitialized);
  const int64_t row = t.shape.size() > 3 ? t.shape[3] : 1, heads = t.shape[1];
  if (s1 <= s0) return out;
  // (b, h) planes over threads at real size (copies: any split gives the same bits).
  parallel_for(static_cast<size_t>(t.shape[0] * heads), static_cast<size_t>((s1 - s0) * row), [&](size_t begin, size_t end) {
    for (size_t bh = begin; bh < end; ++bh) {
      const int64_t b = static_cast<int64_t>(bh) / heads, h = static_cast<int64_t>(bh) % heads;
      std::copy(t.at(b, h, s0), t.at(b, h, s0) + (s1 - s0) * row, out.at(b, h, 0));
    }
  });
  return out;
}

void place_seq(Tensor& dst, const Tensor& src, int64_t s0, bool accumulate) {
  if (dst.shape.size() != src.shape.size() || s0 < 0 || s0 + src.shape[2] > dst.shape[2]) throw std::out_of_range("place_seq: bad range");
  const int64_t row = dst.shape.size() > 3 ? dst.shape[3] : 1;
  const int64_t n = src.shape[2] * row, heads = dst.shape[1];
  // (b, h) planes over threads at real size: each element gets its one add or copy.
  parallel_for(static_cast<size_t>(dst.shape[0] * heads), static_cast<size_t>(n), [&](size_t begin, size_t end) {
    for (size_t bh = begin; bh < end; ++bh) {
      const int64_t b = static_cast<int64_t>(bh) / heads, h = static_cast<int64_t>(bh) % heads;
      double* d = dst.at(b, h, s0);
      const double* s = src.at(b, h, 0);
      if (accumulate)
        for (int64_t i = 0; i < n; ++i) d[i] += s[i];
      else
        std::copy(s, s + n, d);
    }
  });
}

}  // namespace attnfuzz
