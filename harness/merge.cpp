#include "harness/merge.h"

#include <cmath>
#include <limits>
#include <stdexcept>

namespace attnfuzz {
namespace {
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

double weight(double part_lse, double lse) { return part_lse == kNegInf ? 0.0 : std::exp(part_lse - lse); }
}  // namespace

Forward merge_forward(const std::vector<Forward>& parts) {
  if (parts.empty()) throw std::invalid_argument("merge_forward: no parts");
  Forward out{Tensor(parts[0].o.shape), Tensor(parts[0].lse.shape, kNegInf)};
  const size_t rows = out.lse.numel();
  const size_t d = rows ? out.o.numel() / rows : 0;
  for (size_t r = 0; r < rows; ++r) {
    double m = kNegInf;
    for (const auto& p : parts) m = std::max(m, p.lse.data[r]);
    if (m == kNegInf) continue;  // no part sees any key: O = 0, LSE = -inf
    double sum = 0;
    for (const auto& p : parts)
      if (p.lse.data[r] != kNegInf) sum += std::exp(p.lse.data[r] - m);
    const double lse = m + std::log(sum);
    out.lse.data[r] = lse;
    for (const auto& p : parts) {
      const double w = weight(p.lse.data[r], lse);
      if (w == 0.0) continue;
      for (size_t i = 0; i < d; ++i) out.o.data[r * d + i] += w * p.o.data[r * d + i];
    }
  }
  return out;
}

std::vector<PartGrad> merge_backward(const std::vector<Forward>& parts, const Forward& merged, const Tensor& d_out, const Tensor& d_lse) {
  const size_t rows = merged.lse.numel();
  const size_t d = rows ? merged.o.numel() / rows : 0;
  std::vector<PartGrad> grads;
  for (const auto& p : parts) grads.push_back({Tensor(p.o.shape), Tensor(p.lse.shape)});
  for (size_t r = 0; r < rows; ++r) {
    const double lse = merged.lse.data[r];
    if (lse == kNegInf) continue;
    double do_o = 0;
    for (size_t i = 0; i < d; ++i) do_o += d_out.data[r * d + i] * merged.o.data[r * d + i];
    for (size_t k = 0; k < parts.size(); ++k) {
      const double w = weight(parts[k].lse.data[r], lse);
      if (w == 0.0) continue;
      double do_ok = 0;
      for (size_t i = 0; i < d; ++i) {
        grads[k].d_out.data[r * d + i] = w * d_out.data[r * d + i];
        do_ok += d_out.data[r * d + i] * parts[k].o.data[r * d + i];
      }
      grads[k].d_lse.data[r] = w * (do_ok - do_o + d_lse.data[r]);
    }
  }
  return grads;
}

}  // namespace attnfuzz
