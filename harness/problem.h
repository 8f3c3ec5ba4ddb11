#pragma once
// One attention call as a backend sees it: inputs already rounded to the case
// dtype (held exactly in float64), and the mask both as its expression (in the
// whole problem's coordinates, with this call's offsets) and materialized.
#include <algorithm>
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
  // A ragged batch (harness/case.h, Ragged): each sequence's lengths in the whole problem; empty
  // when every sequence is full_seq_q x full_seq_kv. The mask of sequence b is evaluated in its own
  // seq_len_q(b) x seq_len_kv(b) coordinates, and nothing past them is visible.
  std::vector<int64_t> lens_q, lens_kv;
  // How a varlen interface lays the sequences out (Ragged::gap_q, gap_kv, tail): NaN rows between
  // consecutive sequences and after the last one.
  int64_t gap_q = 0, gap_kv = 0, tail = 0;
  // A paged interface's pages of K and V (Ragged::page_size, page_table(ragged, page_seed)); 0: none.
  int64_t page_size = 0;
  uint64_t page_seed = 0;
  // The interfaces' edges (Ragged::max_slack, misaligned): the maxima told past the longest
  // sequence, and packed buffers one element past their alignment.
  int64_t max_slack = 0;
  bool misaligned = false;
  // Materialized: [B][Hq][Sq][Skv], 1 = visible.
  std::vector<uint8_t> mask;
  Tensor q, k, v;  // [B][Hq][Sq][Dqk], [B][Hkv][Skv][Dqk], [B][Hkv][Skv][Dv]
  // The score bias of this call (harness/case.h, ScoreBias), [B|1][Hq|1][Sq|1][Skv|1] over the
  // call's rows and keys: empty when the case has none. bias_requires_grad: the backward returns
  // dBias, shaped like it (ScoreBias::requires_grad; a backend whose envelope has no bias_grad
  // is never handed such a call).
  Tensor bias;
  bool bias_requires_grad = false;

  bool has_bias() const { return !bias.data.empty(); }
  bool ragged() const { return !lens_q.empty(); }
  // Sequence b's lengths in the whole problem.
  // Checked: a problem whose batch outgrew its lengths is the caller's bug (conform_ragged).
  int64_t seq_len_q(int64_t b) const { return ragged() ? lens_q.at(static_cast<size_t>(b)) : full_seq_q; }
  int64_t seq_len_kv(int64_t b) const { return ragged() ? lens_kv.at(static_cast<size_t>(b)) : full_seq_kv; }
  // Sequence b's queries and keys inside this call: always a prefix of the call's rows and keys.
  int64_t call_len_q(int64_t b) const { return std::clamp<int64_t>(seq_len_q(b) - q_offset, 0, shape.seq_q); }
  int64_t call_len_kv(int64_t b) const { return std::clamp<int64_t>(seq_len_kv(b) - kv_offset, 0, shape.seq_kv); }
  // Where bias[b][h][i][j] is in `bias` (and dBias), broadcast over the dimensions of extent 1.
  size_t bias_offset(int64_t b, int64_t h, int64_t i, int64_t j) const {
    const auto& n = bias.shape;
    return static_cast<size_t>((((n[0] > 1 ? b : 0) * n[1] + (n[1] > 1 ? h : 0)) * n[2] + (n[2] > 1 ? i : 0)) * n[3] + (n[3] > 1 ? j : 0));
  }
  double bias_at(int64_t b, int64_t h, int64_t i, int64_t j) const { return bias.data[bias_offset(b, h, i, j)]; }

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
  Tensor dbias;  // shaped like Problem::bias where bias_requires_grad, else empty
  UnwrittenCounts unwritten;
};

// Fills problem.mask from the expression, offsets and restrictions.
void materialize_mask(Problem& p);

// The part of a bias tensor ([B|1][Hq|1][Sq|1][Skv|1]) over rows [q0, q1) and keys [k0, k1):
// the spanned sequence dimensions cut, the broadcast ones kept at extent 1.
Tensor slice_bias(const Tensor& bias, int64_t q0, int64_t q1, int64_t k0, int64_t k1);

}  // namespace attnfuzz
