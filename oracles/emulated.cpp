#include "oracles/emulated.h"

#include "oracles/reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace attnfuzz {
namespace {

// Accumulates in Acc (float, or double for the fp64 contract); operands rounded by `op`.
template <class Acc>
struct Numerics {
  Contract contract;
  DType dtype;
  bool reversed;

  Acc op(double x) const {
    switch (contract) {
      case Contract::fp64:
        return static_cast<Acc>(x);
      case Contract::fp32:
        return static_cast<Acc>(static_cast<float>(x));
      case Contract::tf32:
        return static_cast<Acc>(round_mantissa(static_cast<float>(x), 10));
      case Contract::tf32x3:
        return static_cast<Acc>(round_tf32x3(static_cast<float>(x)));
      case Contract::fp16:
        return static_cast<Acc>(round_to(DType::f16, x));
      case Contract::bf16:
        return static_cast<Acc>(round_to(DType::bf16, x));
    }
    return static_cast<Acc>(x);
  }
  // Stored outputs (O, dQ, dK, dV) take the case dtype; fp64 keeps everything.
  double store(Acc x) const { return contract == Contract::fp64 ? static_cast<double>(x) : round_to(dtype, static_cast<double>(x)); }
  double store_f32(Acc x) const { return contract == Contract::fp64 ? static_cast<double>(x) : static_cast<double>(static_cast<float>(x)); }
  // Visits 0..n-1 in the configured order.
  template <class F>
  void each(int64_t n, F&& f) const {
    if (reversed)
      for (int64_t i = n - 1; i >= 0; --i) f(i);
    else
      for (int64_t i = 0; i < n; ++i) f(i);
  }
};

// Every matmul operand of one head, rounded once by the contract (op is a pure function of its
// argument, so rounding each element once gives the products the per-product rounding gave, at a
// fraction of the cost: a toy case's baselines spent most of their time re-rounding the same
// elements). Rows are contiguous: [row][d].
template <class Acc>
struct RoundedRows {
  std::vector<Acc> data;
  int64_t width = 0;
  const Acc* row(int64_t r) const { return data.data() + r * width; }
};

template <class Acc>
RoundedRows<Acc> rounded_rows(const Tensor& t, const Numerics<Acc>& nx, int64_t b, int64_t h) {
  RoundedRows<Acc> out;
  const int64_t rows = t.shape[2];
  out.width = t.shape[3];
  out.data.resize(static_cast<size_t>(rows * out.width));
  const double* src = t.at(b, h, 0);
  for (size_t i = 0; i < out.data.size(); ++i) out.data[i] = nx.op(src[i]);
  return out;
}

template <class Acc>
struct HeadState {
  std::vector<Acc> s_pre, p;  // Sq x Skv
  std::vector<Acc> lse;
  std::vector<Acc> p_op;         // op(p), the operand P is in P V and in dV = P^T dO
  std::vector<uint8_t> visible;  // Sq x Skv, the problem's mask for this head
};

template <class Acc>
HeadState<Acc> scores(const Problem& pr, const Numerics<Acc>& nx, int64_t b, int64_t h) {
  const Shape& s = pr.shape;
  const int64_t hk = h / s.group();
  HeadState<Acc> st;
  st.s_pre.assign(static_cast<size_t>(s.seq_q * s.seq_kv), 0);
  st.p.assign(st.s_pre.size(), 0);
  st.lse.assign(static_cast<size_t>(s.seq_q), -std::numeric_limits<Acc>::infinity());
  st.visible.resize(st.s_pre.size());
  for (int64_t i = 0; i < s.seq_q; ++i)
    for (int64_t j = 0; j < s.seq_kv; ++j) st.visible[static_cast<size_t>(i * s.seq_kv + j)] = pr.visible(b, h, i, j);
  const RoundedRows<Acc> q = rounded_rows(pr.q, nx, b, h), k = rounded_rows(pr.k, nx, b, hk);
  const Acc scale = static_cast<Acc>(pr.scale);
  std::vector<Acc> row(static_cast<size_t>(s.seq_kv));
  for (int64_t i = 0; i < s.seq_q; ++i) {
    const Acc* qi = q.row(i);
    const uint8_t* vis = st.visible.data() + i * s.seq_kv;
    Acc m = -std::numeric_limits<Acc>::infinity();
    for (int64_t j = 0; j < s.seq_kv; ++j) {
      const Acc* kj = k.row(j);
      Acc acc = 0;
      nx.each(s.head_dim_qk, [&](int64_t d) { acc += qi[d] * kj[d]; });
      Acc sc = acc * scale;
      st.s_pre[static_cast<size_t>(i * s.seq_kv + j)] = sc;
      if (pr.softcap) sc = static_cast<Acc>(*pr.softcap) * std::tanh(sc / static_cast<Acc>(*pr.softcap));
      if (pr.has_bias()) sc += static_cast<Acc>(pr.bias_at(b, h, i, j));  // the bias is in the case dtype: exact
      row[static_cast<size_t>(j)] = sc;
      if (vis[j]) m = std::max(m, sc);
    }
    if (m == -std::numeric_limits<Acc>::infinity()) continue;  // fully masked row
    Acc l = 0;
    nx.each(s.seq_kv, [&](int64_t j) {
      if (vis[j]) l += std::exp(row[static_cast<size_t>(j)] - m);
    });
    const Acc lse = m + std::log(l);
    st.lse[static_cast<size_t>(i)] = lse;
    for (int64_t j = 0; j < s.seq_kv; ++j)
      if (vis[j]) st.p[static_cast<size_t>(i * s.seq_kv + j)] = std::exp(row[static_cast<size_t>(j)] - lse);
  }
  st.p_op.resize(st.p.size());
  for (size_t i = 0; i < st.p.size(); ++i) st.p_op[i] = nx.op(st.p[i]);
  return st;
}

template <class Acc>
Forward forward_impl(const Problem& pr, const Numerics<Acc>& nx) {
  const Shape& s = pr.shape;
  Forward f{Tensor({s.batch, s.heads_q, s.seq_q, s.head_dim_v}), Tensor({s.batch, s.heads_q, s.seq_q})};
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads_q; ++h) {
      const HeadState<Acc> st = scores(pr, nx, b, h);
      const int64_t hk = h / s.group();
      const RoundedRows<Acc> v = rounded_rows(pr.v, nx, b, hk);
      for (int64_t i = 0; i < s.seq_q; ++i) {
        *f.lse.at(b, h, i) = nx.store_f32(st.lse[static_cast<size_t>(i)]);
        const Acc* p = st.p_op.data() + i * s.seq_kv;
        double* o = f.o.at(b, h, i);
        for (int64_t d = 0; d < s.head_dim_v; ++d) {
          Acc acc = 0;
          nx.each(s.seq_kv, [&](int64_t j) { acc += p[j] * v.row(j)[d]; });
          o[d] = nx.store(acc);
        }
      }
    }
  return f;
}

