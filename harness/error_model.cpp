#include "harness/error_model.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "harness/case.h"
#include "harness/parallel.h"
#include "harness/problem.h"

namespace attnfuzz {

RoundingUnits rounding_units(Contract c, DType d, double lse_unit_roundoff, bool tensor_cores) {
  const double u32 = unit_roundoff(DType::f32);
  RoundingUnits u;
  u.lse = lse_unit_roundoff;
  // The truncating accumulation of the MMA steps (harness/error_model.h, "truncation"): 16-bit
  // operands in steps of 16 products, tf32 in steps of 8 (twice the steps).
  if (tensor_cores) {
    if (c == Contract::bf16 || c == Contract::fp16) u.truncate = u32;
    if (c == Contract::tf32 || c == Contract::tf32x3) u.truncate = 2.0 * u32;
  }
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
    case Contract::tf32x3:
      u.operand = u.input = std::ldexp(1.0, -22);  // small's rounding: 2^-11 of big's 2^-11
      break;
    case Contract::fp16:
      u.operand = unit_roundoff(DType::f16);
      u.fp16_operands = true;
      break;
    case Contract::bf16:
      u.operand = unit_roundoff(DType::bf16);
      break;
  }
  u.store = unit_roundoff(d);
  u.accumulate = u32;
  return u;
}

double reduction_length(TensorId t, const Shape& s) {
  return t == TensorId::dK || t == TensorId::dV ? static_cast<double>(s.seq_q * s.group()) : static_cast<double>(s.seq_kv);
}

double storage_variance(TensorId t, double ref, const RoundingUnits& u) {
  return t == TensorId::LSE ? u.lse * u.lse * (1.0 + ref * ref) / 3.0 : u.store * u.store * ref * ref / 3.0;
}

namespace {

// One element's variance, by how its errors are shared along the row (model_row_dof).
struct VarianceParts {
  double operand = 0, score = 0, via = 0, normalizer = 0, storage = 0, independent = 0, subnormal = 0;
  double total() const { return operand + score + via + normalizer + storage + independent + subnormal; }
};

// The LSE's accumulation error, u_acc^2 L / 6: the log of a sum of L terms at u_acc. The O and dQ
// normalizers err by it too.
double lse_accumulation_variance(const TermTensors& terms, const RoundingUnits& u) {
  return u.accumulate * u.accumulate * terms.length / 6.0;
}

// The relative variance of the row's normalizer (harness/error_model.h, "normalizer"); 0 for
// outputs without one.
double normalizer_variance(TensorId t, const TermTensors& terms, const RoundingUnits& u, size_t row) {
  const double accumulated = lse_accumulation_variance(terms, u);
  if (t == TensorId::O) return accumulated;
  if (t != TensorId::dQ) return 0.0;
  const double lse = terms.row_lse.data.empty() ? 0.0 : terms.row_lse.data[row];
  return (std::isfinite(lse) ? storage_variance(TensorId::LSE, lse, u) : 0.0) + accumulated;
}

VarianceParts element_variance(TensorId t, const TermTensors& terms, double ref, const RoundingUnits& u, size_t e, size_t row) {
  const double u_score2 = u.accumulate * u.accumulate + u.input * u.input;
  const double acc2 = u.accumulate * u.accumulate * terms.length / 3.0;
  const double r = std::isfinite(ref) ? ref : 0.0;
  const double op = terms.operand.data[e], st = terms.stored.data[e], sc = terms.score.data[e];
  VarianceParts v;
  if (t == TensorId::LSE) {
    v.independent = storage_variance(t, r, u) + lse_accumulation_variance(terms, u);
    v.score = u_score2 * sc * sc;
    if (!terms.truncation.data.empty()) v.score += u.truncate * u.truncate * terms.truncation.data[e] * terms.truncation.data[e];
    return v;
  }
  v.operand = u.operand * u.operand * op * op / 3.0;
  v.storage = storage_variance(t, r, u);
  v.independent = u.store * u.store * st * st / 3.0 + acc2 * (r * r / 3.0 + op * op / 2.0);
  v.score = u_score2 * sc * sc;
  v.normalizer = normalizer_variance(t, terms, u, row) * r * r;
  if (!terms.normalizer_lse.data.empty()) {
    const double nl = terms.normalizer_lse.data[e], na = terms.normalizer_acc.data[e];
    v.normalizer += u.lse * u.lse * nl * nl / 3.0 + u.accumulate * u.accumulate * na * na / 6.0;
  }
  // Lost whole where the kernel flushes (a one-source part of the row, like the operand's).
  if (!terms.underflow.data.empty()) v.operand += terms.underflow.data[e] * terms.underflow.data[e];
  if (u.fp16_operands && !terms.subnormal.data.empty()) v.subnormal = terms.subnormal.data[e] * terms.subnormal.data[e] / 3.0;
  if (!terms.via_op.data.empty()) {
    const double a = terms.via_op.data[e], b = terms.via_st.data[e], c = terms.via_acc.data[e], d = terms.via_sc.data[e];
    v.via = (u.operand * u.operand * a * a + u.store * u.store * b * b) / 3.0 + u.accumulate * u.accumulate * c * c + u_score2 * d * d;
  }
  return v;
}

// How many different values a row holds (exactly equal float64 references count once); `v`
// is scratch space, kept by the caller across rows.
double distinct_values(const double* x, int64_t n, std::vector<double>& v) {
  v.assign(x, x + n);
  std::sort(v.begin(), v.end());
  return static_cast<double>(std::max<ptrdiff_t>(1, std::unique(v.begin(), v.end()) - v.begin()));
}

}  // namespace

