#include "campaign/feature_cells.h"

#include <algorithm>

#include "harness/differential.h"

namespace attnfuzz {

namespace {

const char* dtype_of(const Case& c) {
  switch (c.dtype) {
    case DType::f16:
      return "fp16";
    case DType::bf16:
      return "bf16";
    default:
      return "fp32";
  }
}

const char* mask_of(const Case& c) {
  switch (c.mask.kind) {
    case MaskExpr::Kind::all:
      return "none";
    case MaskExpr::Kind::causal:
      return "causal";
    case MaskExpr::Kind::sliding_window:
      return "window";
    default:
      return "structured";
  }
}

const char* composition_of(const Case& c) {
  switch (composition_class(c.composition)) {
    case CompositionClass::q_split:
      return "q_split";
    case CompositionClass::merged:
      return "merged";
    default:
      return "single";
  }
}

int64_t head_dim(const Case& c) { return std::max(c.shape.head_dim_qk, c.shape.head_dim_v); }

const char* head_dim_of(const Case& c) { return head_dim(c) <= 64 ? "d64" : head_dim(c) <= 128 ? "d128" : "d256"; }

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

const char* dlse_of(const Case& c) { return c.d_lse.kind == ValueDist::Kind::zero ? "no" : "yes"; }

const char* seq_of(const Case& c) {
  return c.shape.seq_q == c.shape.seq_kv ? "square" : c.shape.seq_q < c.shape.seq_kv ? "wide" : "tall";
}

// The smallest head dim of each head-dim value: a backend whose largest is below it takes none.
int64_t smallest_head_dim(const std::string& value) { return value == "d64" ? 1 : value == "d128" ? 65 : 129; }

}  // namespace

const std::vector<CaseFeature>& cell_axes() {
  static const std::vector<CaseFeature> axes{
      {"dtype", {"fp32", "fp16", "bf16"}, dtype_of},
      {"mask", {"none", "causal", "window", "structured"}, mask_of},
      {"composition", {"single", "q_split", "merged"}, composition_of},
      {"head_dim", {"d64", "d128", "d256"}, head_dim_of},
  };
  return axes;
}

const std::vector<CaseFeature>& side_features() {
  static const std::vector<CaseFeature> sides{
      {"layout", {"dense", "strided", "packed"}, layout_of}, {"heads", {"mha", "gqa", "mqa"}, heads_of},
      {"softcap", {"no", "yes"}, softcap_of},                {"dlse", {"no", "yes"}, dlse_of},
      {"seq", {"square", "wide", "tall"}, seq_of},                {"bias", {"none", "tensor", "alibi", "relative"}, bias_of},
      {"dbias", {"no", "yes"}, dbias_of},
  };
  return sides;
}

std::string cell_of(const Case& c) {
  std::string cell;
  for (const CaseFeature& axis : cell_axes()) cell += (cell.empty() ? "" : "/") + std::string(axis.of(c));
  return cell;
}

const std::vector<std::string>& all_cells() {
  static const std::vector<std::string> cells = [] {
    std::vector<std::string> out{""};
    for (const CaseFeature& axis : cell_axes()) {
      std::vector<std::string> next;
      for (const std::string& prefix : out)
        for (const char* v : axis.values) next.push_back(prefix.empty() ? std::string(v) : prefix + "/" + v);
      out = std::move(next);
    }
    return out;
  }();
  return cells;
}

std::optional<std::string> cell_outside(const SupportEnvelope& e, const std::string& cell) {
  std::vector<std::string> v;
  for (size_t begin = 0, end; begin <= cell.size(); begin = end + 1) {
    end = std::min(cell.find('/', begin), cell.size());
    v.push_back(cell.substr(begin, end - begin));
  }
  if (v.size() != cell_axes().size()) return "not a cell";
  if (!e.takes(dtype_from_string(v[0]))) return "dtype " + v[0];
  if (e.masks == MaskSupport::causal_or_none && v[1] != "none" && v[1] != "causal") return "mask " + v[1];
  if (e.max_head_dim < smallest_head_dim(v[3])) return "head dim " + v[3];
  return std::nullopt;
}

}  // namespace attnfuzz