template <class Acc>
Gradients backward_impl(const Problem& pr, const Numerics<Acc>& nx, const Forward& fwd, const Tensor& d_out, const Tensor& d_lse) {
  const Shape& s = pr.shape;
  const size_t n = static_cast<size_t>(s.seq_q * s.seq_kv);
  std::vector<Acc> dq_acc(static_cast<size_t>(s.batch * s.heads_q * s.seq_q * s.head_dim_qk), 0);
  std::vector<Acc> dk_acc(static_cast<size_t>(s.batch * s.heads_kv * s.seq_kv * s.head_dim_qk), 0);
  std::vector<Acc> dv_acc(static_cast<size_t>(s.batch * s.heads_kv * s.seq_kv * s.head_dim_v), 0);
  // dBias: dS before the softcap's chain rule, summed at Acc over the broadcast dimensions.
  std::vector<Acc> dbias_acc(pr.bias_requires_grad ? pr.bias.numel() : 0, 0);
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads_q; ++h) {
      const HeadState<Acc> st = scores(pr, nx, b, h);
      const int64_t hk = h / s.group();
      const RoundedRows<Acc> q = rounded_rows(pr.q, nx, b, h), k = rounded_rows(pr.k, nx, b, hk), v = rounded_rows(pr.v, nx, b, hk),
                             d_o = rounded_rows(d_out, nx, b, h);
      std::vector<Acc> ds(n, 0);
      for (int64_t i = 0; i < s.seq_q; ++i) {
        Acc delta = 0;  // D_i = rowsum(dO * O), unrounded operands
        const double *doi = d_out.at(b, h, i), *oi = fwd.o.at(b, h, i);
        nx.each(s.head_dim_v, [&](int64_t d) { delta += static_cast<Acc>(doi[d]) * static_cast<Acc>(oi[d]); });
        const Acc g = static_cast<Acc>(*d_lse.at(b, h, i));
        const Acc* doi_op = d_o.row(i);
        for (int64_t j = 0; j < s.seq_kv; ++j) {
          const size_t ij = static_cast<size_t>(i * s.seq_kv + j);
          if (st.p[ij] == 0) continue;
          const Acc* vj = v.row(j);
          Acc dp = 0;
          nx.each(s.head_dim_v, [&](int64_t d) { dp += doi_op[d] * vj[d]; });
          Acc val = st.p[ij] * (dp - delta + g);
          if (pr.bias_requires_grad) dbias_acc[pr.bias_offset(b, h, i, j)] += val;
          if (pr.softcap) {
            const Acc t = std::tanh(st.s_pre[ij] / static_cast<Acc>(*pr.softcap));
            val *= 1 - t * t;
          }
          ds[ij] = val;
        }
      }
      std::vector<Acc> ds_op(n);
      for (size_t i = 0; i < n; ++i) ds_op[i] = nx.op(ds[i]);
      const Acc scale = static_cast<Acc>(pr.scale);
      for (int64_t i = 0; i < s.seq_q; ++i) {
        const Acc* dsi = ds_op.data() + i * s.seq_kv;
        for (int64_t d = 0; d < s.head_dim_qk; ++d) {
          Acc acc = 0;
          nx.each(s.seq_kv, [&](int64_t j) { acc += dsi[j] * k.row(j)[d]; });
          dq_acc[static_cast<size_t>(((b * s.heads_q + h) * s.seq_q + i) * s.head_dim_qk + d)] = scale * acc;
        }
      }
      for (int64_t j = 0; j < s.seq_kv; ++j) {
        for (int64_t d = 0; d < s.head_dim_qk; ++d) {
          Acc acc = 0;
          nx.each(s.seq_q, [&](int64_t i) { acc += ds_op[static_cast<size_t>(i * s.seq_kv + j)] * q.row(i)[d]; });
          dk_acc[static_cast<size_t>(((b * s.heads_kv + hk) * s.seq_kv + j) * s.head_dim_qk + d)] += scale * acc;
        }
        for (int64_t d = 0; d < s.head_dim_v; ++d) {
          Acc acc = 0;
          nx.each(s.seq_q, [&](int64_t i) { acc += st.p_op[static_cast<size_t>(i * s.seq_kv + j)] * d_o.row(i)[d]; });
          dv_acc[static_cast<size_t>(((b * s.heads_kv + hk) * s.seq_kv + j) * s.head_dim_v + d)] += acc;
        }
      }
    }
  Gradients g{Tensor({s.batch, s.heads_q, s.seq_q, s.head_dim_qk}),
              Tensor({s.batch, s.heads_kv, s.seq_kv, s.head_dim_qk}), Tensor({s.batch, s.heads_kv, s.seq_kv, s.head_dim_v})};
  for (size_t i = 0; i < dq_acc.size(); ++i) g.dq.data[i] = nx.store(dq_acc[i]);
  for (size_t i = 0; i < dk_acc.size(); ++i) g.dk.data[i] = nx.store(dk_acc[i]);
  for (size_t i = 0; i < dv_acc.size(); ++i) g.dv.data[i] = nx.store(dv_acc[i]);
  if (pr.bias_requires_grad) {
    g.dbias = Tensor(pr.bias.shape);
    for (size_t i = 0; i < dbias_acc.size(); ++i) g.dbias.data[i] = nx.store(dbias_acc[i]);
  }
  return g;
}

}  // namespace

