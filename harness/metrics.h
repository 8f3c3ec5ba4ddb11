#pragma once
// Error of one tensor against the float64 reference.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "harness/tensor.h"

namespace attnfuzz {

struct ErrorStats {
  double max_abs = 0;  // over elements where both are finite
  double rel_fro = 0;  // ||a - r||_F / ||r||_F (||a - r||_F when r == 0)
  double mean_abs = 0;
  double rms = 0;          // root mean square of the error
  double ref_max_abs = 0;  // magnitude of the reference, for floors
  double ref_rms = 0;
  size_t nonfinite_mismatch = 0;  // NaN/Inf where the reference is finite, or a different infinity
  // Of those, the elements where the naive computation under the declared contract is not finite
  // either (harness/verdict.h, judge_tensor): counted here, left out of nonfinite_mismatch.
  size_t nonfinite_under_contract = 0;
  size_t count = 0;
};

// Compares elementwise; infinities count as equal only when the reference has the same one
// (a fully masked row's LSE = -inf), or where the reference overflows the storage type: from
// `overflow` (the magnitude that rounds to infinity there: 65520 for fp16) the correctly stored
// value is the infinity of the reference's sign, and within kOverflowSlack below it a rounding
// error of a correct kernel may reach it (a gradient summed over thousands of large dO rows).
// Rows (groups of the last dimension of a 4-D tensor, single elements of a 3-D one)
// flagged in `skip_rows` are left out.
inline constexpr double kOverflowSlack = 0x1p-6;
ErrorStats compare(const Tensor& impl, const Tensor& ref, const std::vector<uint8_t>* skip_rows = nullptr,
                   double overflow = std::numeric_limits<double>::infinity());
// The statistics from compare()'s sums over the finite elements (sum |a - r|^2, sum r^2, sum
// |a - r|, their count, the largest |a - r| and |r|), wherever they were summed.
ErrorStats error_stats_from_sums(double diff2, double ref2, double sum_abs, size_t finite, double max_abs, double ref_max_abs,
                                 size_t nonfinite_mismatch, size_t count);
// Whether `a` is what a type that overflows from `overflow` may store for the float64 value `r`:
// the infinity of r's sign where |r| reaches overflow (within kOverflowSlack).
inline bool overflow_stored(double a, double r, double overflow) {
  return std::isinf(a) && std::signbit(a) == std::signbit(r) && std::fabs(r) * (1.0 + kOverflowSlack) >= overflow;
}
// Whether two tensors are bitwise identical (NaN payloads included).
bool bitwise_equal(const Tensor& a, const Tensor& b);

}  // namespace attnfuzz
