#pragma once
// The cell of the feature map (docs/campaigns.md, "Feature map") a backend's run of a case falls
// in: a small product of the case features where kernels take different paths,
//
//   dtype        fp32, fp16, bf16
//   mask         none, causal (either alignment), window, structured (document, prefix-LM,
//                block-sparse, random, combinations)
//   composition  single, q_split, merged: the composition the backend ran the case through
//                (harness/verdict.h, CompositionClass). A composed case is also run as one call
//                (DiffOptions::include_single), so one case can be judged in two cells.
//   head_dim     d64 (the larger of Dqk and Dv at most 64), d128 (at most 128), d256 (above)
//
// 3 x 4 x 3 x 3 = 108 cells. Types here; the names (a cell as "bf16/causal/merged/d128") are for
// summary.json and the report (campaign/feature_cells.h).
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "harness/case.h"
#include "harness/envelope.h"
#include "harness/verdict.h"

namespace attnfuzz {

enum class MaskClass { none, causal, window, structured };
enum class HeadDimClass { d64, d128, d256 };

struct FeatureCell {
  DType dtype = DType::f32;
  MaskClass mask = MaskClass::none;
  CompositionClass composition = CompositionClass::single;
  HeadDimClass head_dim = HeadDimClass::d64;
  bool operator==(const FeatureCell&) const = default;
};

MaskClass mask_class(const MaskExpr& m);
HeadDimClass head_dim_class(const Shape& s);
const char* to_string(MaskClass m);
const char* to_string(HeadDimClass h);
// The smallest and largest head dim (the larger of Dqk and Dv) of a class; d256's largest is 256.
int64_t smallest_head_dim(HeadDimClass h);
int64_t largest_head_dim(HeadDimClass h);

// The cell of case c run through a composition of class `ran` (single or the case's own).
FeatureCell feature_cell(const Case& c, CompositionClass ran);
// "bf16/causal/merged/d128", and back (nothing for anything else).
std::string to_string(const FeatureCell& cell);
std::optional<FeatureCell> feature_cell_from_string(std::string_view s);
// Every cell, dtype slowest, then mask, composition, head dim.
const std::vector<FeatureCell>& all_feature_cells();

// Why no case of the cell runs inside envelope e through a composition of the cell's class (every
// call of that composition inside), or nothing where some case does:
//   dtype        e does not take it
//   mask         e takes causal or none (MaskSupport::causal_or_none) and the cell's is another
//   head dim     the class's smallest is above e's largest
//   merged       the backend returns no LSE (Backend::returns_lse), so its parts cannot be merged
// The envelope never rules a composition out: a split of a case inside is inside, and where e takes
// causal only on square calls, a tall top-left causal case cut at Skv is (generators/envelope_cases.h,
// case_in_cell). tests/test_envelope.cpp holds both directions: no composition whose calls are all
// inside falls in a cell named here, and case_in_cell builds a case for every other cell.
std::optional<std::string> cell_outside(const SupportEnvelope& e, bool returns_lse, const FeatureCell& cell);

}  // namespace attnfuzz
