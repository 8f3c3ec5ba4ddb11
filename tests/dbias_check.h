#pragma once
// dBias of a GPU backend against the float64 reference's (oracles/reference.h), for the gpu-labelled
// tests that enable it (tests/test_gpu_backends.cpp: torch.efficient, torch.sdpa.efficient;
// tests/test_cudnn_backend.cpp: cudnn). The C++ verdict on dBias (its error model) is the
// harness's; this is a direct check of the backend, with its own element-wise bound:
//
//   |dBias_e - dBias_ref_e| <= 8 u M_e + 1e-6 u max_e' M_e' + s (N_e + T_e + 3)
//   M_e = sum over the (b, h, i, j) that broadcast onto e of P_ij (|dO_i| . |V_j| + A_i)
//   T_e = the same sum of (|dO_i| . |V_j| + A_i) over the terms whose P_ij is below the dtype's
//         smallest normal number
//   N_e = the number of (b, h, i, j) that broadcast onto e
//   A_i = sum_d |dO_id| sum_j P_ij |V_jd|
//
// with u the case dtype's unit roundoff (2^-11 fp16, 2^-8 bf16), s its smallest subnormal (fp16's
// 2^-24), P the reference's and |x| . |y| the product of magnitudes summed over the head
// dimension. The s part: below the smallest normal number a rounding errs absolutely, by up to
// s/2, which no relative bound covers: P rounded to the dtype as dS's operand (s/2 |dP_ij - D_i|
// per term, T_e), each dS stored (N_e), the sum stored once; twice that, and 2 s of floor. On the
// H200 torch.efficient's fp16 dBias erred by 3.3e-7 at an element of about -1e-6 whose P is
// subnormal, 1.36 times a bound that had only a 4 s floor. Why: dS_ij = P_ij (dP_ij - D_i),
// dP_ij = dO_i . V_j, D_i = dO_i . O_i, and a fused kernel with float32 arithmetic and 16-bit
// storage errs to first order by (a) D_i computed from its O, which is sum_j op(P_ij) V_j with P
// rounded to 16 bits for that product and then stored in 16 bits: |dD_i| <= 2 u A_i, so
// 2 u P_ij A_i in dS_ij; (b) dS stored per element in the dtype before it is summed (LibTorch's
// efficient kernel writes grad_bias per (b, h, i, j)): u P_ij |dP_ij - D_i| <= u P_ij
// (|dO_i| . |V_j| + A_i); (c) the sum stored once in the dtype: u |dBias_e| <= u M_e. That is at
// most 4 u M_e; the float32 parts (scores, exp, LSE, dP, the sums' accumulation over at most
// 144 terms here) stay below a few hundredths of u M_e. 8 leaves a factor of 2 and still catches
// anything structural: a missed, averaged or double-counted broadcast, a masked entry that
// leaks, padding read back as data, a transposed or scaled dBias are O(1) of M (the contract
// baselines, which have every error above but (b), measure at most 0.25 of the bound on these
// cases, and a dBias averaged instead of summed 1.3 to 46 times it: DbiasCheck in
// tests/test_gpu_backends.cpp). The floor only forgives underflow-sized noise where every
// summand is masked (M_e = 0: dBias 0).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "harness/backend.h"
#include "harness/case.h"
#include "harness/case_json.h"
#include "harness/dtype.h"
#include "harness/inputs.h"
#include "oracles/reference.h"

