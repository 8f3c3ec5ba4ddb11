#pragma once
// A seeded random source of valid Cases covering every field: all mask kinds and
// their combinations, GQA/MQA, softcap, Dqk != Dv, value distributions, dLSE and
// compositions. Deterministic for a given seed. (The RapidCheck domains with
// shrinking build on the same choices.)
#include <cstdint>
#include <vector>

#include "harness/case.h"

namespace attnfuzz {

struct RandomCaseOptions {
  int64_t max_batch = 2, max_heads_kv = 2, max_group = 3;
  int64_t max_seq = 24, max_dim = 16;
  std::vector<DType> dtypes{DType::f32, DType::f16, DType::bf16};
  double p_softcap = 0.2, p_dlse = 0.6, p_composition = 0.5;
};

class SplitMix {
 public:
  explicit SplitMix(uint64_t seed) : s_(seed) {}
  uint64_t next();
  int64_t range(int64_t lo, int64_t hi);  // inclusive
  double unit();                          // [0, 1)
  bool chance(double p) { return unit() < p; }
  template <class T>
  const T& pick(const std::vector<T>& v) { return v[static_cast<size_t>(range(0, static_cast<int64_t>(v.size()) - 1))]; }

 private:
  uint64_t s_;
};

MaskExpr random_mask(SplitMix& r, int64_t sq, int64_t skv, int depth = 0);
Composition random_composition(SplitMix& r, int64_t sq, int64_t skv, int depth = 0);
Case random_case(uint64_t seed, const RandomCaseOptions& opt = {});

}  // namespace attnfuzz
