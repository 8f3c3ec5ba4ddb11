#pragma once
// The error model's magnitudes (harness/error_model.h) on the GPU, in float64: the formulas of
// oracles/error_terms.cpp, term for term, computed per chunk of query heads over Sq x Skv
// device buffers with the tiled product of oracles/device_common.cuh. Plain C++ interface, as
// oracles/gpu_attention.h (no CUDA header reaches the harness).
//
// Per query head, with P the reference probabilities, s_ij the score sensitivity, S the scores
// after the softcap and the bias (S = softcap(S_pre) + bias, oracles/gpu_attention.h) and
// P_c = P (1 - tanh^2(S_pre / c)) under a softcap (P without):
//   s_ij   = scale sqrt(Dqk/3 ((QK^T)_ij^2 / 3 + (Q^2 K^2^T)_ij / 2)) + |S_ij| + |LSE_i|
//   w      = P s,  dS = P_c (dP - (D - g)),  dS2 = dS^2 + (P_c dP)^2 + (P_c (D - g))^2
//   wd     = |dS| (s + 2 t^2 / (1 - t^2)) + P_c sqrt(Dv/3 (dP^2 / 3 + (dO^2 V^2^T) / 2)),
//            t = tanh(S_pre / c) under a softcap (its rounding moves the chain factor 1 - t^2)
//   O:   operand = sqrt(P^2 V^2), score_id = sqrt(sum_j w_ij^2 (V_jd - O_id)^2)
//   LSE: score = sqrt(rowsum(w^2)), truncation = scale |rowsum(P_c (Q_w K^T))| with Q_w's column d
//        weighted by ceil(Dqk / 16) - floor(d / 16)
//   dQ:  operand = scale sqrt(dS2 K^2), score = scale sqrt(wd^2 K^2), via_k = scale e_k |P_c K|
//   dK:  operand^2 = scale^2 sum_group dS2^T Q^2, score^2 = scale^2 sum_group wd^2^T Q^2,
//        via_k^2 = scale^2 sum_group P_c^2^T (e_k^2 Q^2), stored^2 = scale^2 sum_group (dS^T Q)^2
//   dV:  operand^2 = sum_group P^2^T dO^2, score^2 = sum_group w^2^T dO^2, stored^2 = sum_group (P^T dO)^2
//   underflow (dK, dV), F the indicator of 0 < P < 2^-126 (flushed by FTZ kernels):
//        dK = scale sum_group (|dS| F)^T |Q|,  dV = sum_group (P F)^T |dO|
//   subnormal (fp16 problems), e(x)^2 what fp16's subnormal range adds to x's relative rounding
//   and f = e(P)^2 (dS / P)^2 + e(dS)^2:
//        O = sqrt(e(P)^2 V^2), dQ = scale sqrt(f K^2), dK^2 = scale^2 sum_group f^T Q^2,
//        dV^2 = sum_group e(P)^2^T dO^2; sources with a_j = e(P)^2 |V_j|^2, f |K_j|^2, f |Q_i|^2,
//        e(P)^2 |dO_i|^2
// with e_k (k = op, st, acc, sc) the row errors of D = rowsum(dO O) from O's error parts:
//   sqrt(rowsum(dO^2 X^2)) for X = O.operand, O, sqrt(L/3 (O^2/3 + O.operand^2/2)), O.score.
// The rows' sources (participation ratios (sum a)^2 / sum a^2, harness/error_model.h), with
// |X_k|^2 the squared norm of row k of X:
//   O:  a_j = P_ij^2 |V_j|^2 (operand), w_ij^2 |V_j|^2 (score)
//   dQ: a_j = dS2_ij |K_j|^2, wd_ij^2 |K_j|^2;   dK: a_(o,i) = dS2_ij |Q_i|^2, wd_ij^2 |Q_i|^2
//   dV: a_(o,i) = P_ij^2 |dO_i|^2, w_ij^2 |dO_i|^2 (o over the group's heads)
#include "oracles/gpu_attention.h"

namespace attnfuzz::gpu {

// Where the results go: host arrays shaped as oracles/error_terms.cpp's TermTensors, indexed
// by kOutputs order (harness/tensors.h: O, LSE, dQ, dK, dV; the first five: dBias is not
// computed here, and a case that asks it is judged by the CPU set). LSE's operand and the
// `stored` terms of O and dQ are zero and not written; stored_dk and stored_dv only when the
// GQA group has more than one head.
struct HostErrorTerms {
  double* operand[5] = {};
  double* score[5] = {};
  double* stored_dk = nullptr;
  double* stored_dv = nullptr;
  double* via_dq[4] = {};  // op, st, acc, sc
  double* via_dk[4] = {};
  double* truncation_lse = nullptr;  // [B][Hq][Sq]
  double* underflow_dk = nullptr;
  double* underflow_dv = nullptr;
  double* operand_sources[5] = {};  // per row; LSE's not written
  double* score_sources[5] = {};
  // The subnormal part and its sources (O, dQ, dK, dV): computed when subnormal[0] is set.
  double* subnormal[5] = {};
  double* subnormal_sources[5] = {};
  // dK's via blocks (harness/error_model.h, TermTensors::via_tile_sum and the others): computed
  // when via_tile_sum is set, per tile of via_block_tile keys x columns and per head; with
  // v_i = scale^2 e_k(i)^2 (sum over the block's keys of P_c^2) (sum over its columns of Q^2),
  // the sums over the group's queries of v_i and v_i^2, [B*Hkv][key tiles][column tiles][4] and [B*Hkv][4].
  int64_t via_block_tile = 0;
  double *via_tile_sum = nullptr, *via_tile_sum_sq = nullptr, *via_head_sum = nullptr, *via_head_sum_sq = nullptr;
};

// o, lse: the float64 reference forward of `a`; d_out: [B][Hq][Sq][Dv]; d_lse: [B][Hq][Sq].
void error_terms(const HostAttention& a, const double* o, const double* lse, const double* d_out, const double* d_lse,
                 const HostErrorTerms& out, Timing* t = nullptr);

}  // namespace attnfuzz::gpu
