#pragma once
// The composition engine: evaluates a Case's composition tree with one backend
// at every leaf, forward and backward. Parts over disjoint keys are merged through
// their LSEs (harness/merge.h); query parts are concatenated. The result is
// comparable with the single call over the whole problem: equality of the two is
// the metamorphic relation that exposes LSE-gradient bugs (docs/semantics.md,
// "The metamorphic relation"; the dLSE adapter: "The dLSE adapter").
#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "harness/backend.h"
#include "harness/case.h"
#include "harness/error_model.h"
#include "harness/inputs.h"

namespace attnfuzz {

// A backend said it cannot run a part of the composition (with its reason).
class UnsupportedError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One backend call of a composition, as it ran: its problem (rows q_offset.. and keys
// kv_offset.. of the case), its outputs and the upstream gradients it was given.
struct CallRecord {
  Problem problem;
  Forward fwd;
  Gradients grads;
  Tensor d_out, d_lse;
};

struct ComposedResult {
  Forward fwd;
  Gradients grads;
  int backend_calls = 0;
  bool dlse_added_by_harness = false;  // the backend ignores dLSE; the engine added the term
  std::vector<std::string> notes;
  std::vector<CallRecord> calls;  // only when asked for (run_composition's record_calls)

  // The output `t` (one of kOutputs, harness/tensors.h).
  const Tensor& operator[](TensorId t) const;
};

// Whether the case has output t: every output but dBias, which only a bias that requires a
// gradient has (harness/case.h, ScoreBias::requires_grad).
inline bool case_has_output(const Case& c, TensorId t) { return t != TensorId::dBias || (c.bias && c.bias->requires_grad); }

// The leaf problems of one case's compositions (a leaf: one backend call's Problem, with its
// slices of Q, K, V and the bias and its materialized mask), each made on its first request and
// shared by every later run through the same leaf. The backends and the baselines of a case call
// the same leaves, and making a real-size one costs more than a GPU kernel's call. One case only
// (the key is the inputs and the leaf's rows, keys and restrictions); one thread.
struct LeafKey {
  const Inputs* inputs = nullptr;
  int64_t q0 = 0, q1 = 0, k0 = 0, k1 = 0;
  std::vector<BandRestriction> restrictions;
  bool v_is_k = false;  // the dLSE adapter's call: V := K (harness/compose.cpp, leaf_backward)
  bool operator==(const LeafKey&) const = default;
};
class LeafProblems {
 public:
  // A leaf of more bytes than this is made for its run alone: a case keeps every leaf of every
  // composition at once, which at the largest real-tier sizes would be several times the memory a
  // run holds (the host-memory budget, harness/case.h, counts one run's).
  static constexpr size_t kMaxKeptLeafBytes = size_t{256} << 20;

  template <class Make>
  std::shared_ptr<const Problem> get(const LeafKey& key, Make&& make) {
    for (const auto& [k, leaf] : leaves_)
      if (k == key) return leaf;
    auto leaf = std::make_shared<const Problem>(make());
    const size_t bytes = leaf->mask.size() + sizeof(double) * (leaf->q.numel() + leaf->k.numel() + leaf->v.numel() + leaf->bias.numel());
    if (bytes <= kMaxKeptLeafBytes) leaves_.emplace_back(key, leaf);
    return leaf;
  }

 private:
  std::vector<std::pair<LeafKey, std::shared_ptr<const Problem>>> leaves_;  // a case has a few dozen at most
};

// Throws UnsupportedError when a leaf is not supported by the backend (with its reason);
// whatever a backend throws otherwise passes through. `record_calls` keeps every leaf call
// (the error model of a composition is evaluated per call: harness/error_model.h).
// `leaves`: where the case's leaf problems are kept between runs (none: made for this run alone).
ComposedResult run_composition(Backend& backend, const Case& c, const Inputs& in, const Composition& comp, bool record_calls = false,
                               LeafProblems* leaves = nullptr);
inline ComposedResult run_composition(Backend& backend, const Case& c, const Inputs& in) {
  return run_composition(backend, c, in, c.composition);
}

}  // namespace attnfuzz
