#pragma once
// The feature map of a campaign (docs/campaigns.md, "Feature map"): which combinations of case
// features each backend was judged on, so that a clean night says what it did not test. A case
// falls in one cell of a small product of features, the map's axes:
//
//   dtype        fp32, fp16, bf16
//   mask         none, causal (either alignment), window, structured (document, prefix-LM,
//                block-sparse, random, combinations)
//   composition  single, q_split, merged (harness/differential.h, composition_class)
//   head_dim     d64 (the larger of Dqk and Dv at most 64), d128 (at most 128), d256 (above)
//
// 3 x 4 x 3 x 3 = 108 cells. Other features are counted one at a time beside it, the sides:
// layout (dense, strided: padding, offsets or a surround; packed), heads (mha, gqa, mqa),
// softcap, dlse (a nonzero upstream dLSE), seq (square, wide: Sq < Skv, tall: Sq > Skv).
#include <optional>
#include <string>
#include <vector>

#include "harness/case.h"
#include "harness/envelope.h"

namespace attnfuzz {

// One feature: its name, its values in display order, and the value of a case.
struct CaseFeature {
  const char* name;
  std::vector<const char*> values;
  const char* (*of)(const Case&);
};
const std::vector<CaseFeature>& cell_axes();
const std::vector<CaseFeature>& side_features();

// A cell: its axes' values joined by '/', in the axes' order ("bf16/causal/merged/d128").
std::string cell_of(const Case& c);
// Every cell, the first axis slowest.
const std::vector<std::string>& all_cells();

// Why a backend with this envelope can take no case of the cell, or nothing where some case of
// it is inside: its dtype, a mask beyond causal, a head dim above the envelope's largest. The
// composition axis is never outside: a backend without an LSE still runs a composition's parts.
std::optional<std::string> cell_outside(const SupportEnvelope& e, const std::string& cell);

}  // namespace attnfuzz
