#include "campaign/composition_calls.h"

#include "harness/backend.h"
#include "harness/compose.h"
#include "harness/inputs.h"

namespace attnfuzz {
namespace {

// Computes nothing (zero outputs, a finite LSE so merges stay finite); notes what every call
// it is given looks like.
class ProbeBackend final : public Backend {
 public:
  std::string name() const override { return "composition-probe"; }
  // It reads the dense mask, which holds a ragged batch's lengths: it takes one, as the
  // reference does (the clause is always enforced, so without this a ragged case's report fails).
  SupportEnvelope envelope() const override {
    SupportEnvelope e = Backend::envelope();
    e.ragged = true;
    return e;
  }

  Forward forward(const Problem& p) override {
    const Shape& s = p.shape;
    CompositionCall call{s, false};
    for (int64_t b = 0; b < s.batch && !call.masked_row; ++b)
      for (int64_t h = 0; h < s.heads_q && !call.masked_row; ++h)
        for (int64_t i = 0; i < s.seq_q && !call.masked_row; ++i) {
          bool any = false;
          for (int64_t j = 0; j < s.seq_kv && !any; ++j) any = p.visible(b, h, i, j);
          call.masked_row = !any;
        }
    calls_.push_back(call);
    return Forward{Tensor({s.batch, s.heads_q, s.seq_q, s.head_dim_v}), Tensor({s.batch, s.heads_q, s.seq_q})};
  }

  Gradients backward(const Problem& p, const Forward&, const Tensor&, const Tensor&) override {
    return Gradients{Tensor(p.q.shape), Tensor(p.k.shape), Tensor(p.v.shape)};
  }

  std::vector<CompositionCall> calls_;
};

}  // namespace

std::vector<CompositionCall> composition_calls(const Case& c) {
  // The probe reads shapes and masks only: zero inputs of the right shapes spare the RNG.
  const Shape& s = c.shape;
  Inputs zeros{Tensor({s.batch, s.heads_q, s.seq_q, s.head_dim_qk}), Tensor({s.batch, s.heads_kv, s.seq_kv, s.head_dim_qk}),
               Tensor({s.batch, s.heads_kv, s.seq_kv, s.head_dim_v}), Tensor({s.batch, s.heads_q, s.seq_q, s.head_dim_v}),
               Tensor({s.batch, s.heads_q, s.seq_q})};
  // Nor does it read a bias: without one, its calls are those of the case (a bias changes no
  // call's shape or mask), and no bias clause refuses the probe.
  Case shapes_only = c;
  shapes_only.bias.reset();
  ProbeBackend probe;
  run_composition(probe, shapes_only, zeros);
  return probe.calls_;
}

}  // namespace attnfuzz
