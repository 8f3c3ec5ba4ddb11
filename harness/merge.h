#pragma once
// Merging partial attention results over disjoint key sets through their LSEs
// (docs/semantics.md, "Merging"), forward and backward, in float64. These are the
// reference merge functions; the composition engine uses them between backend calls.
#include <vector>

#include "harness/problem.h"

namespace attnfuzz {

// L = logsumexp_k L_k; O = sum_k w_k O_k with w_k = exp(L_k - L) (0 when L_k = -inf).
Forward merge_forward(const std::vector<Forward>& parts);

struct PartGrad {
  Tensor d_out, d_lse;
};
// dO_k = w_k dO;  dL_k = w_k * (rowsum(dO * O_k) - rowsum(dO * O) + dL).
std::vector<PartGrad> merge_backward(const std::vector<Forward>& parts, const Forward& merged, const Tensor& d_out, const Tensor& d_lse);

// A backend that merges partial results itself (Backend::merger(): the project's GPU merge
// kernel, say) implements the same two functions; the composition engine calls it instead.
class Merger {
 public:
  virtual ~Merger() = default;
  virtual Forward forward(const std::vector<Forward>& parts) const = 0;
  virtual std::vector<PartGrad> backward(const std::vector<Forward>& parts, const Forward& merged, const Tensor& d_out,
                                         const Tensor& d_lse) const = 0;
};

}  // namespace attnfuzz
