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
#include "harness/model_row.h"
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

double storage_variance(TensorId t, double ref, const RoundingUnits& u) { return model_row::storage_variance(t, ref, u); }

namespace {

// How many different values a row holds: exactly equal float64 references count once, each NaN
// apart (as model_row's callers on the device count them); `v` is scratch space, kept by the
// caller across rows.
double distinct_values(const double* x, int64_t n, std::vector<double>& v) {
  v.clear();
  size_t nans = 0;
  for (int64_t d = 0; d < n; ++d) {
    if (std::isnan(x[d]))
      ++nans;
    else
      v.push_back(x[d]);
  }
  std::sort(v.begin(), v.end());
  const size_t kept = static_cast<size_t>(std::unique(v.begin(), v.end()) - v.begin());
  return static_cast<double>(std::max<size_t>(1, kept + nans));
}

}  // namespace

const double* model_row::phase_table() {
  static const std::vector<double> table = [] {
    std::vector<double> t(size_t{2} << model_row::kPhaseBits);
    for (size_t i = 0; i < t.size() / 2; ++i) {
      const double angle = 6.283185307179586 * (static_cast<double>(i) + 0.5) / static_cast<double>(t.size() / 2);
      t[2 * i] = std::cos(angle);
      t[2 * i + 1] = std::sin(angle);
    }
    return t;
  }();
  return table.data();
}

double storage_sources(const double* ref, int64_t n, double unit_store, double distinct) {
  return model_row::storage_sources(ref, n, unit_store, distinct, model_row::phase_table());
}

model_row::TermArrays model_row::term_arrays(const TermTensors& t) {
  const auto at = [](const Tensor& x) { return x.data.empty() ? nullptr : x.ptr(); };
  model_row::TermArrays a;
  a.operand = at(t.operand), a.stored = at(t.stored), a.score = at(t.score);
  a.via_op = at(t.via_op), a.via_st = at(t.via_st), a.via_acc = at(t.via_acc), a.via_sc = at(t.via_sc);
  a.underflow = at(t.underflow), a.subnormal = at(t.subnormal), a.subnormal_sources = at(t.subnormal_sources);
  a.operand_sources = at(t.operand_sources), a.score_sources = at(t.score_sources), a.row_lse = at(t.row_lse);
  a.direction_sources = at(t.direction_sources), a.normalizer_lse = at(t.normalizer_lse), a.normalizer_acc = at(t.normalizer_acc);
  a.truncation = at(t.truncation);
  a.length = t.length;
  return a;
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

ModelShape model_shape(TensorId t, const TermTensors& terms, const Tensor& ref) {
  return {t != TensorId::LSE && !terms.operand_sources.data.empty() && ref.shape.size() == 4,
          ref.shape.empty() || t == TensorId::LSE ? 1 : ref.shape.back()};
}

Tensor model_sigma(TensorId t, const TermTensors& terms, const Tensor& ref, const RoundingUnits& u) {
  check_shapes("model_sigma", terms, ref);
  Tensor sigma(ref.shape, uninitialized);  // every element written below
  const size_t width = static_cast<size_t>(model_shape(t, terms, ref).width);
  const model_row::TermArrays a = model_row::term_arrays(terms);
  // Each element on its own: any split over threads gives the same bits (harness/parallel.h).
  parallel_for(ref.numel(), [&](size_t begin, size_t end) {
    for (size_t e = begin; e < end; ++e) sigma.data[e] = std::sqrt(model_row::element_variance(t, a, ref.data[e], u, e, e / width).total());
  });
  return sigma;
}

ModelOfOutput model_sigma_and_row_dof(TensorId t, const TermTensors& terms, const Tensor& ref, const RoundingUnits& u) {
  const ModelShape shape = model_shape(t, terms, ref);
  if (!shape.row_dof) return {model_sigma(t, terms, ref, u), {}};
  check_shapes("model_row_dof", terms, ref);
  const int64_t width = shape.width;
  ModelOfOutput m{Tensor(ref.shape, uninitialized), Tensor({ref.shape[0], ref.shape[1], ref.shape[2]}, uninitialized)};  // every element written below
  const model_row::TermArrays a = model_row::term_arrays(terms);
  const double* phasor = model_row::phase_table();
  // Each row on its own (its sums in the same order whatever the split): rows over threads.
  parallel_for(m.row_dof.numel(), static_cast<size_t>(width), [&](size_t row_begin, size_t row_end) {
    std::vector<double> scratch;
    for (size_t row = row_begin; row < row_end; ++row) {
      const double distinct = distinct_values(ref.ptr() + row * static_cast<size_t>(width), width, scratch);
      m.row_dof.data[row] = model_row::model_row(t, a, ref.ptr(), u, row, width, distinct, phasor, m.sigma.ptr() + row * static_cast<size_t>(width));
    }
  });
  return m;
}

Tensor model_row_dof(TensorId t, const TermTensors& terms, const Tensor& ref, const RoundingUnits& u) {
  if (!model_shape(t, terms, ref).row_dof) return {};
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
      row_dof->data[r] = model_row::capped_by_participation(dof, v, var2);
    }
  }
  for (double& x : sum_sigma2.data) x = std::sqrt(x);
}

