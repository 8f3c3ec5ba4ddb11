#pragma once
// Error of one tensor against the float64 reference.
#include <cstddef>
#include <cstdint>
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
  size_t count = 0;
};

// Compares elementwise; infinities count as equal only when the reference has the same one
// (a fully masked row's LSE = -inf).
// Rows (groups of the last dimension of a 4-D tensor, single elements of a 3-D one)
// flagged in `skip_rows` are left out.
ErrorStats compare(const Tensor& impl, const Tensor& ref, const std::vector<uint8_t>* skip_rows = nullptr);
// Whether two tensors are bitwise identical (NaN payloads included).
bool bitwise_equal(const Tensor& a, const Tensor& b);

}  // namespace attnfuzz
