#pragma once
// What the gpu-labelled tests share: they skip, visibly and with the reason, where the
// project's CUDA kernels cannot run; the cases with a score bias they all hold to their bounds.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "harness/case.h"
#include "oracles/gpu_oracles.h"

#define REQUIRE_GPU()                                                                 \
  do {                                                                                \
    std::string why_;                                                                 \
    if (!attnfuzz::cuda_kernels_available(&why_)) GTEST_SKIP() << "no GPU: " << why_; \
  } while (0)

namespace attnfuzz::gpu_test {

// Every kind of score bias and every broadcast pattern of a dense one (the 16 subsets of
// batch, heads, q, kv it spans), with the values random_bias draws (ordinary, saturating,
// mask-like at -1e4 and +1e4), over masks, GQA, Dqk != Dv, a softcap and every dtype.
inline std::vector<Case> bias_cases() {
  std::vector<Case> out;
  const Shape shapes[] = {{2, 4, 2, 70, 130, 32, 48}, {3, 3, 3, 129, 65, 64, 64}, {2, 2, 1, 33, 96, 16, 24}};
  const DType dtypes[] = {DType::f32, DType::bf16, DType::f16};
  const ValueDist values[] = {ValueDist{ValueDist::Kind::normal, 0.0, 1.0}, ValueDist{ValueDist::Kind::normal, 0.0, 6.0},
                              ValueDist{ValueDist::Kind::outliers, 0.0, 0.5, 0.2, -1e4},
                              ValueDist{ValueDist::Kind::outliers, 0.0, 0.5, 0.1, 1e4}};
  const MaskExpr masks[] = {MaskExpr::all_visible(), MaskExpr::causal_mask(Align::bottom_right), MaskExpr::window(20, 5, Align::top_left),
                            MaskExpr::causal_mask(Align::top_left)};
  for (int pattern = 0; pattern < 16; ++pattern) {
    Case c;
    c.seed = 300 + static_cast<uint64_t>(pattern);
    c.shape = shapes[pattern % 3];
    c.dtype = dtypes[(pattern / 3) % 3];
    c.d_lse = ValueDist{};
    c.mask = masks[pattern % 4];
    if (pattern % 5 == 1) c.softcap = 4.0;
    ScoreBias b;
    b.spans = {(pattern & 1) != 0, (pattern & 2) != 0, (pattern & 4) != 0, (pattern & 8) != 0};
    b.values = values[(pattern / 4 + pattern) % 4];
    c.bias = b;
    out.push_back(c);
  }
  {  // ALiBi, GQA, bottom-right causal with Sq < Skv, a softcap
    Case c;
    c.seed = 320;
    c.shape = {2, 8, 2, 90, 150, 64, 32};
    c.dtype = DType::bf16;
    c.d_lse = ValueDist{};
    c.mask = MaskExpr::causal_mask(Align::bottom_right);
    c.softcap = 10.0;
    c.bias = ScoreBias{ScoreBias::Kind::alibi};
    out.push_back(c);
  }
  {  // ALiBi over a random per-head mask (fully masked rows)
    Case c;
    c.seed = 321;
    c.shape = {1, 4, 4, 100, 70, 40, 40};
    c.dtype = DType::f16;
    c.mask.kind = MaskExpr::Kind::random;
    c.mask.density = 0.1;
    c.mask.seed = 9;
    c.bias = ScoreBias{ScoreBias::Kind::alibi};
    out.push_back(c);
  }
  {  // a relative-position table, saturating, MQA
    Case c;
    c.seed = 322;
    c.shape = {2, 3, 1, 130, 130, 32, 64};
    c.dtype = DType::f32;
    c.d_lse = ValueDist{};
    ScoreBias b{ScoreBias::Kind::relative};
    b.values = ValueDist{ValueDist::Kind::normal, 0.0, 5.0};
    c.bias = b;
    out.push_back(c);
  }
  {  // a relative-position table, mask-like, varlen documents, a softcap
    Case c;
    c.seed = 323;
    c.shape = {1, 2, 2, 100, 90, 32, 48};
    c.dtype = DType::bf16;
    c.mask.kind = MaskExpr::Kind::document;
    c.mask.segments_q = {30, 40, 30};
    c.mask.segments_kv = {20, 0, 70};
    c.softcap = 3.0;
    ScoreBias b{ScoreBias::Kind::relative};
    b.values = ValueDist{ValueDist::Kind::outliers, 0.0, 1.0, 0.3, -1e4};
    c.bias = b;
    out.push_back(c);
  }
  return out;
}

}  // namespace attnfuzz::gpu_test
