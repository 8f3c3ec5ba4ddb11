#pragma once
// The error model's magnitudes (harness/error_model.h) computed from the float64 problem
// with Eigen, per (batch, query head): the terms behind every output element.
#include "harness/error_model.h"
#include "harness/problem.h"

namespace attnfuzz {

// `fwd` is the float64 reference forward of `p`; d_out and d_lse the upstream gradients.
ErrorTerms reference_error_terms(const Problem& p, const Forward& fwd, const Tensor& d_out, const Tensor& d_lse);

}  // namespace attnfuzz
