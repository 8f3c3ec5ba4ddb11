#pragma once
// The feature map of a campaign (docs/campaigns.md, "Feature map"): which combinations of case
// features each backend was judged on, so that a clean night says what it did not test. Its cells
// are harness/feature_cell.h's, here by name, as summary.json and the report write them. Other
// features are counted one at a time beside the cells, the sides: layout (dense, strided: padding,
// offsets or a surround; packed), heads (mha, gqa, mqa), softcap, dlse (a nonzero upstream dLSE),
// seq (square, wide: Sq < Skv, tall: Sq > Skv), bias (none, tensor, alibi, relative), dbias.
#include <optional>
#include <string>
#include <vector>

#include "harness/case.h"
#include "harness/envelope.h"
#include "harness/feature_cell.h"

namespace attnfuzz {

// An axis of the cells: its name and its values' names, in display order.
struct CellAxis {
  const char* name;
  std::vector<const char*> values;
};
const std::vector<CellAxis>& cell_axes();

// A side feature: its name, its values in display order, and the value of a case.
struct CaseFeature {
  const char* name;
  std::vector<const char*> values;
  const char* (*of)(const Case&);
};
const std::vector<CaseFeature>& side_features();

// The cell of case c run through a composition of class `ran`, by name ("bf16/causal/merged/d128").
std::string cell_of(const Case& c, CompositionClass ran);
// The cell of the case's own composition.
std::string cell_of(const Case& c);
// Every cell by name, the first axis slowest.
const std::vector<std::string>& all_cells();

// harness/feature_cell.h's cell_outside for a cell by name ("not a cell" for any other string).
std::optional<std::string> cell_outside(const SupportEnvelope& e, bool returns_lse, const std::string& cell);

}  // namespace attnfuzz
