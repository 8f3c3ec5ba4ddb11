#include "harness/inputs.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <string>

#include "harness/parallel.h"
#include "harness/rng.h"

namespace attnfuzz {

namespace {
// Draw counters of their own (an element's draws use 0 to 3), so that adding a kind leaves
// every other kind's values as they were.
constexpr uint32_t kSubnormalDraw = 4, kRowDraw = 5;

// Whether row `row` of the tensor is one of the `fraction` picked.
bool row_picked(double fraction, uint64_t seed, uint32_t stream, uint64_t row) {
  return uniform01(random_words(seed, stream, row, kRowDraw)[0]) < fraction;
}
}  // namespace

double draw_value(const ValueDist& d, uint64_t seed, TensorId id, uint64_t index, uint64_t row_length) {
  const uint32_t stream = draw_stream(id);
  switch (d.kind) {
    case ValueDist::Kind::row_shift:
      if (index % row_length == 0 && row_picked(d.fraction, seed, stream, index / row_length)) return d.magnitude;
      return d.mean + d.sigma * standard_normal(seed, stream, index);
    case ValueDist::Kind::sparse_rows:
      if (!row_picked(d.fraction, seed, stream, index / row_length)) return 0.0;
      return d.mean + d.sigma * standard_normal(seed, stream, index);
    case ValueDist::Kind::subnormal: {
      const Philox4 w = random_words(seed, stream, index, kSubnormalDraw);
      if (uniform01(w[0]) < d.fraction) return ((w[1] & 1u) ? 1.0 : -1.0) * uniform01(w[2]) * d.magnitude;
      return d.mean + d.sigma * standard_normal(seed, stream, index);
    }
    case ValueDist::Kind::nonfinite: {
      // One element of the first row, and of each picked row: at a column of the row's own.
      const uint64_t row = index / row_length;
      if (row == 0 || row_picked(d.fraction, seed, stream, row)) {
        const uint64_t column = random_words(seed, stream, row, kRowDraw)[1] % row_length;
        if (index % row_length == column)
          return d.magnitude == 0 ? std::numeric_limits<double>::quiet_NaN()
                                  : std::copysign(std::numeric_limits<double>::infinity(), d.magnitude);
      }
      return d.mean + d.sigma * standard_normal(seed, stream, index);
    }
    case ValueDist::Kind::zero:
      return 0.0;
    case ValueDist::Kind::uniform: {
      const double u = uniform01(random_words(seed, stream, index, 3)[0]);
      return d.mean + d.sigma * (2.0 * u - 1.0);
    }
    case ValueDist::Kind::outliers: {
      const Philox4 w = random_words(seed, stream, index, 3);
      if (uniform01(w[0]) < d.fraction) return d.mean + ((w[1] & 1u) ? d.magnitude : -d.magnitude);
      return d.mean + d.sigma * standard_normal(seed, stream, index);
    }
    case ValueDist::Kind::normal:
    case ValueDist::Kind::large_logit:
    case ValueDist::Kind::near_constant:
      return d.mean + d.sigma * standard_normal(seed, stream, index);
  }
  return 0.0;
}

namespace {
Tensor make(const Case& c, const ValueDist& d, TensorId id, std::vector<int64_t> shape) {
  const uint64_t row_length = static_cast<uint64_t>(shape.back());
  Tensor t(std::move(shape), uninitialized);
  // Each element is a pure function of (seed, tensor, index): any split gives the same bits.
  parallel_for(t.numel(), [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) t.data[i] = round_to(c.dtype, draw_value(d, c.seed, id, i, row_length));
  });
  return t;
}
}  // namespace

Inputs generate_inputs(const Case& c) {
  const Shape& s = c.shape;
  Inputs in;
  in.q = make(c, c.q, TensorId::Q, {s.batch, s.heads_q, s.seq_q, s.head_dim_qk});
  in.k = make(c, c.k, TensorId::K, {s.batch, s.heads_kv, s.seq_kv, s.head_dim_qk});
  in.v = make(c, c.v, TensorId::V, {s.batch, s.heads_kv, s.seq_kv, s.head_dim_v});
  in.d_out = make(c, c.d_out, TensorId::dO, {s.batch, s.heads_q, s.seq_q, s.head_dim_v});
  // dLSE is an upstream gradient in float32 for every dtype (LSE is always fp32).
  Tensor g({s.batch, s.heads_q, s.seq_q}, uninitialized);
  parallel_for(g.numel(), [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) g.data[i] = static_cast<float>(draw_value(c.d_lse, c.seed, TensorId::dLSE, i, 1));
  });
  in.d_lse = std::move(g);
  if (c.bias) in.bias = generate_bias(c);
  return in;
}