std::string EmulatedBackend::name() const {
  return std::string("emulated.") + std::string(to_string(contract_)) + (reversed_ ? ".reversed" : "");
}

Forward EmulatedBackend::forward(const Problem& p) {
  if (contract_ == Contract::fp64) return forward_impl<double>(p, Numerics<double>{contract_, p.dtype, reversed_});
  return forward_impl<float>(p, Numerics<float>{contract_, p.dtype, reversed_});
}

Gradients EmulatedBackend::backward(const Problem& p, const Forward& fwd, const Tensor& d_out, const Tensor& d_lse) {
  if (contract_ == Contract::fp64) return backward_impl<double>(p, Numerics<double>{contract_, p.dtype, reversed_}, fwd, d_out, d_lse);
  return backward_impl<float>(p, Numerics<float>{contract_, p.dtype, reversed_}, fwd, d_out, d_lse);
}

Tensor tensor_core_lse(const Problem& p) {
  const Shape& s = p.shape;
  Tensor lse({s.batch, s.heads_q, s.seq_q});
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads_q; ++h) {
      const HeadScores hs = head_scores(p, b, h);
      for (int64_t i = 0; i < s.seq_q; ++i) {
        double& out = *lse.at(b, h, i);
        if (!std::isfinite(hs.lse(i))) {
          out = hs.lse(i);
          continue;
        }
        const double* q = p.q.at(b, h, i);
        double moved = 0;  // sum_j P_ij exp(error of S_ij)
        for (int64_t j = 0; j < s.seq_kv; ++j) {
          if (hs.p(i, j) == 0) continue;
          const double* k = p.k.at(b, h / s.group(), j);
          double exact = 0;
          float acc = 0;
          for (int64_t d0 = 0; d0 < s.head_dim_qk; d0 += 16) {
            double step = acc;
            for (int64_t d = d0; d < std::min(d0 + 16, s.head_dim_qk); ++d) step += q[d] * k[d], exact += q[d] * k[d];
            float t = static_cast<float>(step);
            if (std::fabs(static_cast<double>(t)) > std::fabs(step)) t = std::nextafter(t, 0.0f);
            acc = t;
          }
          const double chain = p.softcap ? 1.0 - hs.tanh_t(i, j) * hs.tanh_t(i, j) : 1.0;
          moved += hs.p(i, j) * std::exp(p.scale * chain * (static_cast<double>(acc) - exact));
        }
        out = static_cast<double>(static_cast<float>(hs.lse(i) + std::log(moved)));
      }
    }
  return lse;
}

}  // namespace attnfuzz
