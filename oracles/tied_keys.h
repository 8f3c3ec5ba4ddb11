#pragma once
// Keys that are copies of each other (harness/error_model.h, "tied keys"): where every K row, or
// every V row, of a key-value head is the same vector, as an exact near-constant input makes them,
// each query computes the same dot products against every key and rounds them alike. Their
// errors then add along the query's row instead of as independent terms. Both oracle sets ask
// the same question of the same float64 inputs.
#include <cstdint>
#include <cstring>

namespace attnfuzz {

// Whether the `rows` rows of `dim` elements at `x` (row-major) are bitwise equal, and at least two:
// one key has no partner to share its rounding with (the callers add the coherent sum beside the
// independent one, which for one key are the same term).
inline bool rows_tied(const double* x, int64_t rows, int64_t dim) {
  if (rows < 2) return false;
  for (int64_t r = 1; r < rows; ++r)
    if (std::memcmp(x, x + r * dim, static_cast<size_t>(dim) * sizeof(double)) != 0) return false;
  return true;
}

}  // namespace attnfuzz