Tensor generate_bias(const Case& c) {
  const ScoreBias& b = *c.bias;
  const Shape& s = c.shape;
  switch (b.kind) {
    case ScoreBias::Kind::tensor:
      return make(c, b.values, TensorId::Bias, b.tensor_shape(s));
    case ScoreBias::Kind::relative: {
      // table[h][r], r = j - i + Sq - 1 in [0, Sq + Skv - 1)
      const Tensor table = make(c, b.values, TensorId::Bias, {s.heads_q, s.seq_q + s.seq_kv - 1});
      Tensor t(b.tensor_shape(s), uninitialized);
      parallel_for(static_cast<size_t>(s.heads_q * s.seq_q), static_cast<size_t>(s.seq_kv), [&](size_t begin, size_t end) {
        for (size_t row = begin; row < end; ++row) {
          const int64_t h = static_cast<int64_t>(row) / s.seq_q, i = static_cast<int64_t>(row) % s.seq_q;
          for (int64_t j = 0; j < s.seq_kv; ++j) t.data[row * static_cast<size_t>(s.seq_kv) + static_cast<size_t>(j)] =
              table.data[static_cast<size_t>(h * (s.seq_q + s.seq_kv - 1) + j - i + s.seq_q - 1)];
        }
      });
      return t;
    }
    case ScoreBias::Kind::alibi: {
      Tensor t(b.tensor_shape(s), uninitialized);
      parallel_for(static_cast<size_t>(s.heads_q * s.seq_q), static_cast<size_t>(s.seq_kv), [&](size_t begin, size_t end) {
        for (size_t row = begin; row < end; ++row) {
          const int64_t h = static_cast<int64_t>(row) / s.seq_q, i = static_cast<int64_t>(row) % s.seq_q;
          const double slope = std::exp2(-8.0 * static_cast<double>(h + 1) / static_cast<double>(s.heads_q));
          for (int64_t j = 0; j < s.seq_kv; ++j)
            t.data[row * static_cast<size_t>(s.seq_kv) + static_cast<size_t>(j)] =
                round_to(c.dtype, -slope * static_cast<double>(std::llabs(j - i - (s.seq_kv - s.seq_q))));
        }
      });
      return t;
    }
  }
  return {};
}

uint64_t checksum(const Inputs& in) {
  uint64_t h = 1469598103934665603ull;
  for (const Tensor* t : {&in.q, &in.k, &in.v, &in.d_out, &in.d_lse, &in.bias}) {
    if (t == &in.bias && t->data.empty()) break;  // a case without a bias keeps the checksum it always had
    for (int64_t d : t->shape) h = (h ^ static_cast<uint64_t>(d)) * 1099511628211ull;
    for (double x : t->data) h = (h ^ std::bit_cast<uint64_t>(x)) * 1099511628211ull;
  }
  return h;
}

Problem case_problem(const Case& c) {
  Problem p;
  p.shape = c.shape;
  p.dtype = c.dtype;
  p.layouts = c.layouts;
  p.scale = c.effective_scale();
  p.softcap = c.softcap;
  p.mask_expr = &c.mask;
  p.full_seq_q = c.shape.seq_q;
  p.full_seq_kv = c.shape.seq_kv;
  p.bias_requires_grad = c.bias && c.bias->requires_grad;
  if (c.ragged) {
    p.lens_q = c.ragged->lens_q;
    p.lens_kv = c.ragged->lens_kv;
    p.gap_q = c.ragged->gap_q;
    p.gap_kv = c.ragged->gap_kv;
    p.tail = c.ragged->tail;
    p.page_size = c.ragged->page_size;
    p.page_seed = c.seed;
    p.max_slack = c.ragged->max_slack;
    p.misaligned = c.ragged->misaligned;
  }
  return p;
}

