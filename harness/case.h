#pragma once
// The Case: a complete, serializable description of one attention problem
// (docs/semantics.md, "The problem space"). Everything a backend computes, and every
// input value, follows from a Case alone.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "harness/dtype.h"
#include "harness/layout.h"
#include "harness/mask.h"

namespace attnfuzz {

inline constexpr const char* kCaseFormat = "attnfuzz-case/1";

struct Shape {
  int64_t batch = 1, heads_q = 1, heads_kv = 1, seq_q = 1, seq_kv = 1, head_dim_qk = 16, head_dim_v = 16;
  int64_t group() const { return heads_q / heads_kv; }
  bool operator==(const Shape&) const = default;
};

struct ValueDist {
  enum class Kind {
    normal,         // mean + sigma * N(0, 1)
    uniform,        // mean + sigma * U(-1, 1)
    large_logit,    // normal with a large sigma: saturated softmax
    near_constant,  // mean + sigma * N(0, 1) with tiny sigma (0 gives exact ties)
    outliers,       // normal, but a `fraction` of elements are +-magnitude
    zero,           // all zeros (the natural dLSE)
  };
  Kind kind = Kind::normal;
  double mean = 0.0, sigma = 1.0, fraction = 0.0, magnitude = 0.0;
  bool operator==(const ValueDist&) const = default;
};

// How the result is computed from backend calls (docs/semantics.md, "Compositions").
struct Composition {
  enum class Kind {
    single,          // one call over the whole problem
    kv_split,        // keys cut at `bounds`, parts merged through their LSEs
    q_split,         // queries cut at `bounds`, parts concatenated
    mask_partition,  // the mask cut into a band (window) and the rest, merged through LSEs
  };
  Kind kind = Kind::single;
  std::vector<int64_t> bounds;                // kv_split / q_split: interior cut points, strictly increasing
  int64_t window_left = 0, window_right = 0;  // mask_partition: the local band (-1 = unbounded)
  Align window_align = Align::top_left;
  // Sub-compositions: none (every part a single call), one (applied to every part)
  // or one per part (kv/q split: bounds.size() + 1; mask_partition: local, global).
  std::vector<Composition> children;
  bool operator==(const Composition&) const = default;
};

struct Case {
  uint64_t seed = 0;
  Shape shape;
  DType dtype = DType::f32;
  Layouts layouts;                // per tensor, how it is laid out in memory handed to a backend (harness/layout.h)
  std::optional<double> scale;    // default 1/sqrt(head_dim_qk)
  std::optional<double> softcap;  // S = c * tanh(S / c)
  MaskExpr mask;
  ValueDist q, k, v;
  ValueDist d_out;
  ValueDist d_lse{ValueDist::Kind::zero};
  Composition composition;
  bool operator==(const Case&) const = default;

  double effective_scale() const;
};

struct Limits {
  // Upper bound on the bytes a run of this case may allocate on the host
  // (float64 tensors, the dense mask, per-head score matrices, all backends' outputs).
  uint64_t memory_budget_bytes = uint64_t{8} << 30;
};

// Fixed limits on what one case may ask for (docs/case-format.md, "Limits"), so that a small
// file cannot demand unbounded time: the mask is evaluated at every (q, kv) of every call, and
// a nested composition multiplies its calls.
inline constexpr uint64_t kMaxMaskSize = 4096;                        // mask nodes plus document segments
inline constexpr int kMaxMaskDepth = 17;                              // a leaf is 1: 16 levels of nesting below the root
inline constexpr uint64_t kMaxLeafCalls = 4096;                       // backend calls of one pass over the composition
inline constexpr uint64_t kCompositionWorkFactor = 64;                // its work, relative to the single call's,
inline constexpr uint64_t kCompositionWorkFloor = uint64_t{1} << 26;  // or this much, whichever is larger

// What evaluating a composition costs, computed without running it. Work is counted in
// multiply-adds: sum over calls of B Hq rows cols (Dqk + Dv), plus B Hq rows (Dv + 1) for every
// node (each part's O and LSE are allocated, merged or placed, even for an empty part). Bytes
// are what the evaluation keeps alive at once: every node's O and LSE, every call's inputs and
// dense mask. leaf_calls saturates at UINT64_MAX; work and bytes are only walked when
// leaf_calls <= kMaxLeafCalls (UINT64_MAX otherwise).
struct CompositionCost {
  uint64_t leaf_calls = 0, work = 0, bytes = 0;
};
CompositionCost composition_cost(const Case& c, const Composition& comp);

// Throws CaseError (one line: field and reason) when the case cannot run. Checks the limits
// above and the memory estimate before anything is allocated.
void validate(const Case& c, const Limits& limits = {});
// Bytes a run needs on the host (the composition's included), saturating at UINT64_MAX.
uint64_t estimate_host_bytes(const Case& c);

std::string to_string(Composition::Kind k);
std::string to_string(ValueDist::Kind k);
std::string describe(const Composition& c);
std::string describe_shape(const Shape& s);

}  // namespace attnfuzz
