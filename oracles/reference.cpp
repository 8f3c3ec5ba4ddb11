#include "oracles/reference.h"

#include <Eigen/Dense>
#include <cmath>
#include <limits>

namespace attnfuzz {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

}  // namespace

HeadScores head_scores(const Problem& p, int64_t b, int64_t h) {
  const Shape& s = p.shape;
  const int64_t hk = h / s.group();
  CMap q(p.q.at(b, h, 0), s.seq_q, s.head_dim_qk);
  CMap k(p.k.at(b, hk, 0), s.seq_kv, s.head_dim_qk);
  HeadScores out;
  Mat sc = p.scale * (q * k.transpose());
  if (p.softcap) {
    const double c = *p.softcap;
    out.tanh_t = (sc.array() / c).tanh().matrix();
    sc = c * out.tanh_t;
  }
  if (p.has_bias())
    for (int64_t i = 0; i < s.seq_q; ++i)
      for (int64_t j = 0; j < s.seq_kv; ++j) sc(i, j) += p.bias_at(b, h, i, j);
  out.lse.resize(s.seq_q);
  out.p.resize(s.seq_q, s.seq_kv);
  for (int64_t i = 0; i < s.seq_q; ++i) {
    double m = kNegInf;
    for (int64_t j = 0; j < s.seq_kv; ++j)
      if (p.visible(b, h, i, j)) m = std::max(m, sc(i, j));
    if (m == kNegInf) {  // fully masked row: LSE = -inf, P = 0
      out.lse(i) = kNegInf;
      out.p.row(i).setZero();
      continue;
    }
    double sum = 0;
    for (int64_t j = 0; j < s.seq_kv; ++j)
      if (p.visible(b, h, i, j)) sum += std::exp(sc(i, j) - m);
    const double lse = m + std::log(sum);
    out.lse(i) = lse;
    for (int64_t j = 0; j < s.seq_kv; ++j) out.p(i, j) = p.visible(b, h, i, j) ? std::exp(sc(i, j) - lse) : 0.0;
  }
  out.s = std::move(sc);
  return out;
}

std::string ReferenceBackend::version() const {
  return "eigen-" + std::to_string(EIGEN_WORLD_VERSION) + "." + std::to_string(EIGEN_MAJOR_VERSION) + "." +
         std::to_string(EIGEN_MINOR_VERSION) + " float64";
}

Forward reference_forward(const Problem& p) {
  const Shape& s = p.shape;
  Forward f{Tensor({s.batch, s.heads_q, s.seq_q, s.head_dim_v}), Tensor({s.batch, s.heads_q, s.seq_q})};
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads_q; ++h) {
      const HeadScores hs = head_scores(p, b, h);
      CMap v(p.v.at(b, h / s.group(), 0), s.seq_kv, s.head_dim_v);
      MMap(f.o.at(b, h, 0), s.seq_q, s.head_dim_v) = hs.p * v;
      Eigen::Map<Eigen::VectorXd>(f.lse.at(b, h, 0), s.seq_q) = hs.lse;
    }
  return f;
}

Gradients reference_backward(const Problem& p, const Forward& fwd, const Tensor& d_out, const Tensor& d_lse) {
  const Shape& s = p.shape;
  // dQ is assigned head by head; dK, dV and dBias sum over heads.
  Gradients g{Tensor({s.batch, s.heads_q, s.seq_q, s.head_dim_qk}), Tensor({s.batch, s.heads_kv, s.seq_kv, s.head_dim_qk}),
              Tensor({s.batch, s.heads_kv, s.seq_kv, s.head_dim_v})};
  if (p.bias_requires_grad) g.dbias = Tensor(p.bias.shape);
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads_q; ++h) {
      const int64_t hk = h / s.group();
      const HeadScores hs = head_scores(p, b, h);
      CMap q(p.q.at(b, h, 0), s.seq_q, s.head_dim_qk);
      CMap k(p.k.at(b, hk, 0), s.seq_kv, s.head_dim_qk);
      CMap v(p.v.at(b, hk, 0), s.seq_kv, s.head_dim_v);
      CMap o(fwd.o.at(b, h, 0), s.seq_q, s.head_dim_v);
      CMap d_o(d_out.at(b, h, 0), s.seq_q, s.head_dim_v);
      Eigen::Map<const Eigen::VectorXd> g_lse(d_lse.at(b, h, 0), s.seq_q);

      MMap(g.dv.at(b, hk, 0), s.seq_kv, s.head_dim_v) += hs.p.transpose() * d_o;
      const Mat dp = d_o * v.transpose();
      const Eigen::VectorXd delta = d_o.cwiseProduct(o).rowwise().sum();
      // dS = P * (dP - D + g); P = 0 on masked entries and empty rows, so no NaN can enter.
      Mat ds = hs.p.cwiseProduct((dp.colwise() - (delta - g_lse)).eval());
      // dBias is dS after the softcap (the bias is added to the capped score), summed over
      // the dimensions the bias broadcasts.
      if (p.bias_requires_grad)
        for (int64_t i = 0; i < s.seq_q; ++i)
          for (int64_t j = 0; j < s.seq_kv; ++j) g.dbias.data[p.bias_offset(b, h, i, j)] += ds(i, j);
      if (p.softcap) ds = ds.cwiseProduct((1.0 - hs.tanh_t.array().square()).matrix());
      MMap(g.dq.at(b, h, 0), s.seq_q, s.head_dim_qk) = p.scale * (ds * k);
      MMap(g.dk.at(b, hk, 0), s.seq_kv, s.head_dim_qk) += p.scale * (ds.transpose() * q);
    }
  return g;
}

}  // namespace attnfuzz