Problem full_problem(const Case& c, const Inputs& in) {
  Problem p = case_problem(c);
  p.q = in.q;
  p.k = in.k;
  p.v = in.v;
  if (c.bias) p.bias = in.bias;
  materialize_mask(p);
  return p;
}

namespace {
bool any_nonfinite(const Tensor& t) {
  return std::any_of(t.data.begin(), t.data.end(), [](double x) { return !std::isfinite(x); });
}

// Per (batch, query head): whether a non-finite element of Q or dO of that head, or of K or V of
// its group's head, reaches it.
std::vector<uint8_t> heads_reached(const Shape& s, const Inputs& in) {
  std::vector<uint8_t> reached(static_cast<size_t>(s.batch * s.heads_q), 0);
  auto head_has = [](const Tensor& t, int64_t b, int64_t h) {
    const size_t n = static_cast<size_t>(t.shape[2] * t.shape[3]);
    const double* x = t.at(b, h, 0);
    return std::any_of(x, x + n, [](double v) { return !std::isfinite(v); });
  };
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads_q; ++h) {
      const int64_t hk = h / s.group();
      reached[static_cast<size_t>(b * s.heads_q + h)] =
          head_has(in.q, b, h) || head_has(in.d_out, b, h) || head_has(in.k, b, hk) || head_has(in.v, b, hk);
    }
  return reached;
}
}  // namespace

bool has_nonfinite(const Inputs& in) {
  return any_nonfinite(in.q) || any_nonfinite(in.k) || any_nonfinite(in.v) || any_nonfinite(in.d_out);
}

Inputs finite_part(const Inputs& in) {
  Inputs out = in;
  for (Tensor* t : {&out.q, &out.k, &out.v, &out.d_out})
    for (double& x : t->data)
      if (!std::isfinite(x)) x = 0.0;
  return out;
}

std::vector<uint8_t> rows_reached_by_nonfinite(const Case& c, const Inputs& in, TensorId t, bool across_batch) {
  const Shape& s = c.shape;
  std::vector<uint8_t> heads = heads_reached(s, in);
  if (across_batch)
    for (int64_t h = 0; h < s.heads_q; ++h) {
      uint8_t any = 0;
      for (int64_t b = 0; b < s.batch; ++b) any |= heads[static_cast<size_t>(b * s.heads_q + h)];
      for (int64_t b = 0; b < s.batch; ++b) heads[static_cast<size_t>(b * s.heads_q + h)] = any;
    }
  auto head = [&](int64_t b, int64_t h) { return heads[static_cast<size_t>(b * s.heads_q + h)] != 0; };
  std::vector<uint8_t> rows;
  switch (t) {
    case TensorId::O:
    case TensorId::LSE:
    case TensorId::dQ:
      for (int64_t b = 0; b < s.batch; ++b)
        for (int64_t h = 0; h < s.heads_q; ++h) rows.insert(rows.end(), static_cast<size_t>(s.seq_q), head(b, h));
      return rows;
    case TensorId::dK:
    case TensorId::dV:
      for (int64_t b = 0; b < s.batch; ++b)
        for (int64_t hk = 0; hk < s.heads_kv; ++hk) {
          bool any = false;
          for (int64_t h = hk * s.group(); h < (hk + 1) * s.group(); ++h) any = any || head(b, h);
          rows.insert(rows.end(), static_cast<size_t>(s.seq_kv), any);
        }
      return rows;
    case TensorId::dBias: {
      // A row of dBias sums over the heads and batches its broadcast dimensions cover.
      const std::vector<int64_t> n = c.bias->tensor_shape(s);
      rows.assign(static_cast<size_t>(n[0] * n[1] * n[2]), 0);
      for (int64_t b = 0; b < s.batch; ++b)
        for (int64_t h = 0; h < s.heads_q; ++h)
          if (head(b, h))
            for (int64_t i = 0; i < n[2]; ++i) rows[static_cast<size_t>(((n[0] > 1 ? b : 0) * n[1] + (n[1] > 1 ? h : 0)) * n[2] + i)] = 1;
      return rows;
    }
    default:
      throw std::logic_error(std::string("rows_reached_by_nonfinite: not an output: ") + name_of(t));
  }
}

}  // namespace attnfuzz
