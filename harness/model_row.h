#pragma once
// One row of the error model (harness/error_model.h, model_sigma_and_row_dof), written once for
// the host (harness/error_model.cpp) and the device (oracles/gpu_model.cu): each element's
// variance by the parts that share its errors along the row, its sigma, and the row's dof
//
//   dof = (sum_d var_d)^2 / (independent^2 / distinct + storage^2 / storage sources + shared parts^2 / their sources),
//
// clamped to [1, width] and capped by the row's participation (sum var)^2 / sum var^2. The
// arithmetic is the same operations in the same order on both, and the device file is compiled
// without contracting multiplies and adds, so both give the same bits.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "harness/tensors.h"

#ifdef __CUDACC__
#define AF_HOST_DEVICE __host__ __device__
#else
#define AF_HOST_DEVICE
#endif

namespace attnfuzz {

// A contract's rounding units (harness/error_model.h, rounding_units).
struct RoundingUnits {
  double operand = 0;     // u_op: P, dS and the matmul operands
  double store = 0;       // u_st: the stored outputs (the case dtype)
  double accumulate = 0;  // u_acc: accumulation (fp32 below fp64)
  double input = 0;       // u_in: extra rounding of Q, K, V, dO (tf32)
  double lse = 0;         // u_lse: the LSE's declared accuracy
  double truncate = 0;    // u_tr: the tensor cores' truncating accumulation (the LSE's truncation part)
  bool fp16_operands = false;  // the subnormal part applies (its eta is fp16's)
};
struct TermTensors;

}  // namespace attnfuzz

