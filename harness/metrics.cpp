#include "harness/metrics.h"

#include <cmath>
#include <cstring>
#include <stdexcept>

namespace attnfuzz {

ErrorStats compare(const Tensor& impl, const Tensor& ref, const std::vector<uint8_t>* skip_rows) {
  if (impl.shape != ref.shape) throw std::invalid_argument("compare: shapes differ");
  ErrorStats e;
  e.count = ref.numel();
  double diff2 = 0, ref2 = 0, sum_abs = 0;
  size_t finite = 0;
  const size_t row = ref.shape.size() > 3 ? static_cast<size_t>(ref.shape.back()) : 1;
  for (size_t i = 0; i < ref.numel(); ++i) {
    if (skip_rows && row && (*skip_rows)[i / row]) continue;
    const double a = impl.data[i], r = ref.data[i];
    if (!std::isfinite(r) || !std::isfinite(a)) {
      if (!(std::isinf(r) && a == r)) ++e.nonfinite_mismatch;
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
