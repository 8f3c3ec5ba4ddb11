#include "harness/tensor.h"

#include <algorithm>
#include <stdexcept>

namespace attnfuzz {

Tensor slice_seq(const Tensor& t, int64_t s0, int64_t s1) {
  if (t.shape.size() < 3 || s0 < 0 || s1 > t.shape[2] || s0 > s1) throw std::out_of_range("slice_seq: bad range");
  std::vector<int64_t> shape = t.shape;
  shape[2] = s1 - s0;
  Tensor out(shape);
  const int64_t row = t.shape.size() > 3 ? t.shape[3] : 1;
  for (int64_t b = 0; b < t.shape[0]; ++b)
    for (int64_t h = 0; h < t.shape[1]; ++h)
      if (s1 > s0) std::copy(t.at(b, h, s0), t.at(b, h, s0) + (s1 - s0) * row, out.at(b, h, 0));
  return out;
}

void place_seq(Tensor& dst, const Tensor& src, int64_t s0, bool accumulate) {
  if (dst.shape.size() != src.shape.size() || s0 < 0 || s0 + src.shape[2] > dst.shape[2]) throw std::out_of_range("place_seq: bad range");
  const int64_t row = dst.shape.size() > 3 ? dst.shape[3] : 1;
  const int64_t n = src.shape[2] * row;
  for (int64_t b = 0; b < dst.shape[0]; ++b)
    for (int64_t h = 0; h < dst.shape[1]; ++h) {
      double* d = dst.at(b, h, s0);
      const double* s = src.at(b, h, 0);
      if (accumulate)
        for (int64_t i = 0; i < n; ++i) d[i] += s[i];
      else
        std::copy(s, s + n, d);
    }
}

}  // namespace attnfuzz