namespace attnfuzz::model_row {

// TermTensors as raw arrays, null where the tensor is empty.
struct TermArrays {
  const double *operand = nullptr, *stored = nullptr, *score = nullptr;
  const double *via_op = nullptr, *via_st = nullptr, *via_acc = nullptr, *via_sc = nullptr;
  const double *underflow = nullptr, *subnormal = nullptr, *subnormal_sources = nullptr;
  const double *operand_sources = nullptr, *score_sources = nullptr, *row_lse = nullptr, *direction_sources = nullptr;
  const double *normalizer_lse = nullptr, *normalizer_acc = nullptr, *truncation = nullptr;
  double length = 1;
};

// The arrays of t (harness/error_model.cpp).
TermArrays term_arrays(const TermTensors& t);

AF_HOST_DEVICE inline double min_of(double a, double b) { return b < a ? b : a; }
AF_HOST_DEVICE inline double max_of(double a, double b) { return a < b ? b : a; }
AF_HOST_DEVICE inline double clamp_of(double x, double lo, double hi) { return x < lo ? lo : hi < x ? hi : x; }
AF_HOST_DEVICE inline uint64_t bits_of(double x) {
#ifdef __CUDA_ARCH__
  return static_cast<uint64_t>(__double_as_longlong(x));
#else
  uint64_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
#endif
}

AF_HOST_DEVICE inline double storage_variance(TensorId t, double ref, const RoundingUnits& u) {
  return t == TensorId::LSE ? u.lse * u.lse * (1.0 + ref * ref) / 3.0 : u.store * u.store * ref * ref / 3.0;
}

// One element's variance, by how its errors are shared along the row.
struct VarianceParts {
  double operand = 0, score = 0, via = 0, normalizer = 0, storage = 0, independent = 0, subnormal = 0;
  AF_HOST_DEVICE double total() const { return operand + score + via + normalizer + storage + independent + subnormal; }
};

// The LSE's accumulation error, u_acc^2 L / 6: the log of a sum of L terms at u_acc. The O and dQ
// normalizers err by it too.
AF_HOST_DEVICE inline double lse_accumulation_variance(const TermArrays& terms, const RoundingUnits& u) {
  return u.accumulate * u.accumulate * terms.length / 6.0;
}

// The relative variance of the row's normalizer (harness/error_model.h, "normalizer"); 0 for
// outputs without one.
AF_HOST_DEVICE inline double normalizer_variance(TensorId t, const TermArrays& terms, const RoundingUnits& u, size_t row) {
  const double accumulated = model_row::lse_accumulation_variance(terms, u);
  if (t == TensorId::O) return accumulated;
  if (t != TensorId::dQ) return 0.0;
  const double lse = terms.row_lse ? terms.row_lse[row] : 0.0;
  return (std::isfinite(lse) ? model_row::storage_variance(TensorId::LSE, lse, u) : 0.0) + accumulated;
}

AF_HOST_DEVICE inline VarianceParts element_variance(TensorId t, const TermArrays& terms, double ref, const RoundingUnits& u, size_t e,
                                                     size_t row) {
  const double u_score2 = u.accumulate * u.accumulate + u.input * u.input;
  const double acc2 = u.accumulate * u.accumulate * terms.length / 3.0;
  const double r = std::isfinite(ref) ? ref : 0.0;
  const double op = terms.operand[e], st = terms.stored[e], sc = terms.score[e];
  VarianceParts v;
  if (t == TensorId::LSE) {
    v.independent = model_row::storage_variance(t, r, u) + model_row::lse_accumulation_variance(terms, u);
    v.score = u_score2 * sc * sc;
    if (terms.truncation) v.score += u.truncate * u.truncate * terms.truncation[e] * terms.truncation[e];
    return v;
  }
  v.operand = u.operand * u.operand * op * op / 3.0;
  v.storage = model_row::storage_variance(t, r, u);
  v.independent = u.store * u.store * st * st / 3.0 + acc2 * (r * r / 3.0 + op * op / 2.0);
  v.score = u_score2 * sc * sc;
  v.normalizer = model_row::normalizer_variance(t, terms, u, row) * r * r;
  if (terms.normalizer_lse) {
    const double nl = terms.normalizer_lse[e], na = terms.normalizer_acc[e];
    v.normalizer += u.lse * u.lse * nl * nl / 3.0 + u.accumulate * u.accumulate * na * na / 6.0;
  }
  // Lost whole where the kernel flushes (a one-source part of the row, like the operand's).
  if (terms.underflow) v.operand += terms.underflow[e] * terms.underflow[e];
  if (u.fp16_operands && terms.subnormal) v.subnormal = terms.subnormal[e] * terms.subnormal[e] / 3.0;
  if (terms.via_op) {
    const double a = terms.via_op[e], b = terms.via_st[e], c = terms.via_acc[e], d = terms.via_sc[e];
    v.via = (u.operand * u.operand * a * a + u.store * u.store * b * b) / 3.0 + u.accumulate * u.accumulate * c * c + u_score2 * d * d;
  }
  return v;
}

// storage_sources' phase table: exp(2 pi i f) at 2^12 phases, {cos, sin} pairs (8e-4 of a turn at
// most, far below what the sums resolve); the host computes it once (error_model.cpp,
// phase_table) and the device gets a copy.
inline constexpr int kHarmonics = 4, kPhaseBits = 12;
const double* phase_table();  // 2 << kPhaseBits doubles (harness/error_model.cpp)

// How many independent roundings the storage of a row's values makes (harmonic correlation of
// their positions on the storage grid; harmonic k weighs 6 / (pi^2 k^2), normalized over the
// harmonics kept): `distinct` for unrelated values, 1 where every value sits at the same phase.
AF_HOST_DEVICE inline double storage_sources(const double* ref, int64_t n, double unit_store, double distinct, const double* phasor) {
  // The storage keeps p bits (unit_store = 2^-p), p - 1 of them explicit; t's fractional part is
  // the double's dropped significand bits, read exactly. A double storage drops none.
  const int dropped = 52 - (-std::ilogb(unit_store) - 1);
  if (distinct <= 1.0 || unit_store <= 0.0 || dropped <= 0 || dropped > 52) return max_of(1.0, distinct);
  const uint64_t fraction_mask = (uint64_t{1} << dropped) - 1;
  double sum_a = 0, sum_a2 = 0;
  double re[kHarmonics] = {}, im[kHarmonics] = {};
  for (int64_t d = 0; d < n; ++d) {
    const double x = ref[d];
    if (x == 0.0 || !std::isfinite(x)) continue;  // stored exactly, or not judged by the rule
    const uint64_t f = bits_of(x) & fraction_mask;
    const uint64_t index = dropped >= kPhaseBits ? f >> (dropped - kPhaseBits) : f << (kPhaseBits - dropped);
    const double a = unit_store * std::fabs(x);
    // t = x / step is negative for negative x: its fractional part is 1 - f, the phase's conjugate.
    const double c1 = phasor[2 * index], s1 = x < 0 ? -phasor[2 * index + 1] : phasor[2 * index + 1];
    double c = c1, s = s1;  // exp(2 pi i k t) by powers of the first harmonic
    for (int k = 0; k < kHarmonics; ++k) {
      re[k] += a * c;
      im[k] += a * s;
      const double next_c = c * c1 - s * s1;
      s = s * c1 + c * s1;
      c = next_c;
    }
    sum_a += a;
    sum_a2 += a * a;
  }
  if (sum_a <= 0.0) return distinct;
  const double p = sum_a2 / (sum_a * sum_a);
  if (p >= 1.0) return distinct;
  // The harmonics' weights, and the spread of their sum over unrelated values in units of p (sqrt
  // of the sum of the squared weights).
  double weight[kHarmonics], weight_sum = 0, weight_sum2 = 0;
  for (int k = 1; k <= kHarmonics; ++k) weight_sum += 1.0 / (k * k);
  for (int k = 1; k <= kHarmonics; ++k) {
    weight[k - 1] = 1.0 / (k * k) / weight_sum;
    weight_sum2 += weight[k - 1] * weight[k - 1];
  }
  const double weight_spread = std::sqrt(weight_sum2);
  double mean_correlation = 0;
  for (int i = 0; i < kHarmonics; ++i) mean_correlation += weight[i] * ((re[i] * re[i] + im[i] * im[i]) / (sum_a * sum_a) - p) / (1.0 - p);
  // Unrelated values give rho_k of about p times an exponential draw (spread p): five spreads of
  // the weighted sum are taken as noise (0.2% of unrelated rows keep some correlation).
  const double c = clamp_of(mean_correlation - 5.0 * p * weight_spread, 0.0, 1.0);
  return max_of(1.0, distinct / (1.0 + (distinct - 1.0) * c));
}

// However a row's errors are shared, its statistic sum_d err_d^2 cannot carry more independent
// errors than its elements' variances spread over: for errors of covariance C the statistic has
// (tr C)^2 / tr(C^2) of them, and tr(C^2) >= sum_d C_dd^2, so at most
//   (sum_d var_d)^2 / sum_d var_d^2
// (1 where one element's variance dominates the row, D for D equal ones): a dK row of a key whose
// column 0 sums Q rows shifted by 582 errs in that one column. A row's dof, capped by that
// participation (and at least 1):
AF_HOST_DEVICE inline double capped_by_participation(double dof, double sum_var, double sum_var2) {
  const double participation = sum_var2 > 0 ? sum_var * sum_var / sum_var2 : INFINITY;
  return max_of(1.0, min_of(dof, participation));
}

// Row `row` of output t (width elements from row * width): each element's sigma into sigma_row,
// and the row's dof. `distinct` counts the row's different reference values (exactly equal
// ones once; each NaN apart).
AF_HOST_DEVICE inline double model_row(TensorId t, const TermArrays& terms, const double* ref, const RoundingUnits& u, size_t row,
                                       int64_t width, double distinct, const double* phasor, double* sigma_row) {
  VarianceParts sum;
  double sum_var2 = 0;  // sum over the row's elements of their variance squared
  for (int64_t d = 0; d < width; ++d) {
    const size_t e = row * static_cast<size_t>(width) + static_cast<size_t>(d);
    const VarianceParts v = model_row::element_variance(t, terms, ref[e], u, e, row);
    sigma_row[d] = std::sqrt(v.total());
    sum_var2 += v.total() * v.total();
    sum.operand += v.operand;
    sum.score += v.score;
    sum.via += v.via;
    sum.normalizer += v.normalizer;
    sum.storage += v.storage;
    sum.independent += v.independent;
    sum.subnormal += v.subnormal;
  }
  // dQ receives D's error through the one number D_i; dK's via parts sum over the queries
  // that see the key, as its operand does.
  double op_sources = terms.operand_sources[row], sc_sources = terms.score_sources[row];
  if (terms.direction_sources) {
    op_sources = min_of(op_sources, terms.direction_sources[row]);
    sc_sources = min_of(sc_sources, terms.direction_sources[row]);
  }
  double correlated = sum.operand, via = sum.via;
  if (t == TensorId::dK) correlated += via, via = 0.0;
  double shared_denom = via * via + sum.normalizer * sum.normalizer;
  if (correlated > 0) shared_denom += correlated * correlated / max_of(1.0, op_sources);
  if (sum.score > 0) shared_denom += sum.score * sum.score / max_of(1.0, sc_sources);
  if (sum.subnormal > 0) {
    double sub_sources = terms.subnormal_sources ? terms.subnormal_sources[row] : op_sources;
    if (terms.direction_sources) sub_sources = min_of(sub_sources, terms.direction_sources[row]);
    shared_denom += sum.subnormal * sum.subnormal / max_of(1.0, sub_sources);
  }
  // Every shared part moves the row inside the span of the same vectors (the normalizer along
  // the row, D's error along sum_j P_ij K_j for dQ), so together they cannot have more sources
  // than those vectors have directions: a query that sees one key errs along that key, however
  // its error splits into parts (torch.efficient's fp32 dQ row at 8.97 sigma' against the 7.66
  // of a 3.74-source row, Skv = 1: docs/findings/README.md).
  const double shared = sum.operand + sum.score + sum.via + sum.normalizer + sum.subnormal;
  if (terms.direction_sources && shared_denom > 0)
    shared_denom = max_of(shared_denom, shared * shared / max_of(1.0, terms.direction_sources[row]));
  // Elements with the same value are computed alike and round alike (a row of an exactly
  // constant V): they are one source of the independent part, not one each; and elements
  // close together on the storage grid store one rounding (storage_sources).
  const double* row_ref = ref + row * static_cast<size_t>(width);
  double denom = sum.independent * sum.independent / distinct + shared_denom;
  if (sum.storage > 0) denom += sum.storage * sum.storage / model_row::storage_sources(row_ref, width, u.store, distinct, phasor);
  const double total = sum.total();
  const double dof = denom > 0 ? clamp_of(total * total / denom, 1.0, static_cast<double>(width)) : static_cast<double>(width);
  return model_row::capped_by_participation(dof, total, sum_var2);
}

}  // namespace attnfuzz::model_row
