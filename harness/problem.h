#pragma once
// One attention call as a backend sees it: inputs already rounded to the case
// dtype (held exactly in float64), and the mask both as its expression (in the
// whole problem's coordinates, with this call's offsets) and materialized.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "harness/case.h"
#include "harness/tensor.h"
#include "harness/tensors.h"

namespace attnfuzz {

// Extra restriction a composition adds to the case mask: inside (or outside) a band.
struct BandRestriction {
  int64_t left = -1, right = 0;
  Align align = Align::top_left;
  bool inside = true;
  bool operator==(const BandRestriction&) const = default;
};

struct Problem {
  Shape shape;  // of this call (seq_q, seq_kv may be a part of the case's)
  DType dtype = DType::f32;
  Layouts layouts;  // how backends that take raw memory receive each tensor (harness/layout.h)
  double scale = 1.0;
  std::optional<double> softcap;
  // The expression, evaluated at (q + q_offset, kv + kv_offset) in a full_seq_q x full_seq_kv problem.
  const MaskExpr* mask_expr = nullptr;
  int64_t q_offset = 0, kv_offset = 0, full_seq_q = 0, full_seq_kv = 0;
  std::vector<BandRestriction> restrictions;
  // Materialized: [B][Hq][Sq][Skv], 1 = visible.
  std::vector<uint8_t> mask;
  Tensor q, k, v;  // [B][Hq][Sq][Dqk], [B][Hkv][Skv][Dqk], [B][Hkv][Skv][Dv]

  bool visible(int64_t b, int64_t h, int64_t i, int64_t j) const {
    return mask[static_cast<size_t>(((b * shape.heads_q + h) * shape.seq_q + i) * shape.seq_kv + j)] != 0;
  }
};

// Elements a backend left holding the poison the harness wrote before the call, per output.
// Only backends that write into harness memory (plugins, the project's kernels) can report them.
using UnwrittenCounts = std::map<TensorId, size_t>;

struct Forward {
  Tensor o;    // [B][Hq][Sq][Dv]
  Tensor lse;  // [B][Hq][Sq], natural log; -inf on fully masked rows
  UnwrittenCounts unwritten;
};

struct Gradients {
  Tensor dq, dk, dv;
  UnwrittenCounts unwritten;
};

// Fills problem.mask from the expression, offsets and restrictions.
void materialize_mask(Problem& p);

}  // namespace attnfuzz