double storage_sources(const double* ref, int64_t n, double unit_store, double distinct) {
  // The storage keeps p bits (unit_store = 2^-p), p - 1 of them explicit; t's fractional part is
  // the double's dropped significand bits, read exactly. A double storage drops none.
  const int dropped = 52 - (-std::ilogb(unit_store) - 1);
  if (distinct <= 1.0 || unit_store <= 0.0 || dropped <= 0 || dropped > 52) return std::max(1.0, distinct);
  constexpr int kHarmonics = 4, kPhaseBits = 12;
  // exp(2 pi i f) at 2^12 phases: 8e-4 of a turn at most, far below what the sums resolve.
  static const std::array<std::array<double, 2>, size_t{1} << kPhaseBits> phasor = [] {
    std::array<std::array<double, 2>, size_t{1} << kPhaseBits> table{};
    for (size_t i = 0; i < table.size(); ++i) {
      const double angle = 6.283185307179586 * (static_cast<double>(i) + 0.5) / static_cast<double>(table.size());
      table[i] = {std::cos(angle), std::sin(angle)};
    }
    return table;
  }();
  const uint64_t fraction_mask = (uint64_t{1} << dropped) - 1;
  double sum_a = 0, sum_a2 = 0;
  std::array<double, kHarmonics> re{}, im{};
  for (int64_t d = 0; d < n; ++d) {
    const double x = ref[d];
    if (x == 0.0 || !std::isfinite(x)) continue;  // stored exactly, or not judged by the rule
    const uint64_t f = std::bit_cast<uint64_t>(x) & fraction_mask;
    const uint64_t index = dropped >= kPhaseBits ? f >> (dropped - kPhaseBits) : f << (kPhaseBits - dropped);
    const double a = unit_store * std::fabs(x);
    // t = x / step is negative for negative x: its fractional part is 1 - f, the phase's conjugate.
    const double c1 = phasor[index][0], s1 = x < 0 ? -phasor[index][1] : phasor[index][1];
    double c = c1, s = s1;  // exp(2 pi i k t) by powers of the first harmonic
    for (int k = 0; k < kHarmonics; ++k) {
      re[static_cast<size_t>(k)] += a * c;
      im[static_cast<size_t>(k)] += a * s;
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
  // The weights 6 / (pi^2 k^2), normalized over the harmonics kept, and the spread of their sum
  // over unrelated values in units of p (sqrt of the sum of the squared weights).
  static const auto [weight, weight_spread] = [] {
    std::array<double, kHarmonics> w{};
    double sum = 0, sum2 = 0;
    for (int k = 1; k <= kHarmonics; ++k) sum += 1.0 / (k * k);
    for (int k = 1; k <= kHarmonics; ++k) {
      w[static_cast<size_t>(k - 1)] = 1.0 / (k * k) / sum;
      sum2 += w[static_cast<size_t>(k - 1)] * w[static_cast<size_t>(k - 1)];
    }
    return std::pair{w, std::sqrt(sum2)};
  }();
  double mean_correlation = 0;
  for (size_t i = 0; i < kHarmonics; ++i)
    mean_correlation += weight[i] * ((re[i] * re[i] + im[i] * im[i]) / (sum_a * sum_a) - p) / (1.0 - p);
  // Unrelated values give rho_k of about p times an exponential draw (spread p): five spreads of
  // the weighted sum are taken as noise (0.2% of unrelated rows keep some correlation).
  const double c = std::clamp(mean_correlation - 5.0 * p * weight_spread, 0.0, 1.0);
  return std::max(1.0, distinct / (1.0 + (distinct - 1.0) * c));
}

void attach_row_lse(ErrorTerms& terms, const Tensor& lse) {
  terms[TensorId::O].row_lse = lse;
  terms[TensorId::dQ].row_lse = lse;
}

double directions(const double* x, int64_t n, int64_t dim) {
  std::vector<double> sum(static_cast<size_t>(dim), 0.0);
  double norm2 = 0;
  for (int64_t k = 0; k < n; ++k)
    for (int64_t d = 0; d < dim; ++d) {
      const double v = x[k * dim + d];
      sum[static_cast<size_t>(d)] += v;
      norm2 += v * v;
    }
  double sum2 = 0;
  for (double v : sum) sum2 += v * v;
  const double count = static_cast<double>(std::max<int64_t>(n, 1));
  return sum2 > 0 ? std::clamp(count * norm2 / sum2, 1.0, count) : count;
}

void attach_directions(ErrorTerms& terms, const Problem& p, const Tensor& d_out) {
  const Shape& s = p.shape;
  const int64_t group = s.group();
  for (TensorId t : {TensorId::O, TensorId::dQ, TensorId::dK, TensorId::dV}) {
    const bool q_rows = t == TensorId::O || t == TensorId::dQ;
    Tensor cap({s.batch, q_rows ? s.heads_q : s.heads_kv, q_rows ? s.seq_q : s.seq_kv});
    for (int64_t b = 0; b < s.batch; ++b)
      for (int64_t h = 0; h < cap.shape[1]; ++h) {
        double c;
        if (q_rows) {
          const int64_t hk = h / group;
          c = directions(p.k.at(b, hk, 0), s.seq_kv, s.head_dim_qk);
          if (t == TensorId::O) c = std::min(c, directions(p.v.at(b, hk, 0), s.seq_kv, s.head_dim_v));
        } else {
          // The group's heads sit next to each other: their queries are one run of rows.
          c = directions(p.q.at(b, h * group, 0), group * s.seq_q, s.head_dim_qk);
          if (t == TensorId::dV) c = std::min(c, directions(d_out.at(b, h * group, 0), group * s.seq_q, s.head_dim_v));
        }
        std::fill(cap.at(b, h, 0), cap.at(b, h, 0) + cap.shape[2], c);
      }
    terms[t].direction_sources = std::move(cap);
  }
}

void check_shapes(const char* who, const TermTensors& terms, const Tensor& ref) {
  if (terms.operand.shape != ref.shape) {
    auto dims = [](const std::vector<int64_t>& v) {
      std::string out;
      for (int64_t x : v) out += (out.empty() ? "" : "x") + std::to_string(x);
      return out;
    };
    throw std::invalid_argument(std::string(who) + ": the terms (" + dims(terms.operand.shape) + ") do not match the output's shape (" +
                                dims(ref.shape) + ")");
  }
}

Tensor model_sigma(TensorId t, const TermTensors& terms, const Tensor& ref, const RoundingUnits& u) {
  check_shapes("model_sigma", terms, ref);
  Tensor sigma(ref.shape, uninitialized);  // every element written below
  const size_t width = ref.shape.empty() || t == TensorId::LSE ? 1 : static_cast<size_t>(ref.shape.back());
  // Each element on its own: any split over threads gives the same bits (harness/parallel.h).
  parallel_for(ref.numel(), [&](size_t begin, size_t end) {
    for (size_t e = begin; e < end; ++e) sigma.data[e] = std::sqrt(element_variance(t, terms, ref.data[e], u, e, e / width).total());
  });
  return sigma;
}

// However a row's errors are shared, its statistic sum_d err_d^2 cannot carry more independent
// errors than its elements' variances spread over: for errors of covariance C the statistic has
// (tr C)^2 / tr(C^2) of them, and tr(C^2) >= sum_d C_dd^2, so at most
//   (sum_d var_d)^2 / sum_d var_d^2
// (1 where one element's variance dominates the row, D for D equal ones): a dK row of a key whose
// column 0 sums Q rows shifted by 582 errs in that one column.
namespace {
// A row's dof, capped by that participation (and at least 1).
double capped_by_participation(double dof, double sum_var, double sum_var2) {
  const double participation = sum_var2 > 0 ? sum_var * sum_var / sum_var2 : std::numeric_limits<double>::infinity();
  return std::max(1.0, std::min(dof, participation));
}
}  // namespace

ModelOfOutput model_sigma_and_row_dof(TensorId t, const TermTensors& terms, const Tensor& ref, const RoundingUnits& u) {
  if (t == TensorId::LSE || terms.operand_sources.data.empty() || ref.shape.size() != 4) return {model_sigma(t, terms, ref, u), {}};
  check_shapes("model_row_dof", terms, ref);
  const int64_t width = ref.shape[3];
  ModelOfOutput m{Tensor(ref.shape, uninitialized), Tensor({ref.shape[0], ref.shape[1], ref.shape[2]}, uninitialized)};  // every element written below
  Tensor &sigma = m.sigma, &dof = m.row_dof;
  // Each row on its own (its sums in the same order whatever the split): rows over threads.
  // One pass gives each element's sigma (as model_sigma computes it) and the row's dof.
  parallel_for(dof.numel(), static_cast<size_t>(width), [&](size_t row_begin, size_t row_end) {
    std::vector<double> scratch;
    for (size_t row = row_begin; row < row_end; ++row) {
      VarianceParts sum;
      double sum_var2 = 0;  // sum over the row's elements of their variance squared
      for (int64_t d = 0; d < width; ++d) {
        const size_t e = row * static_cast<size_t>(width) + static_cast<size_t>(d);
        const VarianceParts v = element_variance(t, terms, ref.data[e], u, e, row);
        sigma.data[e] = std::sqrt(v.total());
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
      double op_sources = terms.operand_sources.data[row], sc_sources = terms.score_sources.data[row];
      if (!terms.direction_sources.data.empty()) {
        op_sources = std::min(op_sources, terms.direction_sources.data[row]);
        sc_sources = std::min(sc_sources, terms.direction_sources.data[row]);
      }
      double correlated = sum.operand, via = sum.via;
      if (t == TensorId::dK) correlated += std::exchange(via, 0.0);
      double shared_denom = via * via + sum.normalizer * sum.normalizer;
      if (correlated > 0) shared_denom += correlated * correlated / std::max(1.0, op_sources);
      if (sum.score > 0) shared_denom += sum.score * sum.score / std::max(1.0, sc_sources);
      if (sum.subnormal > 0) {
        double sub_sources = terms.subnormal_sources.data.empty() ? op_sources : terms.subnormal_sources.data[row];
        if (!terms.direction_sources.data.empty()) sub_sources = std::min(sub_sources, terms.direction_sources.data[row]);
        shared_denom += sum.subnormal * sum.subnormal / std::max(1.0, sub_sources);
      }
      // Every shared part moves the row inside the span of the same vectors (the normalizer along
      // the row, D's error along sum_j P_ij K_j for dQ), so together they cannot have more sources
      // than those vectors have directions: a query that sees one key errs along that key, however
      // its error splits into parts (torch.efficient's fp32 dQ row at 8.97 sigma' against the 7.66
      // of a 3.74-source row, Skv = 1: docs/findings/README.md).
      const double shared = sum.operand + sum.score + sum.via + sum.normalizer + sum.subnormal;
      if (!terms.direction_sources.data.empty() && shared_denom > 0)
        shared_denom = std::max(shared_denom, shared * shared / std::max(1.0, terms.direction_sources.data[row]));
      // Elements with the same value are computed alike and round alike (a row of an exactly
      // constant V): they are one source of the independent part, not one each; and elements
      // close together on the storage grid store one rounding (storage_sources).
      const double* row_ref = ref.data.data() + row * static_cast<size_t>(width);
      const double distinct = distinct_values(row_ref, width, scratch);
      double denom = sum.independent * sum.independent / distinct + shared_denom;
      if (sum.storage > 0) denom += sum.storage * sum.storage / storage_sources(row_ref, width, u.store, distinct);
      const double total = sum.total();
      dof.data[row] = denom > 0 ? std::clamp(total * total / denom, 1.0, static_cast<double>(width)) : static_cast<double>(width);
      dof.data[row] = capped_by_participation(dof.data[row], total, sum_var2);
    }
  });
  return m;
}

Tensor model_row_dof(TensorId t, const TermTensors& terms, const Tensor& ref, const RoundingUnits& u) {
  if (t == TensorId::LSE || terms.operand_sources.data.empty() || ref.shape.size() != 4) return {};
  return model_sigma_and_row_dof(t, terms, ref, u).row_dof;
}

void add_call_model(const ModelOfCall& m, Tensor& sum_sigma2, Tensor& row_var, Tensor& row_var2_dof) {
  const auto& cs = m.sigma.shape;
  const int64_t width = cs.size() > 3 ? cs[3] : 1;
  for (int64_t b = 0; b < cs[0]; ++b)
    for (int64_t h = 0; h < cs[1]; ++h)
      for (int64_t i = 0; i < cs[2]; ++i) {
        const double w = m.weight ? *m.weight->at(b, h, i) : 1.0;
        if (w == 0.0 || !std::isfinite(w)) continue;
        const double* sig = m.sigma.at(b, h, i);
        double* out = sum_sigma2.at(b, h, i + m.row_offset);
        double var = 0;
        for (int64_t d = 0; d < width; ++d) {
          out[d] += w * w * sig[d] * sig[d];
          var += w * w * sig[d] * sig[d];
        }
        const double dof = m.row_dof.data.empty() ? static_cast<double>(width) : *m.row_dof.at(b, h, i);
        *row_var.at(b, h, i + m.row_offset) += var;
        *row_var2_dof.at(b, h, i + m.row_offset) += var * var / std::max(1.0, dof);
      }
}

void finish_combined_model(Tensor& sum_sigma2, const Tensor& row_var, const Tensor& row_var2_dof, Tensor* row_dof) {
  const int64_t width = sum_sigma2.shape.size() > 3 ? sum_sigma2.shape[3] : 1;
  if (row_dof) {
    *row_dof = Tensor(row_var.shape);
    for (size_t r = 0; r < row_var.numel(); ++r) {
      const double v = row_var.data[r], q = row_var2_dof.data[r];
      const double* var = sum_sigma2.data.data() + r * static_cast<size_t>(width);  // still variances here
      double var2 = 0;
      for (int64_t d = 0; d < width; ++d) var2 += var[d] * var[d];
      const double dof = q > 0 ? std::clamp(v * v / q, 1.0, static_cast<double>(width)) : static_cast<double>(width);
      row_dof->data[r] = capped_by_participation(dof, v, var2);
    }
  }
  for (double& x : sum_sigma2.data) x = std::sqrt(x);
}

OutputsModel model_of_call(const ErrorTerms& terms, const OutputTensors& ref, const RoundingUnits& u) {
  OutputsModel m;
  for (TensorId t : kOutputs) {
    const size_t i = output_index(t);
    if (!ref[i] || ref[i]->data.empty()) continue;  // an output the case does not have (dBias)
    ModelOfOutput o = model_sigma_and_row_dof(t, terms[t], *ref[i], u);
    m.sigma[i] = std::move(o.sigma);
    m.row_dof[i] = std::move(o.row_dof);
  }
  return m;
}

namespace {

bool indexed_by_queries(TensorId t) { return t == TensorId::O || t == TensorId::LSE || t == TensorId::dQ; }

// dBias through a composition: each call's element variances added where its element sits in the
// whole dBias (its spanned sequence dimensions at the call's rows and keys, the broadcast ones
// summed, as the composition engine sums the calls' dBias), each call's rows' variances likewise.
void combine_dbias_calls(const std::vector<CallOfComposition>& calls, const Tensor& whole, const RoundingUnits& u, Tensor& sum_sigma2,
                         Tensor& row_var, Tensor& row_var2_dof) {
  const auto& w = whole.shape;
  for (const CallOfComposition& call : calls) {
    const Tensor& part = *call.outputs[output_index(TensorId::dBias)];
    if (part.data.empty()) continue;
    const ModelOfOutput o = model_sigma_and_row_dof(TensorId::dBias, (*call.terms)[TensorId::dBias], part, u);
    const auto& n = part.shape;
    const int64_t q0 = w[2] > 1 ? call.q_offset : 0, k0 = w[3] > 1 ? call.kv_offset : 0;
    for (int64_t b = 0; b < n[0]; ++b)
      for (int64_t h = 0; h < n[1]; ++h)
        for (int64_t i = 0; i < n[2]; ++i) {
          const size_t part_row = static_cast<size_t>((b * n[1] + h) * n[2] + i),
                       whole_row = static_cast<size_t>((b * w[1] + h) * w[2] + i + q0);
          double var = 0;
          for (int64_t j = 0; j < n[3]; ++j) {
            const double s = o.sigma.data[part_row * static_cast<size_t>(n[3]) + static_cast<size_t>(j)];
            sum_sigma2.data[whole_row * static_cast<size_t>(w[3]) + static_cast<size_t>(j + k0)] += s * s;
            var += s * s;
          }
          const double dof = o.row_dof.data.empty() ? static_cast<double>(n[3]) : o.row_dof.data[part_row];
          row_var.data[whole_row] += var;
          row_var2_dof.data[whole_row] += var * var / std::max(1.0, dof);
        }
  }
}

// The composition's model of output t before the whole problem's bounds it (composed_model).
void combine_calls(TensorId t, const std::vector<CallOfComposition>& calls, const OutputTensors& ref, const RoundingUnits& u,
                   Tensor& sigma, Tensor& row_dof) {
  const Tensor& whole = *ref[output_index(t)];
  const std::vector<int64_t> row_shape = indexed_by_queries(t) ? ref[output_index(TensorId::LSE)]->shape
                                                               : std::vector<int64_t>{whole.shape[0], whole.shape[1], whole.shape[2]};
  Tensor sum_sigma2(whole.shape), row_var(row_shape), row_var2_dof(row_shape);
  if (t == TensorId::dBias) {
    combine_dbias_calls(calls, whole, u, sum_sigma2, row_var, row_var2_dof);
  } else {
    for (const CallOfComposition& call : calls) {
      ModelOfOutput o = model_sigma_and_row_dof(t, (*call.terms)[t], *call.outputs[output_index(t)], u);
      add_call_model({t, std::move(o.sigma), std::move(o.row_dof), t == TensorId::O || t == TensorId::LSE ? call.weight : nullptr,
                      indexed_by_queries(t) ? call.q_offset : call.kv_offset},
                     sum_sigma2, row_var, row_var2_dof);
    }
  }
  const int64_t width = whole.shape.size() > 3 ? whole.shape[3] : 1;
  for (size_t e = 0; e < whole.numel(); ++e) {
    const double r = std::isfinite(whole.data[e]) ? whole.data[e] : 0.0;
    const double v = storage_variance(t, r, u);
    sum_sigma2.data[e] += v;
    row_var.data[e / static_cast<size_t>(width)] += v;
    row_var2_dof.data[e / static_cast<size_t>(width)] += v * v;
  }
  finish_combined_model(sum_sigma2, row_var, row_var2_dof, t == TensorId::LSE ? nullptr : &row_dof);
  sigma = std::move(sum_sigma2);
}

}  // namespace

OutputsModel composed_model(const std::vector<CallOfComposition>& calls, const OutputTensors& ref, const OutputsModel& whole,
                            const RoundingUnits& u) {
  OutputsModel m;
  for (TensorId t : kOutputs) {
    const size_t i = output_index(t);
    if (!ref[i] || ref[i]->data.empty()) continue;  // an output the case does not have (dBias)
    combine_calls(t, calls, ref, u, m.sigma[i], m.row_dof[i]);
    for (size_t e = 0; e < whole.sigma[i].numel(); ++e) m.sigma[i].data[e] = std::max(m.sigma[i].data[e], whole.sigma[i].data[e]);
    if (m.row_dof[i].data.empty() || whole.row_dof[i].data.empty()) continue;
    for (size_t r = 0; r < whole.row_dof[i].numel(); ++r) m.row_dof[i].data[r] = std::min(m.row_dof[i].data[r], whole.row_dof[i].data[r]);
  }
  return m;
}

}  // namespace attnfuzz