namespace {
ModelOfOutput model_of_output(TensorId t, const TermTensors& terms, const Tensor& ref, const RoundingUnits& u, const OutputModel& where) {
  return where ? where(t, terms, ref, u) : model_sigma_and_row_dof(t, terms, ref, u);
}
}  // namespace

OutputsModel model_of_call(const ErrorTerms& terms, const OutputTensors& ref, const RoundingUnits& u, const OutputModel& where) {
  OutputsModel m;
  for (TensorId t : kOutputs) {
    const size_t i = output_index(t);
    if (!ref[i] || ref[i]->data.empty()) continue;  // an output the case does not have (dBias)
    ModelOfOutput o = model_of_output(t, terms[t], *ref[i], u, where);
    m.sigma[i] = std::move(o.sigma);
    m.row_dof[i] = std::move(o.row_dof);
    m.shared[i] = shared_across_rows(terms[t], m.sigma[i], u);
  }
  return m;
}

void size_via_blocks(TermTensors& dk, const Shape& s) {
  const int64_t tile = kSharedTile, key_tiles = (s.seq_kv + tile - 1) / tile, col_tiles = (s.head_dim_qk + tile - 1) / tile;
  const size_t heads = static_cast<size_t>(s.batch * s.heads_kv);
  dk.via_block_tile = tile;
  dk.via_tile_sum.assign(heads * static_cast<size_t>(key_tiles * col_tiles) * 4, 0.0);
  dk.via_tile_sum_sq = dk.via_tile_sum;
  dk.via_head_sum.assign(heads * 4, 0.0);
  dk.via_head_sum_sq = dk.via_head_sum;
}

double dof_with_shared_part(double dof, double share, double sources) {
  if (!(share > 0) || !(sources > 0) || !(dof > 0)) return dof;
  const double rest = 1.0 - std::min(share, 1.0);
  return std::min(dof, 1.0 / (share * share / sources + rest * rest / dof));
}

