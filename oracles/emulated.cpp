#include "oracles/emulated.h"

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

template <class Acc>
struct HeadState {
  std::vector<Acc> s_pre, p;  // Sq x Skv
  std::vector<Acc> lse;
};

template <class Acc>
HeadState<Acc> scores(const Problem& pr, const Numerics<Acc>& nx, int64_t b, int64_t h) {
  const Shape& s = pr.shape;
  const int64_t hk = h / s.group();
  HeadState<Acc> st;
  st.s_pre.assign(static_cast<size_t>(s.seq_q * s.seq_kv), 0);
  st.p.assign(st.s_pre.size(), 0);
  st.lse.assign(static_cast<size_t>(s.seq_q), -std::numeric_limits<Acc>::infinity());
  const Acc scale = static_cast<Acc>(pr.scale);
  for (int64_t i = 0; i < s.seq_q; ++i) {
    const double* q = pr.q.at(b, h, i);
    Acc m = -std::numeric_limits<Acc>::infinity();
    std::vector<Acc> row(static_cast<size_t>(s.seq_kv));
    for (int64_t j = 0; j < s.seq_kv; ++j) {
      const double* k = pr.k.at(b, hk, j);
      Acc acc = 0;
      nx.each(s.head_dim_qk, [&](int64_t d) { acc += nx.op(q[d]) * nx.op(k[d]); });
      Acc sc = acc * scale;
      st.s_pre[static_cast<size_t>(i * s.seq_kv + j)] = sc;
      if (pr.softcap) sc = static_cast<Acc>(*pr.softcap) * std::tanh(sc / static_cast<Acc>(*pr.softcap));
      row[static_cast<size_t>(j)] = sc;
      if (pr.visible(b, h, i, j)) m = std::max(m, sc);
    }
    if (m == -std::numeric_limits<Acc>::infinity()) continue;  // fully masked row
    Acc l = 0;
    nx.each(s.seq_kv, [&](int64_t j) {
      if (pr.visible(b, h, i, j)) l += std::exp(row[static_cast<size_t>(j)] - m);
    });
    const Acc lse = m + std::log(l);
    st.lse[static_cast<size_t>(i)] = lse;
    for (int64_t j = 0; j < s.seq_kv; ++j)
      if (pr.visible(b, h, i, j)) st.p[static_cast<size_t>(i * s.seq_kv + j)] = std::exp(row[static_cast<size_t>(j)] - lse);
  }
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
      for (int64_t i = 0; i < s.seq_q; ++i) {
        *f.lse.at(b, h, i) = nx.store_f32(st.lse[static_cast<size_t>(i)]);
        for (int64_t d = 0; d < s.head_dim_v; ++d) {
          Acc acc = 0;
          nx.each(s.seq_kv, [&](int64_t j) { acc += nx.op(st.p[static_cast<size_t>(i * s.seq_kv + j)]) * nx.op(pr.v.at(b, hk, j)[d]); });
          f.o.at(b, h, i)[d] = nx.store(acc);
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
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads_q; ++h) {
      const HeadState<Acc> st = scores(pr, nx, b, h);
      const int64_t hk = h / s.group();
      std::vector<Acc> ds(n, 0);
      for (int64_t i = 0; i < s.seq_q; ++i) {
        Acc delta = 0;  // D_i = rowsum(dO * O)
        nx.each(s.head_dim_v, [&](int64_t d) { delta += static_cast<Acc>(d_out.at(b, h, i)[d]) * static_cast<Acc>(fwd.o.at(b, h, i)[d]); });
        const Acc g = static_cast<Acc>(*d_lse.at(b, h, i));
        for (int64_t j = 0; j < s.seq_kv; ++j) {
          const size_t ij = static_cast<size_t>(i * s.seq_kv + j);
          if (st.p[ij] == 0) continue;
          Acc dp = 0;
          nx.each(s.head_dim_v, [&](int64_t d) { dp += nx.op(d_out.at(b, h, i)[d]) * nx.op(pr.v.at(b, hk, j)[d]); });
          Acc v = st.p[ij] * (dp - delta + g);
          if (pr.softcap) {
            const Acc t = std::tanh(st.s_pre[ij] / static_cast<Acc>(*pr.softcap));
            v *= 1 - t * t;
          }
          ds[ij] = v;
        }
      }
      const Acc scale = static_cast<Acc>(pr.scale);
      for (int64_t i = 0; i < s.seq_q; ++i)
        for (int64_t d = 0; d < s.head_dim_qk; ++d) {
          Acc acc = 0;
          nx.each(s.seq_kv, [&](int64_t j) { acc += nx.op(ds[static_cast<size_t>(i * s.seq_kv + j)]) * nx.op(pr.k.at(b, hk, j)[d]); });
          dq_acc[static_cast<size_t>(((b * s.heads_q + h) * s.seq_q + i) * s.head_dim_qk + d)] = scale * acc;
        }
      for (int64_t j = 0; j < s.seq_kv; ++j) {
        for (int64_t d = 0; d < s.head_dim_qk; ++d) {
          Acc acc = 0;
          nx.each(s.seq_q, [&](int64_t i) { acc += nx.op(ds[static_cast<size_t>(i * s.seq_kv + j)]) * nx.op(pr.q.at(b, h, i)[d]); });
          dk_acc[static_cast<size_t>(((b * s.heads_kv + hk) * s.seq_kv + j) * s.head_dim_qk + d)] += scale * acc;
        }
        for (int64_t d = 0; d < s.head_dim_v; ++d) {
          Acc acc = 0;
          nx.each(s.seq_q, [&](int64_t i) { acc += nx.op(st.p[static_cast<size_t>(i * s.seq_kv + j)]) * nx.op(d_out.at(b, h, i)[d]); });
          dv_acc[static_cast<size_t>(((b * s.heads_kv + hk) * s.seq_kv + j) * s.head_dim_v + d)] += acc;
        }
      }
    }
  Gradients g{Tensor({s.batch, s.heads_q, s.seq_q, s.head_dim_qk}), Tensor({s.batch, s.heads_kv, s.seq_kv, s.head_dim_qk}),
              Tensor({s.batch, s.heads_kv, s.seq_kv, s.head_dim_v})};
  for (size_t i = 0; i < dq_acc.size(); ++i) g.dq.data[i] = nx.store(dq_acc[i]);
  for (size_t i = 0; i < dk_acc.size(); ++i) g.dk.data[i] = nx.store(dk_acc[i]);
  for (size_t i = 0; i < dv_acc.size(); ++i) g.dv.data[i] = nx.store(dv_acc[i]);
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

}  // namespace attnfuzz