namespace attnfuzz::dbias_test {

struct DbiasCase {
  std::string name;
  Case c;
};

// A case whose tensor bias spans `spans` (batch, heads, q, kv) and requires a gradient.
inline Case dbias_case(uint64_t seed, Shape shape, DType dtype, std::array<bool, 4> spans, MaskExpr mask) {
  Case c;
  c.seed = seed;
  c.shape = shape;
  c.dtype = dtype;
  c.mask = std::move(mask);
  ScoreBias b;
  b.spans = spans;
  b.values = ValueDist{ValueDist::Kind::normal, 0.0, 2.0};
  b.requires_grad = true;
  c.bias = b;
  validate(c);
  return c;
}

// The broadcast shapes [B,H,Sq,Skv], [1,H,Sq,Skv], [1,1,Sq,Skv], [B,1,1,Skv] (every one spans the
// keys: LibTorch's kernels fault on or refuse a float mask broadcast over them, docs/findings/LEDGER.md,
// s47-torch-*-float-mask-broadcast-kv), each over a mask: bottom-right causal, none (with Skv = 70,
// which LibTorch pads for the efficient kernel), a sliding window (cuDNN: a native band), a random
// mask (cuDNN: the bias fallback, per batch and head), and a bottom-right causal mask with Sq > Skv
// (rows that see no key). `gqa`: also a grouped-query case.
inline std::vector<DbiasCase> dbias_cases(DType d, bool gqa) {
  MaskExpr random;
  random.kind = MaskExpr::Kind::random;
  random.density = 0.7;
  random.seed = 5;
  std::vector<DbiasCase> out{
      {"bhsk_causal_br", dbias_case(41, {2, 3, 3, 48, 72, 64, 64}, d, {true, true, true, true}, MaskExpr::causal_mask(Align::bottom_right))},
      {"1hsk_no_mask_skv70", dbias_case(42, {2, 3, 3, 40, 70, 64, 64}, d, {false, true, true, true}, MaskExpr::all_visible())},
      {"11sk_window", dbias_case(43, {2, 3, 3, 64, 64, 64, 64}, d, {false, false, true, true}, MaskExpr::window(16, 0, Align::top_left))},
      {"b11k_random_mask", dbias_case(44, {2, 3, 3, 48, 72, 64, 64}, d, {true, false, false, true}, random)},
      {"1hsk_rows_without_keys",
       dbias_case(45, {2, 2, 2, 72, 48, 64, 64}, d, {false, true, true, true}, MaskExpr::causal_mask(Align::bottom_right))},
  };
  if (gqa)
    out.push_back({"11sk_gqa_causal", dbias_case(46, {2, 4, 2, 64, 64, 64, 64}, d, {false, false, true, true},
                                                 MaskExpr::causal_mask(Align::top_left))});
  return out;
}

// The call a test makes: the case's problem with the bias requiring a gradient, dO zeroed on the
// rows that see no key (as the harness does for a backend with its own convention there, which
// every GPU backend has), dLSE zero (none of them takes it).
struct DbiasCall {
  Problem p;
  Tensor d_out, d_lse;
  Forward ref;
};

inline DbiasCall dbias_call(const Case& c) {
  const Inputs in = generate_inputs(c);
  DbiasCall call{full_problem(c, in), in.d_out, Tensor(in.d_lse.shape), {}};
  call.p.bias_requires_grad = true;
  call.ref = reference_forward(call.p);
  const Shape& s = call.p.shape;
  for (size_t row = 0; row < call.ref.lse.numel(); ++row)
    if (!std::isfinite(call.ref.lse.data[row]))
      for (int64_t d = 0; d < s.head_dim_v; ++d) call.d_out.data[row * static_cast<size_t>(s.head_dim_v) + static_cast<size_t>(d)] = 0.0;
  return call;
}

// M_e, T_e and N_e of the bound above, shaped like the bias.
struct DbiasMagnitudes {
  Tensor m, subnormal_terms, count;
};

inline DbiasMagnitudes dbias_magnitude(const DbiasCall& call, DType dtype) {
  const Problem& p = call.p;
  const Shape& s = p.shape;
  const double normal_min = smallest_normal(dtype);
  DbiasMagnitudes out{Tensor(p.bias.shape), Tensor(p.bias.shape), Tensor(p.bias.shape)};
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads_q; ++h) {
      const HeadScores hs = head_scores(p, b, h);
      CMap v(p.v.at(b, h / s.group(), 0), s.seq_kv, s.head_dim_v);
      CMap d_o(call.d_out.at(b, h, 0), s.seq_q, s.head_dim_v);
      const Mat dp_abs = d_o.cwiseAbs() * v.cwiseAbs().transpose();                                  // |dO_i| . |V_j|
      const Eigen::VectorXd a = d_o.cwiseAbs().cwiseProduct(hs.p * v.cwiseAbs()).rowwise().sum();  // A_i
      for (int64_t i = 0; i < s.seq_q; ++i)
        for (int64_t j = 0; j < s.seq_kv; ++j) {
          const size_t e = p.bias_offset(b, h, i, j);
          out.m.data[e] += hs.p(i, j) * (dp_abs(i, j) + a(i));
          if (hs.p(i, j) < normal_min) out.subnormal_terms.data[e] += dp_abs(i, j) + a(i);
          out.count.data[e] += 1;
        }
    }
  return out;
}

