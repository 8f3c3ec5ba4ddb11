#pragma once
// Deterministic inputs: element i of tensor t is f(case seed, t, i) through the
// counter-based RNG, then rounded to the case dtype. Identical on every device
// and in every replay.
#include <cstdint>

#include "harness/case.h"
#include "harness/problem.h"
#include "harness/tensor.h"
#include "harness/tensors.h"

namespace attnfuzz {

struct Inputs {
  Tensor q, k, v, d_out, d_lse;
  Tensor bias;  // the score bias as backends receive it (ScoreBias::tensor_shape); empty when none
};

// Value of element `index` of tensor `id` (Q, K, V, dO or dLSE: its draw stream,
// harness/tensors.def) before rounding to the dtype; `row_length` is the tensor's innermost
// dimension (1 for dLSE), which the row kinds (row_shift, sparse_rows) read.
double draw_value(const ValueDist& d, uint64_t seed, TensorId id, uint64_t index, uint64_t row_length);
Inputs generate_inputs(const Case& c);
// The case's bias tensor (harness/case.h, ScoreBias), rounded to the case dtype.
Tensor generate_bias(const Case& c);
// FNV-1a over the bit patterns of every input (the bias after the others, where there is one), in a fixed order: a reproducer
// records it and replay refuses to judge inputs that differ.
uint64_t checksum(const Inputs& in);
// What every call of the case shares, from the case alone: shape, dtype, layouts, scale,
// softcap, the mask expression, the case's full lengths and whether the bias needs its gradient.
// A call adds its tensors, its offsets and lengths, and materializes its mask (full_problem, and
// the composition engine's parts: harness/compose.cpp).
Problem case_problem(const Case& c);
// The whole case as one call: inputs, scale, softcap and the materialized mask.
Problem full_problem(const Case& c, const Inputs& in);

// Non-finite inputs (docs/semantics.md, "Non-finite inputs"). An output can depend on a NaN or an
// infinity in Q, K, V or dO only within the (batch, query head) it sits in, and through a GQA group's
// shared K and V: those heads' outputs are unspecified and left out of the verdict; every other
// element must be what the finite problem gives. The oracles compute with finite_part (each
// non-finite element replaced by 0), the backends with the inputs as drawn.
bool has_nonfinite(const Inputs& in);
Inputs finite_part(const Inputs& in);
// One flag per row of output t (every dimension but the last; for dBias, of the bias's shape): 1
// where the row sits in a head that a non-finite input reaches. `across_batch`: for a backend that
// computes the batch as one sequence of documents (Backend::mixes_batch_entries), a head that a
// non-finite input reaches in any batch entry is reached in all of them.
std::vector<uint8_t> rows_reached_by_nonfinite(const Case& c, const Inputs& in, TensorId t, bool across_batch = false);

}  // namespace attnfuzz
