#include "oracles/error_terms.h"

#include <array>
#include <cmath>

#include "harness/dtype.h"
#include "oracles/reference.h"
#include "oracles/tied_keys.h"

namespace attnfuzz {
namespace {

// Root of a matrix of sums of squares (rounding can leave tiny negatives from expansions).
Mat root(const Mat& sq) { return sq.cwiseMax(0.0).cwiseSqrt(); }
Mat squared(const Mat& m) { return m.cwiseProduct(m); }

// Accumulation error scale of a dot product of n terms with result x and terms' RSS r:
// sqrt(n/3 * (x^2/3 + r^2/2)) (harness/error_model.h, "L").
Mat dot_error(const Mat& x, const Mat& rss, double n) { return ((squared(x) / 3.0 + squared(rss) / 2.0) * (n / 3.0)).cwiseSqrt(); }

// The two sums of a row's reduction terms a_k = weight_k * row_norm2_k that the participation
// ratio needs (harness/error_model.h, "How many independent errors"), for every row at once:
// rows of `weight` are the output's rows, its columns the reduction index k.
struct SourceSums {
  Eigen::VectorXd sum, sum_sq;
};
SourceSums source_sums(const Mat& weight, const Eigen::VectorXd& row_norm2) {
  return {weight * row_norm2, squared(weight) * row_norm2.cwiseAbs2()};
}

// Accumulates per-row source sums into [B][H][S] tensors (dK and dV sum over a GQA group).
struct SourceAccumulator {
  Tensor sum, sum_sq;
  explicit SourceAccumulator(const std::vector<int64_t>& rows) : sum(rows), sum_sq(rows) {}
  void add(int64_t b, int64_t h, const SourceSums& s) {
    Eigen::Map<Eigen::VectorXd>(sum.at(b, h, 0), s.sum.size()) += s.sum;
    Eigen::Map<Eigen::VectorXd>(sum_sq.at(b, h, 0), s.sum.size()) += s.sum_sq;
  }
  Tensor sources() const {
    Tensor t(sum.shape);
    for (size_t e = 0; e < t.numel(); ++e) t.data[e] = participation(sum.data[e], sum_sq.data[e]);
    return t;
  }
};

// dBias's terms from their sums of squares: the roots, and each row's sources (a row is the bias's
// last dimension). Different elements sum different dS, whose operand, score and subnormal errors
// are their own: those parts have as many sources as the participation ratio of the elements'
// variances says. The via and normalizer parts are shared along the row (one source each, in
// model_sigma_and_row_dof).
void finish_dbias_terms(TermTensors& tb) {
  const auto& n = tb.operand.shape;
  const int64_t width = n[3];
  const std::vector<int64_t> rows{n[0], n[1], n[2]};
  tb.operand_sources = Tensor(rows);
  tb.score_sources = Tensor(rows);
  if (!tb.subnormal.data.empty()) tb.subnormal_sources = Tensor(rows);
  for (size_t r = 0; r < tb.operand_sources.numel(); ++r) {
    double op = 0, op2 = 0, sc = 0, sc2 = 0, sub = 0, sub2 = 0;
    for (int64_t j = 0; j < width; ++j) {
      const size_t e = r * static_cast<size_t>(width) + static_cast<size_t>(j);
      op += tb.operand.data[e], op2 += tb.operand.data[e] * tb.operand.data[e];
      sc += tb.score.data[e], sc2 += tb.score.data[e] * tb.score.data[e];
      if (!tb.subnormal.data.empty()) sub += tb.subnormal.data[e], sub2 += tb.subnormal.data[e] * tb.subnormal.data[e];
    }
    tb.operand_sources.data[r] = participation(op, op2);
    tb.score_sources.data[r] = participation(sc, sc2);
    if (!tb.subnormal.data.empty()) tb.subnormal_sources.data[r] = participation(sub, sub2);
  }
  for (Tensor* x : {&tb.operand, &tb.score, &tb.subnormal, &tb.via_op, &tb.via_st, &tb.via_acc, &tb.via_sc, &tb.normalizer_lse,
                    &tb.normalizer_acc})
    for (double& v : x->data) v = std::sqrt(v);
}

}  // namespace

ErrorTerms reference_error_terms(const Problem& p, const Forward& fwd, const Tensor& d_out, const Tensor& d_lse) {
  const Shape& s = p.shape;
  const std::vector<int64_t> oq{s.batch, s.heads_q, s.seq_q, s.head_dim_v}, lq{s.batch, s.heads_q, s.seq_q},
      qq{s.batch, s.heads_q, s.seq_q, s.head_dim_qk}, kk{s.batch, s.heads_kv, s.seq_kv, s.head_dim_qk},
      vv{s.batch, s.heads_kv, s.seq_kv, s.head_dim_v};
  ErrorTerms t;
  // Zeroed: dK and dV sum their parts over a GQA group, and the stored part of O, LSE and dQ
  // stays zero here.
  auto init = [&](TensorId o, const std::vector<int64_t>& shape, double length) {
    t[o] = TermTensors{Tensor(shape), Tensor(shape), Tensor(shape), length};
  };
  init(TensorId::O, oq, reduction_length(TensorId::O, s));
  init(TensorId::LSE, lq, reduction_length(TensorId::LSE, s));
  init(TensorId::dQ, qq, reduction_length(TensorId::dQ, s));
  init(TensorId::dK, kk, reduction_length(TensorId::dK, s));
  for (TensorId o : {TensorId::dQ, TensorId::dK}) {
    auto part = [&] { return o == TensorId::dQ ? Tensor(qq) : Tensor(kk); };
    t[o].via_op = part();
    t[o].via_st = part();
    t[o].via_acc = part();
    t[o].via_sc = part();
  }
  init(TensorId::dV, vv, reduction_length(TensorId::dV, s));
  // D's error per block of dK's key rows (TermTensors::via_block_tile), summed over the group's queries.
  size_via_blocks(t[TensorId::dK], s);
  const int64_t block = t[TensorId::dK].via_block_tile, key_tiles = (s.seq_kv + block - 1) / block,
                col_tiles = (s.head_dim_qk + block - 1) / block;
  t[TensorId::LSE].truncation = Tensor(lq);
  // The truncation part's weights (harness/error_model.h): w_d = ceil(Dqk / 16) - floor(d / 16).
  Eigen::VectorXd step_weights(s.head_dim_qk);
  for (int64_t d = 0; d < s.head_dim_qk; ++d) step_weights(d) = static_cast<double>((s.head_dim_qk + 15) / 16 - d / 16);
  t[TensorId::dK].underflow = Tensor(kk);
  t[TensorId::dV].underflow = Tensor(vv);
  // The subnormal part exists for fp16 operands only (harness/error_model.h).
  const bool fp16 = p.dtype == DType::f16;
  if (fp16) {
    t[TensorId::O].subnormal = Tensor(oq);
    t[TensorId::dQ].subnormal = Tensor(qq);
    t[TensorId::dK].subnormal = Tensor(kk);
    t[TensorId::dV].subnormal = Tensor(vv);
  }
  // dBias: each element sums the dS_ij its broadcast covers (harness/error_model.h, "dBias"); the
  // squares accumulate here, the roots are taken at the end.
  const bool dbias = p.bias_requires_grad;
  if (dbias) {
    const auto& n = p.bias.shape;
    t[TensorId::dBias] = TermTensors{Tensor(n), Tensor(n), Tensor(n),
                                     static_cast<double>(s.batch * s.heads_q * s.seq_q * s.seq_kv) / static_cast<double>(p.bias.numel())};
    TermTensors& tb = t[TensorId::dBias];
    for (Tensor* x : {&tb.via_op, &tb.via_st, &tb.via_acc, &tb.via_sc, &tb.underflow, &tb.normalizer_lse, &tb.normalizer_acc}) *x = Tensor(n);
    if (fp16) tb.subnormal = Tensor(n);
  }
  // dK and dV sum over a GQA group: squares accumulate here, roots are taken at the end.
  Tensor dk_partials(kk), dv_partials(vv);
  const std::vector<int64_t> q_rows{s.batch, s.heads_q, s.seq_q}, kv_rows{s.batch, s.heads_kv, s.seq_kv};
  std::array<SourceAccumulator, 5> op_sources{SourceAccumulator(q_rows), SourceAccumulator(q_rows), SourceAccumulator(q_rows),
                                              SourceAccumulator(kv_rows), SourceAccumulator(kv_rows)};
  std::array<SourceAccumulator, 5> sc_sources = op_sources, sub_sources = op_sources;
  auto sources_of = [&](std::array<SourceAccumulator, 5>& a, TensorId o) -> SourceAccumulator& { return a[output_index(o)]; };
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads_q; ++h) {
      const int64_t hk = h / s.group();
      const HeadScores hs = head_scores(p, b, h);
      const CMap q(p.q.at(b, h, 0), s.seq_q, s.head_dim_qk), k(p.k.at(b, hk, 0), s.seq_kv, s.head_dim_qk),
          v(p.v.at(b, hk, 0), s.seq_kv, s.head_dim_v), o(fwd.o.at(b, h, 0), s.seq_q, s.head_dim_v),
          d_o(d_out.at(b, h, 0), s.seq_q, s.head_dim_v);
      const Eigen::Map<const Eigen::VectorXd> g(d_lse.at(b, h, 0), s.seq_q);
      const Mat q2 = squared(q), k2 = squared(k), v2 = squared(v), do2 = squared(d_o);
      const Mat p2 = squared(hs.p);
      const Eigen::VectorXd q_norm2 = q2.rowwise().sum(), k_norm2 = k2.rowwise().sum(), v_norm2 = v2.rowwise().sum(),
                            do_norm2 = do2.rowwise().sum();

      // Score sensitivity s_ij: the fp32 dot product's error, and exp(S - LSE)'s argument.
      const Mat raw = q * k.transpose();
      const Mat score_err = p.scale * dot_error(raw, root(q2 * k2.transpose()), static_cast<double>(s.head_dim_qk));
      Mat sens = score_err + hs.s.cwiseAbs();
      for (int64_t i = 0; i < s.seq_q; ++i)
        if (std::isfinite(hs.lse(i))) sens.row(i).array() += std::fabs(hs.lse(i));
      const Mat w = hs.p.cwiseProduct(sens), w2 = squared(w);

      // O = P V.
      const Mat o_operand = root(p2 * v2);
      MMap(t[TensorId::O].operand.at(b, h, 0), s.seq_q, s.head_dim_v) = o_operand;
      // dO_id from score errors: sum_j dP_ij (V_jd - O_id) with dP_ij = P_ij e_ij, its square
      // summed as written: expanding it (w2 V^2 - 2 O w2 V + ...) cancels to rounding noise
      // where V is near constant or a row sees one key.
      Mat o_score(s.seq_q, s.head_dim_v);
      for (int64_t i = 0; i < s.seq_q; ++i) o_score.row(i) = (w2.row(i) * (v.rowwise() - o.row(i)).cwiseAbs2()).cwiseSqrt();
      MMap(t[TensorId::O].score.at(b, h, 0), s.seq_q, s.head_dim_v) = o_score;
      // The score part's sources are weighted by |V_j|^2, not |V_j - O_i|^2: a dof estimate
      // needs no more, and the GPU computes the same without an Sq x Skv x Dv pass.
      sources_of(op_sources, TensorId::O).add(b, h, source_sums(p2, v_norm2));
      sources_of(sc_sources, TensorId::O).add(b, h, source_sums(w2, v_norm2));
      // LSE = log sum exp S.
      Eigen::Map<Eigen::VectorXd>(t[TensorId::LSE].score.at(b, h, 0), s.seq_q) = w2.rowwise().sum().cwiseSqrt();
      // Its truncation part: scale |sum_j P_ij c_ij sum_d w_d Q_id K_jd| (c the softcap's chain factor).
      {
        const Mat weighted = (q * step_weights.asDiagonal()) * k.transpose();
        Mat pw = hs.p;
        if (p.softcap) pw = pw.cwiseProduct((1.0 - hs.tanh_t.array().square()).matrix());
        Eigen::Map<Eigen::VectorXd>(t[TensorId::LSE].truncation.at(b, h, 0), s.seq_q) =
            p.scale * pw.cwiseProduct(weighted).rowwise().sum().cwiseAbs();
      }

      // Backward: dS = P (dP - D + g), the softcap's chain rule on top.
      const Mat dp = d_o * v.transpose();
      const Eigen::VectorXd delta = d_o.cwiseProduct(o).rowwise().sum();
      Mat chain = Mat::Ones(s.seq_q, s.seq_kv);
      if (p.softcap) chain = (1.0 - hs.tanh_t.array().square()).matrix();
      const Mat pc = hs.p.cwiseProduct(chain);
      const Mat ds = pc.cwiseProduct((dp.colwise() - (delta - g)).eval());
      // What the operand rounding of dS acts on: dS itself for a fused kernel (rounded after
      // the subtraction dP - D), and P dP, P D for an unfused graph that stores dP and D in
      // the case dtype first (LibTorch's math path, XLA): both are correct implementations.
      const Mat ds2 = squared(ds) + squared(pc.cwiseProduct(dp)) + squared(Mat(pc.array().colwise() * (delta - g).array()));
      // D is computed from the computed O: each part of O's error (per rounding unit) moves every dS of the row.
      // At u_acc, O's accumulation (independent per element) and its normalizer (every O_id of
      // the row scaled alike, relative variance L / 6: D_i moves by that much of itself).
      const double o_len = static_cast<double>(s.seq_kv);
      const std::array<Eigen::VectorXd, 4> d_err{
          do2.cwiseProduct(squared(o_operand)).rowwise().sum().cwiseSqrt(), do2.cwiseProduct(squared(o)).rowwise().sum().cwiseSqrt(),
          ((do2.cwiseProduct(squared(o) / 3.0 + squared(o_operand) / 2.0) * (o_len / 3.0)).rowwise().sum() +
           delta.cwiseAbs2() * (o_len / 6.0))
              .cwiseSqrt(),
          do2.cwiseProduct(squared(o_score)).rowwise().sum().cwiseSqrt()};
      // dS's error from P's (score) error and from dP's fp32 accumulation over Dv.
      const Mat dp_err = dot_error(dp, root(do2 * v2.transpose()), static_cast<double>(s.head_dim_v));
      // Under a softcap the chain factor 1 - t^2 comes from t = tanh(S/c) stored at u_acc:
      // near saturation it loses 2 t^2 / (1 - t^2) of its relative accuracy per unit of t's
      // rounding (a key seen at t = -0.9993 reads 8e-5 relative in fp32, FlexEager's dK row).
      Mat ds_sens = sens;
      if (p.softcap) ds_sens += (2.0 * (Mat::Ones(s.seq_q, s.seq_kv) - chain).cwiseQuotient(chain.cwiseMax(1e-300)));
      const Mat wd = ds.cwiseAbs().cwiseProduct(ds_sens) + pc.cwiseProduct(dp_err);
      const Mat wd2 = squared(wd);

      // Tied keys (oracles/tied_keys.h) err alike for a query: dQ's row gets their shared error
      // coherently, through the same (P K)_id as D's error, as a part of via_sc (harness/error_model.h,
      // "tied keys"). dK sums over queries, whose errors stay independent: d_err alone.
      std::array<Eigen::VectorXd, 4> dq_err = d_err;
      const bool v_tied = rows_tied(p.v.at(b, hk, 0), s.seq_kv, s.head_dim_v);
      // A bias that varies along the keys makes their scores differ.
      const bool k_tied = rows_tied(p.k.at(b, hk, 0), s.seq_kv, s.head_dim_qk) && (!p.has_bias() || p.bias.shape[3] == 1);
      if (v_tied || k_tied)
        for (int64_t i = 0; i < s.seq_q; ++i) {
          double sum_p = 0, sum_ds = 0, sum_sens = 0;
          for (int64_t j = 0; j < s.seq_kv; ++j)
            if (pc(i, j) > 0) sum_p += pc(i, j), sum_ds += ds(i, j), sum_sens += pc(i, j) * ds_sens(i, j);
          if (sum_p == 0) continue;
          double tied2 = 0;
          if (v_tied) tied2 += dp_err(i, 0) * dp_err(i, 0);
          if (k_tied) tied2 += std::pow(sum_sens / sum_p * sum_ds / sum_p, 2);
          dq_err[3](i) = std::sqrt(dq_err[3](i) * dq_err[3](i) + tied2);
        }

      const double sc2 = p.scale * p.scale;
      MMap(t[TensorId::dQ].operand.at(b, h, 0), s.seq_q, s.head_dim_qk) = p.scale * root(ds2 * k2);
      MMap(t[TensorId::dQ].score.at(b, h, 0), s.seq_q, s.head_dim_qk) = p.scale * root(wd2 * k2);
      const Mat pk = (pc * k).cwiseAbs(), pc2 = squared(pc);
      Tensor* dq_via[4] = {&t[TensorId::dQ].via_op, &t[TensorId::dQ].via_st, &t[TensorId::dQ].via_acc, &t[TensorId::dQ].via_sc};
      Tensor* dk_via[4] = {&t[TensorId::dK].via_op, &t[TensorId::dK].via_st, &t[TensorId::dK].via_acc, &t[TensorId::dK].via_sc};
      for (size_t part = 0; part < 4; ++part) {
        MMap(dq_via[part]->at(b, h, 0), s.seq_q, s.head_dim_qk) = p.scale * (dq_err[part].asDiagonal() * pk);
        MMap(dk_via[part]->at(b, hk, 0), s.seq_kv, s.head_dim_qk) +=
            sc2 * (pc2.transpose() * (d_err[part].cwiseProduct(d_err[part]).asDiagonal() * q2));
      }
      {
        // Each query's part of dK's via variance per block: v_i = scale^2 d_err(i)^2 (sum over the
        // block's keys of P_ij^2) (sum over its columns of Q_id^2); the sums over i of v_i and v_i^2.
        Mat key_sums = Mat::Zero(s.seq_q, key_tiles), col_sums = Mat::Zero(s.seq_q, col_tiles);
        for (int64_t i = 0; i < s.seq_q; ++i) {
          for (int64_t j = 0; j < s.seq_kv; ++j) key_sums(i, j / block) += pc2(i, j);
          for (int64_t d = 0; d < s.head_dim_qk; ++d) col_sums(i, d / block) += q2(i, d);
        }
        const Eigen::VectorXd key_all = pc2.rowwise().sum();
        TermTensors& tk = t[TensorId::dK];
        const size_t head = static_cast<size_t>(b * s.heads_kv + hk);
        for (size_t part = 0; part < 4; ++part) {
          const Eigen::VectorXd a = sc2 * d_err[part].cwiseAbs2(), a2 = a.cwiseAbs2();
          const Mat sum = key_sums.transpose() * a.asDiagonal() * col_sums;
          const Mat sum_sq = key_sums.cwiseAbs2().transpose() * a2.asDiagonal() * col_sums.cwiseAbs2();
          for (int64_t kt = 0; kt < key_tiles; ++kt)
            for (int64_t ct = 0; ct < col_tiles; ++ct) {
              const size_t at = ((head * static_cast<size_t>(key_tiles) + static_cast<size_t>(kt)) * static_cast<size_t>(col_tiles) +
                                 static_cast<size_t>(ct)) * 4 + part;
              tk.via_tile_sum[at] += sum(kt, ct);
              tk.via_tile_sum_sq[at] += sum_sq(kt, ct);
            }
          const Eigen::VectorXd v = a.cwiseProduct(key_all).cwiseProduct(q_norm2);
          tk.via_head_sum[head * 4 + part] += v.sum();
          tk.via_head_sum_sq[head * 4 + part] += v.squaredNorm();
        }
      }

      sources_of(op_sources, TensorId::dQ).add(b, h, source_sums(ds2, k_norm2));
      sources_of(sc_sources, TensorId::dQ).add(b, h, source_sums(wd2, k_norm2));
      sources_of(op_sources, TensorId::dK).add(b, hk, source_sums(ds2.transpose(), q_norm2));
      sources_of(sc_sources, TensorId::dK).add(b, hk, source_sums(wd2.transpose(), q_norm2));
      sources_of(op_sources, TensorId::dV).add(b, hk, source_sums(p2.transpose(), do_norm2));
      sources_of(sc_sources, TensorId::dV).add(b, hk, source_sums(w2.transpose(), do_norm2));
      MMap(t[TensorId::dK].operand.at(b, hk, 0), s.seq_kv, s.head_dim_qk) += sc2 * (ds2.transpose() * q2);
      MMap(t[TensorId::dK].score.at(b, hk, 0), s.seq_kv, s.head_dim_qk) += sc2 * (wd2.transpose() * q2);
      // The terms a flush-to-zero kernel loses: P (and so dS) below fp32's smallest normal.
      const Mat flushed = hs.p.unaryExpr([](double x) { return x > 0 && x < kSmallestNormalF32 ? 1.0 : 0.0; });
      MMap(t[TensorId::dK].underflow.at(b, hk, 0), s.seq_kv, s.head_dim_qk) +=
          p.scale * (ds.cwiseAbs().cwiseProduct(flushed).transpose() * q.cwiseAbs());
      MMap(t[TensorId::dV].underflow.at(b, hk, 0), s.seq_kv, s.head_dim_v) +=
          hs.p.cwiseProduct(flushed).transpose() * d_o.cwiseAbs();
      MMap(t[TensorId::dV].operand.at(b, hk, 0), s.seq_kv, s.head_dim_v) += p2.transpose() * do2;
      MMap(t[TensorId::dV].score.at(b, hk, 0), s.seq_kv, s.head_dim_v) += w2.transpose() * do2;
      if (fp16) {
        // e(P)^2, and f = e(P)^2 (dS / P)^2 + e(dS)^2: P rounded in the subnormal range moves dS
        // by the same fraction of itself.
        const Mat ep2 = hs.p.unaryExpr(&fp16_subnormal_excess2);
        Mat f(s.seq_q, s.seq_kv);
        for (int64_t i = 0; i < s.seq_q; ++i)  // row by row: the matrices are row-major
          for (int64_t j = 0; j < s.seq_kv; ++j) {
            const double pij = hs.p(i, j), dsij = ds(i, j);
            f(i, j) = pij > 0 ? ep2(i, j) * (dsij / pij) * (dsij / pij) + fp16_subnormal_excess2(dsij) : 0.0;
          }
        MMap(t[TensorId::O].subnormal.at(b, h, 0), s.seq_q, s.head_dim_v) = root(ep2 * v2);
        MMap(t[TensorId::dQ].subnormal.at(b, h, 0), s.seq_q, s.head_dim_qk) = p.scale * root(f * k2);
        MMap(t[TensorId::dK].subnormal.at(b, hk, 0), s.seq_kv, s.head_dim_qk) += sc2 * (f.transpose() * q2);
        MMap(t[TensorId::dV].subnormal.at(b, hk, 0), s.seq_kv, s.head_dim_v) += ep2.transpose() * do2;
        sources_of(sub_sources, TensorId::O).add(b, h, source_sums(ep2, v_norm2));
        sources_of(sub_sources, TensorId::dQ).add(b, h, source_sums(f, k_norm2));
        sources_of(sub_sources, TensorId::dK).add(b, hk, source_sums(f.transpose(), q_norm2));
        sources_of(sub_sources, TensorId::dV).add(b, hk, source_sums(ep2.transpose(), do_norm2));
      }
      if (dbias) {
        // dS before the softcap's chain factor (the bias is added after the softcap), with the
        // same parts as dQ's per term: operand rounding of dS (or of P dP and P D, unfused), the
        // score and dP errors, D's error, the normalizer's, and the flushed and fp16-subnormal P.
        TermTensors& tb = t[TensorId::dBias];
        const Mat ds_b = hs.p.cwiseProduct((dp.colwise() - (delta - g)).eval());
        const Mat dsb2 =
            squared(ds_b) + squared(hs.p.cwiseProduct(dp)) + squared(Mat(hs.p.array().colwise() * (delta - g).array()));
        const Mat wdb = ds_b.cwiseAbs().cwiseProduct(sens) + hs.p.cwiseProduct(dp_err);
        Tensor* via[4] = {&tb.via_op, &tb.via_st, &tb.via_acc, &tb.via_sc};
        for (int64_t i = 0; i < s.seq_q; ++i) {
          const double lse_i = std::isfinite(hs.lse(i)) ? hs.lse(i) : 0.0;
          for (int64_t j = 0; j < s.seq_kv; ++j) {
            const double pij = hs.p(i, j), dsij = ds_b(i, j);
            if (pij == 0) continue;
            const size_t e = p.bias_offset(b, h, i, j);
            tb.operand.data[e] += dsb2(i, j);
            tb.score.data[e] += wdb(i, j) * wdb(i, j);
            for (size_t part = 0; part < 4; ++part) via[part]->data[e] += (pij * d_err[part](i)) * (pij * d_err[part](i));
            tb.normalizer_lse.data[e] += dsij * dsij * (1.0 + lse_i * lse_i);
            tb.normalizer_acc.data[e] += dsij * dsij * static_cast<double>(s.seq_kv);
            if (pij < kSmallestNormalF32) tb.underflow.data[e] += std::fabs(dsij);
            if (fp16) tb.subnormal.data[e] += fp16_subnormal_excess2(pij) * (dsij / pij) * (dsij / pij) + fp16_subnormal_excess2(dsij);
          }
        }
      }
      if (s.group() > 1) {
        MMap(dk_partials.at(b, hk, 0), s.seq_kv, s.head_dim_qk) += sc2 * squared(ds.transpose() * q);
        MMap(dv_partials.at(b, hk, 0), s.seq_kv, s.head_dim_v) += squared(hs.p.transpose() * d_o);
      }
    }
  for (TensorId out : {TensorId::O, TensorId::dQ, TensorId::dK, TensorId::dV}) {
    t[out].operand_sources = sources_of(op_sources, out).sources();
    t[out].score_sources = sources_of(sc_sources, out).sources();
    if (fp16) t[out].subnormal_sources = sources_of(sub_sources, out).sources();
  }
  for (TensorId out : {TensorId::dK, TensorId::dV}) {
    TermTensors& tt = t[out];
    const Tensor& partials = out == TensorId::dK ? dk_partials : dv_partials;
    for (size_t e = 0; e < tt.operand.numel(); ++e) {
      tt.operand.data[e] = std::sqrt(tt.operand.data[e]);
      tt.score.data[e] = std::sqrt(tt.score.data[e]);
      tt.stored.data[e] = std::sqrt(partials.data[e]);
      if (fp16) tt.subnormal.data[e] = std::sqrt(tt.subnormal.data[e]);
      if (out == TensorId::dK)
        for (Tensor* via : {&tt.via_op, &tt.via_st, &tt.via_acc, &tt.via_sc}) via->data[e] = std::sqrt(via->data[e]);
    }
  }
  if (dbias) finish_dbias_terms(t[TensorId::dBias]);
  return t;
}

}  // namespace attnfuzz
