#pragma once
// Central differences of the float64 reference's loss, for the tests that hold its gradients
// (tests/test_reference.cpp, tests/test_bias.cpp).
#include <algorithm>
#include <cmath>

#include "harness/problem.h"
#include "oracles/reference.h"

namespace attnfuzz {

// L = sum(O * dO) + sum over rows with a finite LSE of LSE * g.
inline double loss(const Problem& p, const Tensor& d_out, const Tensor& d_lse) {
  const Forward f = reference_forward(p);
  double l = 0;
  for (size_t i = 0; i < f.o.numel(); ++i) l += f.o.data[i] * d_out.data[i];
  for (size_t i = 0; i < f.lse.numel(); ++i)
    if (std::isfinite(f.lse.data[i])) l += f.lse.data[i] * d_lse.data[i];
  return l;
}

inline double rel_err(const Tensor& a, const Tensor& b) {
  double d = 0, n = 0;
  for (size_t i = 0; i < a.numel(); ++i) {
    d += (a.data[i] - b.data[i]) * (a.data[i] - b.data[i]);
    n += b.data[i] * b.data[i];
  }
  return std::sqrt(d) / std::max(std::sqrt(n), 1e-3);
}

inline Tensor finite_difference(Problem p, Tensor Problem::*which, const Tensor& d_out, const Tensor& d_lse) {
  Tensor& t = p.*which;
  Tensor g(t.shape);
  for (size_t i = 0; i < t.numel(); ++i) {
    const double x = t.data[i], h = 1e-5 * std::max(1.0, std::fabs(x));
    t.data[i] = x + h;
    const double up = loss(p, d_out, d_lse);
    t.data[i] = x - h;
    const double down = loss(p, d_out, d_lse);
    t.data[i] = x;
    g.data[i] = (up - down) / (2 * h);
  }
  return g;
}

}  // namespace attnfuzz
