#pragma once
// Error of one tensor against the float64 reference.
#include <cstddef>
#include <string>

#include "harness/tensor.h"

namespace attnfuzz {

struct ErrorStats {
  double max_abs = 0;   // over elements where both are finite
  double rel_fro = 0;   // ||a - r||_F / ||r||_F (||a - r||_F when r == 0)
  double mean_abs = 0;
  double ref_max_abs = 0;  // magnitude of the reference, for floors
  size_t nonfinite_mismatch = 0;  // NaN/Inf where the reference is finite, or a different infinity
  size_t count = 0;
};

// Compares elementwise; infinities count as equal only when the reference has the same one
// (a fully masked row's LSE = -inf).
ErrorStats compare(const Tensor& impl, const Tensor& ref);

}  // namespace attnfuzz