SharedAcrossRows shared_across_rows(const TermTensors& terms, const Tensor& sigma, const RoundingUnits& u) {
  SharedAcrossRows sh;
  if (terms.via_head_sum.empty() || sigma.shape.size() != 4) return sh;
  const int64_t heads = sigma.shape[0] * sigma.shape[1], seq = sigma.shape[2], width = sigma.shape[3], tile = terms.via_block_tile;
  if (tile < 1 || terms.via_head_sum.size() != static_cast<size_t>(heads) * 4) return sh;
  sh.tile = tile;
  sh.row_tiles = (seq + tile - 1) / tile;
  sh.col_tiles = (width + tile - 1) / tile;
  const size_t tiles = static_cast<size_t>(heads * sh.row_tiles * sh.col_tiles);
  if (terms.via_tile_sum.size() != tiles * 4) return sh;
  // Each rounding unit's weight in sigma^2, as model_row::element_variance weighs the via parts.
  const double u_score2 = u.accumulate * u.accumulate + u.input * u.input;
  const double w[4] = {u.operand * u.operand / 3.0, u.store * u.store / 3.0, u.accumulate * u.accumulate, u_score2};
  struct Part {
    double via = 0, via2_per_source = 0;  // sum_units w sum_i v_i, sum_units w^2 sum_i v_i^2
  };
  auto part_of = [&](const std::vector<double>& sum, const std::vector<double>& sum_sq, size_t at) {
    Part p;
    for (size_t k = 0; k < 4; ++k) p.via += w[k] * sum[at * 4 + k], p.via2_per_source += w[k] * w[k] * sum_sq[at * 4 + k];
    return p;
  };
  auto share_and_sources = [](const Part& p, double total, double& share, double& sources) {
    share = total > 0 ? std::min(1.0, p.via / total) : 0.0;
    sources = p.via2_per_source > 0 ? p.via * p.via / p.via2_per_source : 0.0;
  };
  // The model's variance per tile and per head, summed in one pass over the elements.
  std::vector<double> tile_var(tiles, 0.0), head_var(static_cast<size_t>(heads), 0.0);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t r = 0; r < seq; ++r)
      for (int64_t d = 0; d < width; ++d) {
        const double x = sigma.data[static_cast<size_t>((h * seq + r) * width + d)];
        const double x2 = std::isfinite(x) ? x * x : 0.0;
        tile_var[static_cast<size_t>((h * sh.row_tiles + r / tile) * sh.col_tiles + d / tile)] += x2;
        head_var[static_cast<size_t>(h)] += x2;
      }
  sh.tile_share.resize(tiles);
  sh.tile_sources.resize(tiles);
  for (size_t i = 0; i < tiles; ++i)
    share_and_sources(part_of(terms.via_tile_sum, terms.via_tile_sum_sq, i), tile_var[i], sh.tile_share[i], sh.tile_sources[i]);
  sh.head_share.resize(static_cast<size_t>(heads));
  sh.head_sources.resize(static_cast<size_t>(heads));
  Part all;
  double all_var = 0;
  for (size_t h = 0; h < static_cast<size_t>(heads); ++h) {
    const Part p = part_of(terms.via_head_sum, terms.via_head_sum_sq, h);
    share_and_sources(p, head_var[h], sh.head_share[h], sh.head_sources[h]);
    // Different heads' queries are different sources: the tensor's sums add theirs.
    all.via += p.via;
    all.via2_per_source += p.via2_per_source;
    all_var += head_var[h];
  }
  share_and_sources(all, all_var, sh.tensor_share, sh.tensor_sources);
  return sh;
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
                   const OutputModel& where, Tensor& sigma, Tensor& row_dof) {
  const Tensor& whole = *ref[output_index(t)];
  const std::vector<int64_t> row_shape = indexed_by_queries(t) ? ref[output_index(TensorId::LSE)]->shape
                                                               : std::vector<int64_t>{whole.shape[0], whole.shape[1], whole.shape[2]};
  Tensor sum_sigma2(whole.shape), row_var(row_shape), row_var2_dof(row_shape);
  if (t == TensorId::dBias) {
    combine_dbias_calls(calls, whole, u, sum_sigma2, row_var, row_var2_dof);
  } else {
    for (const CallOfComposition& call : calls) {
      ModelOfOutput o = model_of_output(t, (*call.terms)[t], *call.outputs[output_index(t)], u, where);
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
                            const RoundingUnits& u, const OutputModel& where) {
  OutputsModel m;
  for (TensorId t : kOutputs) {
    const size_t i = output_index(t);
    if (!ref[i] || ref[i]->data.empty()) continue;  // an output the case does not have (dBias)
    combine_calls(t, calls, ref, u, where, m.sigma[i], m.row_dof[i]);
    for (size_t e = 0; e < whole.sigma[i].numel(); ++e) m.sigma[i].data[e] = std::max(m.sigma[i].data[e], whole.sigma[i].data[e]);
    if (m.row_dof[i].data.empty() || whole.row_dof[i].data.empty()) continue;
    for (size_t r = 0; r < whole.row_dof[i].numel(); ++r) m.row_dof[i].data[r] = std::min(m.row_dof[i].data[r], whole.row_dof[i].data[r]);
  }
  return m;
}

}  // namespace attnfuzz
