#include "campaign/feature_cells.h"

#include <algorithm>

#include "harness/differential.h"

namespace attnfuzz {

namespace {

const char* layout_of(const Case& c) {
  if (c.layouts.inputs != Packing::none || c.layouts.grads != Packing::none) return "packed";
  return c.layouts == Layouts{} ? "dense" : "strided";
}

const char* heads_of(const Case& c) {
  return c.shape.heads_kv == c.shape.heads_q ? "mha" : c.shape.heads_kv == 1 ? "mqa" : "gqa";
}

const char* softcap_of(const Case& c) { return c.softcap ? "yes" : "no"; }

const char* bias_of(const Case& c) { return c.bias ? to_string(c.bias->kind) : "none"; }

const char* dbias_of(const Case& c) { return c.bias && c.bias->requires_grad ? "yes" : "no"; }

// A ragged batch with gaps or a tail (the varlen interfaces' poisoned rows), without, or none.
const char* ragged_of(const Case& c) {
  if (!c.ragged) return "none";
  return c.ragged->gap_q || c.ragged->gap_kv || c.ragged->tail ? "gaps" : "packed";
}

const char* dlse_of(const Case& c) { return c.d_lse.kind == ValueDist::Kind::zero ? "no" : "yes"; }

const char* seq_of(const Case& c) {
  return c.shape.seq_q == c.shape.seq_kv ? "square" : c.shape.seq_q < c.shape.seq_kv ? "wide" : "tall";
}

}  // namespace

const std::vector<CellAxis>& cell_axes() {
  static const std::vector<CellAxis> axes{
      {"dtype", {"fp32", "fp16", "bf16"}},
      {"mask", {"none", "causal", "window", "structured"}},
      {"composition", {"single", "q_split", "merged"}},
      {"head_dim", {"d64", "d128", "d256"}},
  };
  return axes;
}

const std::vector<CaseFeature>& side_features() {
  static const std::vector<CaseFeature> sides{
      {"layout", {"dense", "strided", "packed"}, layout_of}, {"heads", {"mha", "gqa", "mqa"}, heads_of},
      {"softcap", {"no", "yes"}, softcap_of},                {"dlse", {"no", "yes"}, dlse_of},
      {"seq", {"square", "wide", "tall"}, seq_of},                {"bias", {"none", "tensor", "alibi", "relative"}, bias_of},
      {"dbias", {"no", "yes"}, dbias_of},                  {"ragged", {"none", "packed", "gaps"}, ragged_of},
  };
  return sides;
}

std::string cell_of(const Case& c, CompositionClass ran) { return to_string(feature_cell(c, ran)); }

std::string cell_of(const Case& c) { return cell_of(c, composition_class(c.composition)); }

const std::vector<std::string>& all_cells() {
  static const std::vector<std::string> cells = [] {
    std::vector<std::string> out;
    for (const FeatureCell& cell : all_feature_cells()) out.push_back(to_string(cell));
    return out;
  }();
  return cells;
}

std::optional<std::string> cell_outside(const SupportEnvelope& e, bool returns_lse, const std::string& cell) {
  const std::optional<FeatureCell> typed = feature_cell_from_string(cell);
  if (!typed) return "not a cell";
  return cell_outside(e, returns_lse, *typed);
}

}  // namespace attnfuzz
