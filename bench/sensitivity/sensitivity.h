#pragma once
// Measured sensitivity of the verdict (issue: "a rule is only as good as its measured
// sensitivity"): plant a controlled error of relative size delta into a correct kernel's
// outputs and find the smallest delta the harness flags, next to the kernel's natural
// error. docs/verdicts.md holds the table; tests/test_sensitivity.cpp keeps a small grid
// under the goal (threshold <= 8x the natural error).
#include <optional>
#include <string>
#include <vector>

#include "harness/backend.h"
#include "harness/differential.h"
#include "harness/error_model.h"

namespace attnfuzz {

// The planted errors. Output-confined ones act on one output tensor; `dlse` and
// `softmax_scale` change the computation (every output they reach).
enum class Plant {
  scale,          // x *= 1 + delta everywhere
  noise,          // x *= 1 + delta * N(0, 1), independent per element
  row,            // x *= 1 + delta on one row (b0, last head, middle query/key)
  tile,           // x *= 1 + delta on one 16 x 16 tile (last head, middle rows, first 16 columns)
  head,           // x *= 1 + delta on one head (the last)
  lse_shift,      // LSE += delta (absolute)
  dlse,           // the backward's dLSE term scaled by 1 - delta
  softmax_scale,  // the softmax scale off by a relative delta
  bias_scale,     // the score bias off by a relative delta (cases with a bias)
};
const char* to_string(Plant p);
// The plants that apply to output t (dlse and softmax_scale are reported under "any").
std::vector<Plant> plants_for(TensorId t);

struct SensitivityConfig {
  DType dtype = DType::bf16;
  int64_t seq = 64, dim = 64, heads = 2;
  // Query heads per key-value head (GQA): heads key-value heads, heads * group query heads. dK and
  // dV then sum over the group, and the plants on them touch a key-value head's rows.
  int64_t group = 1;
  bool causal = true;
  uint64_t seed = 1;
  // Q, K and V with 5% outliers of this magnitude (0: normal values): logits of 50-70, whose
  // probabilities reach fp16's subnormal range (harness/error_model.h, "subnormal").
  double outliers = 0;
  // Tied keys (harness/error_model.h): every K row ("k"), every V row ("v") or both ("kv") the
  // same vector, the generator's exactly constant draw (near_constant, mean 0.1, sigma 0); empty:
  // K and V drawn as above.
  std::string tied;
  // V near constant (mean 0.1, this sigma; 0: as above): O rows of near-equal elements, whose
  // stored rounding is one number along the row (harness/error_model.h, storage_sources).
  double near_constant_v = 0;
  // Rows whose scores all sit far below zero: Q's column 0 at -shifted in half the rows, K's at
  // +shifted in every row (the generator's row_shift); 0: none.
  double shifted = 0;
  // A score bias (harness/case.h): the bias_scale plant is measured, and every other plant with
  // the bias present. The correct backend must take one (torch.math; mutant_ok does not).
  std::optional<ScoreBias> bias;
  // A ragged batch (harness/case.h): two sequences, B = 2, the first with 3/4 of the queries and
  // 7/8 of the keys (the plants' rows and tile fall inside it), the second with S/2 + 1 queries on
  // every key; the mask each sequence's own (causal: its own bottom-right diagonal). The padding
  // rows are exact (fully masked): what this measures is whether they loosen the bound. The correct
  // backend must take one (torch.math; the plugins do not).
  bool ragged = false;
  // With `ragged`: K and V in pages of this size for a paged interface (Ragged::page_size; 0: none).
  int64_t page_size = 0;
  // The decode step (the decode tier): this many queries (1 to 16) against `seq` keys; with
  // `ragged` the sequences get seq_q and seq_q / 2 + 1 queries. 0: seq queries.
  int64_t seq_q = 0;
};

// The ratio compares the planted error with the natural error in the same units. For an
// output plant the planted error is delta itself (a relative error of the tensor, or of the
// row, tile or head it touches; the LSE shift: absolute). A computation plant's delta is not an
// error of any output (the dLSE term is a part of dQ and dK; the softmax scale moves the
// outputs through exp), so its planted error is the relative change it makes to the output it
// moves most against that output's own natural error, at the threshold.
struct SensitivityPoint {
  std::string tensor;  // O, LSE, dQ, dK, dV, or "any" for dlse / softmax_scale
  Plant plant = Plant::scale;
  double natural = 0;          // the correct kernel's relative error of `tensor` (LSE shift: its RMS error; "any": of `moved`)
  double threshold = 0;        // the smallest delta flagged (within the search's resolution), or 0 if none up to the cap
  double planted = 0;          // the planted error at the threshold, in natural's units (output plants: the threshold)
  std::string moved;           // dlse / softmax_scale: the output the plant moves most against its natural error
  bool correct_passes = true;  // the unperturbed kernel passes this tensor
  double ratio() const { return natural > 0 && planted > 0 ? planted / natural : 0; }
};

// Measures every plant on every output for one configuration. `correct` must be a correct
// backend that takes dLSE (the mutant zoo's mutant_ok).
std::vector<SensitivityPoint> measure_sensitivity(const SensitivityConfig& cfg, Backend& correct, const OracleSet& oracles,
                                                  const ToleranceRule& rule = {});

// The case the configuration describes: B=1, causal (bottom-right) or not, normal values (or
// outliers), dLSE normal, the configuration's bias.
Case sensitivity_case(const SensitivityConfig& cfg);

}  // namespace attnfuzz
