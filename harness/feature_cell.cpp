#include "harness/feature_cell.h"

#include <algorithm>

namespace attnfuzz {

namespace {

constexpr MaskClass kMaskClasses[] = {MaskClass::none, MaskClass::causal, MaskClass::window, MaskClass::structured};
constexpr CompositionClass kCompositionClasses[] = {CompositionClass::single, CompositionClass::q_split, CompositionClass::merged};
constexpr HeadDimClass kHeadDimClasses[] = {HeadDimClass::d64, HeadDimClass::d128, HeadDimClass::d256};
constexpr DType kDTypes[] = {DType::f32, DType::f16, DType::bf16};

template <class T, size_t N>
std::optional<T> named(std::string_view s, const T (&values)[N]) {
  for (T v : values)
    if (s == to_string(v)) return v;
  return std::nullopt;
}

}  // namespace

MaskClass mask_class(const MaskExpr& m) {
  switch (m.kind) {
    case MaskExpr::Kind::all:
      return MaskClass::none;
    case MaskExpr::Kind::causal:
      return MaskClass::causal;
    case MaskExpr::Kind::sliding_window:
      return MaskClass::window;
    default:
      return MaskClass::structured;
  }
}

HeadDimClass head_dim_class(const Shape& s) {
  const int64_t d = std::max(s.head_dim_qk, s.head_dim_v);
  return d <= 64 ? HeadDimClass::d64 : d <= 128 ? HeadDimClass::d128 : HeadDimClass::d256;
}

const char* to_string(MaskClass m) {
  switch (m) {
    case MaskClass::none:
      return "none";
    case MaskClass::causal:
      return "causal";
    case MaskClass::window:
      return "window";
    default:
      return "structured";
  }
}

const char* to_string(HeadDimClass h) { return h == HeadDimClass::d64 ? "d64" : h == HeadDimClass::d128 ? "d128" : "d256"; }

int64_t smallest_head_dim(HeadDimClass h) { return h == HeadDimClass::d64 ? 1 : h == HeadDimClass::d128 ? 65 : 129; }
int64_t largest_head_dim(HeadDimClass h) { return h == HeadDimClass::d64 ? 64 : h == HeadDimClass::d128 ? 128 : 256; }

FeatureCell feature_cell(const Case& c, CompositionClass ran) { return {c.dtype, mask_class(c.mask), ran, head_dim_class(c.shape)}; }

std::string to_string(const FeatureCell& cell) {
  return std::string(to_string(cell.dtype)) + "/" + to_string(cell.mask) + "/" + std::string(to_string(cell.composition)) + "/" +
         to_string(cell.head_dim);
}

std::optional<FeatureCell> feature_cell_from_string(std::string_view s) {
  std::vector<std::string_view> v;
  for (size_t begin = 0, end; begin <= s.size(); begin = end + 1) {
    end = std::min(s.find('/', begin), s.size());
    v.push_back(s.substr(begin, end - begin));
  }
  if (v.size() != 4) return std::nullopt;
  const auto dtype = named(v[0], kDTypes);
  const auto mask = named(v[1], kMaskClasses);
  const auto composition = named(v[2], kCompositionClasses);
  const auto head_dim = named(v[3], kHeadDimClasses);
  if (!dtype || !mask || !composition || !head_dim) return std::nullopt;
  return FeatureCell{*dtype, *mask, *composition, *head_dim};
}

const std::vector<FeatureCell>& all_feature_cells() {
  static const std::vector<FeatureCell> cells = [] {
    std::vector<FeatureCell> out;
    for (DType d : kDTypes)
      for (MaskClass m : kMaskClasses)
        for (CompositionClass c : kCompositionClasses)
          for (HeadDimClass h : kHeadDimClasses) out.push_back({d, m, c, h});
    return out;
  }();
  return cells;
}

std::optional<std::string> cell_outside(const SupportEnvelope& e, bool returns_lse, const FeatureCell& cell) {
  if (!e.takes(cell.dtype)) return "dtype " + std::string(to_string(cell.dtype));
  const bool causal_or_none = e.masks == MaskSupport::causal_or_none;
  if (causal_or_none && cell.mask != MaskClass::none && cell.mask != MaskClass::causal)
    return std::string("mask ") + to_string(cell.mask);
  if (e.max_head_dim < smallest_head_dim(cell.head_dim)) return std::string("head dim ") + to_string(cell.head_dim);
  if (!returns_lse && cell.composition == CompositionClass::merged) return "merged: returns no LSE, so its parts cannot be merged";
  return std::nullopt;
}

}  // namespace attnfuzz