// Runs the backend's forward and backward on the case and holds its dBias to the reference's
// within the bound above. `refused`: the backend's reason when it declined the call (then nothing
// ran); the caller decides whether a refusal is allowed.
inline void expect_dbias_matches_reference(Backend& be, const DbiasCase& dc, std::optional<std::string>* refused = nullptr) {
  SCOPED_TRACE(be.name() + " " + dc.name + " " + std::string(to_string(dc.c.dtype)));
  DbiasCall call = dbias_call(dc.c);
  if (auto why = be.unsupported_reason(call.p)) {
    if (refused) {
      *refused = *why;
    } else {
      ADD_FAILURE() << be.name() << " refused the call: " << *why << "\n" << write_case(dc.c);
    }
    return;
  }
  const Gradients ref = reference_backward(call.p, call.ref, call.d_out, call.d_lse);
  Gradients got;
  try {
    const Forward f = be.forward(call.p);
    got = be.backward(call.p, f, call.d_out, call.d_lse);
  } catch (const std::exception& e) {
    ADD_FAILURE() << be.name() << " threw: " << e.what() << "\n" << write_case(dc.c);
    return;
  }
  ASSERT_EQ(got.dbias.shape, call.p.bias.shape) << "dBias must be shaped like the bias\n" << write_case(dc.c);
  ASSERT_EQ(ref.dbias.shape, call.p.bias.shape);
  const DbiasMagnitudes mags = dbias_magnitude(call, dc.c.dtype);
  const Tensor& m = mags.m;
  const double s = smallest_subnormal(dc.c.dtype);
  double m_max = 0;
  for (double x : m.data) m_max = std::max(m_max, x);
  const double u = unit_roundoff(dc.c.dtype);  // harness/dtype.h
  double worst = 0;  // the largest |error| / bound
  size_t bad = 0;
  std::string first;
  for (size_t e = 0; e < m.numel(); ++e) {
    const double err = std::abs(got.dbias.data[e] - ref.dbias.data[e]);
    const double bound = 8 * u * m.data[e] + 1e-6 * u * m_max + s * (mags.count.data[e] + mags.subnormal_terms.data[e] + 3);
    const double ratio = bound > 0 ? err / bound : (err > 0 ? INFINITY : 0.0);
    if (!(ratio <= 1.0)) {  // NaN included
      if (bad++ < 5)
        first += "\n  element " + std::to_string(e) + ": got " + std::to_string(got.dbias.data[e]) + ", reference " +
                 std::to_string(ref.dbias.data[e]) + ", bound " + std::to_string(bound);
    }
    if (!(ratio <= worst)) worst = ratio;
  }
  EXPECT_EQ(bad, 0u) << bad << " of " << m.numel() << " dBias elements over 8 u M (worst " << worst << " of the bound):" << first << "\n"
                     << write_case(dc.c);
  std::cout << "  " << be.name() << " " << dc.name << " " << to_string(dc.c.dtype) << ": dBias " << m.numel()
            << " elements, worst error " << worst << " of the bound\n";
}

}  // namespace attnfuzz::dbias_test
