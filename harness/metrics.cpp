#include "harness/metrics.h"

#include <cmath>
#include <cstring>
#include <stdexcept>

namespace attnfuzz {

ErrorStats compare(const Tensor& impl, const Tensor& ref, const std::vector<uint8_t>* skip_rows, double overflow) {
  if (impl.shape != ref.shape) throw std::invalid_argument("compare: shapes differ");
  ErrorStats e;
  e.count = ref.numel();
  double diff2 = 0, ref2 = 0, sum_abs = 0;
  size_t finite = 0;
  const size_t row = ref.shape.size() > 3 ? static_cast<size_t>(ref.shape.back()) : 1;
  // Row by row, each row's elements in order: the same sums in the same order as one pass over
  // the elements, without a division per element to find its row.
  const size_t rows = row ? ref.numel() / row : 0;
  for (size_t r_i = 0; r_i < rows; ++r_i) {
    if (skip_rows && (*skip_rows)[r_i]) continue;
    const double *a_row = impl.data.data() + r_i * row, *r_row = ref.data.data() + r_i * row;
    for (size_t i = 0; i < row; ++i) {
      const double a = a_row[i], r = r_row[i];
      if (!std::isfinite(r) || !std::isfinite(a)) {
        if (!(std::isinf(r) && a == r) && !overflow_stored(a, r, overflow)) ++e.nonfinite_mismatch;
        continue;
      }
      const double d = std::fabs(a - r);
      e.max_abs = std::max(e.max_abs, d);
      e.ref_max_abs = std::max(e.ref_max_abs, std::fabs(r));
      diff2 += d * d;
      ref2 += r * r;
      sum_abs += d;
      ++finite;
    }
  }
  return error_stats_from_sums(diff2, ref2, sum_abs, finite, e.max_abs, e.ref_max_abs, e.nonfinite_mismatch, e.count);
}

ErrorStats error_stats_from_sums(double diff2, double ref2, double sum_abs, size_t finite, double max_abs, double ref_max_abs,
                                 size_t nonfinite_mismatch, size_t count) {
  ErrorStats e;
  e.count = count;
  e.max_abs = max_abs;
  e.ref_max_abs = ref_max_abs;
  e.nonfinite_mismatch = nonfinite_mismatch;
  e.mean_abs = finite ? sum_abs / static_cast<double>(finite) : 0.0;
  e.rel_fro = ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
  e.rms = finite ? std::sqrt(diff2 / static_cast<double>(finite)) : 0.0;
  e.ref_rms = finite ? std::sqrt(ref2 / static_cast<double>(finite)) : 0.0;
  return e;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.shape == b.shape && std::memcmp(a.data.data(), b.data.data(), a.data.size() * sizeof(double)) == 0;
}

}  // namespace attnfuzz
