#pragma once
// The oracles a verdict needs, supplied by the caller: the harness depends on interfaces only
// (backends/registry.h builds them on the CPU or the GPU).
#include <functional>
#include <memory>

#include "harness/backend.h"
#include "harness/error_model.h"
#include "harness/verdict.h"

namespace attnfuzz {

struct OracleSet {
  Backend* reference = nullptr;  // float64
  // The naive same-precision computation under a contract, in forward or reversed order.
  std::function<std::unique_ptr<Backend>(Contract, bool reversed)> emulate;
  // The error model's magnitudes (harness/error_model.h) from the float64 problem, its
  // reference forward and the upstream gradients. Without it the rule uses the baselines alone.
  std::function<ErrorTerms(const Problem&, const Forward&, const Tensor& d_out, const Tensor& d_lse)> error_terms;
  // Where the verdict's sums over elements are computed (harness/verdict.h, VerdictReducer): a
  // fresh reducer for each case, or none to sum on the host.
  std::function<std::unique_ptr<VerdictReducer>()> verdict_reducer;
  // Where the error model's sigma and row dof are computed from the terms (error_model.h,
  // OutputModel): empty to compute them on the host.
  OutputModel output_model;
};

}  // namespace attnfuzz
