#include "harness/error_model.h"

#include <cmath>
#include <stdexcept>

namespace attnfuzz {

std::optional<Output> output_from_string(std::string_view name) {
  for (Output t : kOutputs)
    if (name == to_string(t)) return t;
  return std::nullopt;
}

const char* to_string(Output t) {
  switch (t) {
    case Output::O:
      return "O";
    case Output::LSE:
      return "LSE";
    case Output::dQ:
      return "dQ";
    case Output::dK:
      return "dK";
    case Output::dV:
      return "dV";
  }
  return "?";
}

RoundingUnits rounding_units(Contract c, DType d, double lse_unit_roundoff) {
  const double u32 = unit_roundoff(DType::f32);
  RoundingUnits u;
  u.lse = lse_unit_roundoff;
  switch (c) {
    case Contract::fp64:
      u.operand = u.store = u.accumulate = std::ldexp(1.0, -53);
      u.lse = std::ldexp(1.0, -53);
      return u;
    case Contract::fp32:
      u.operand = u32;
      break;
    case Contract::tf32:
      u.operand = u.input = std::ldexp(1.0, -11);
      break;
    case Contract::fp16:
      u.operand = unit_roundoff(DType::f16);
      break;
    case Contract::bf16:
      u.operand = unit_roundoff(DType::bf16);
      break;
  }
  u.store = unit_roundoff(d);
  u.accumulate = u32;
  return u;
}

Tensor model_sigma(Output t, const TermTensors& terms, const Tensor& ref, const RoundingUnits& u) {
  if (terms.operand.shape != ref.shape) throw std::invalid_argument("model_sigma: the terms do not match the output's shape");
  Tensor sigma(ref.shape);
  const double u_score2 = u.accumulate * u.accumulate + u.input * u.input;
  const double acc2 = u.accumulate * u.accumulate * terms.length / 3.0;
  for (size_t e = 0; e < ref.numel(); ++e) {
    const double r = std::isfinite(ref.data[e]) ? ref.data[e] : 0.0;
    const double op = terms.operand.data[e], st = terms.stored.data[e], sc = terms.score.data[e];
    double v;
    if (t == Output::LSE)
      v = u.lse * u.lse * (1.0 + r * r) / 3.0 + acc2 / 2.0 + u_score2 * sc * sc;
    else
      v = (u.operand * u.operand * op * op + u.store * u.store * (r * r + st * st)) / 3.0 + acc2 * (r * r / 3.0 + op * op / 2.0) +
          u_score2 * sc * sc;
    if (!terms.via_op.data.empty()) {
      const double a = terms.via_op.data[e], b = terms.via_st.data[e], c = terms.via_acc.data[e], d = terms.via_sc.data[e];
      v += (u.operand * u.operand * a * a + u.store * u.store * b * b) / 3.0 + u.accumulate * u.accumulate * c * c + u_score2 * d * d;
    }
    sigma.data[e] = std::sqrt(v);
  }
  return sigma;
}

}  // namespace attnfuzz
