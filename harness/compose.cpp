#include "harness/compose.h"

#include <algorithm>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>

#include "harness/merge.h"
#include "harness/parallel.h"

namespace attnfuzz {

const Tensor& ComposedResult::operator[](TensorId t) const {
  switch (t) {
    case TensorId::O:
      return fwd.o;
    case TensorId::LSE:
      return fwd.lse;
    case TensorId::dQ:
      return grads.dq;
    case TensorId::dK:
      return grads.dk;
    case TensorId::dV:
      return grads.dv;
    case TensorId::dBias:
      return grads.dbias;
    case TensorId::Q:
    case TensorId::K:
    case TensorId::V:
    case TensorId::dO:
    case TensorId::dLSE:
    case TensorId::mask:
    case TensorId::Bias:
      break;
  }
  throw std::logic_error(std::string("not an output: ") + name_of(t));
}
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

struct Region {
  int64_t q0, q1, k0, k1;
  std::vector<BandRestriction> restrictions;
};

struct Node {
  Region region;
  std::shared_ptr<const Problem> leaf;  // set for a single call over a non-empty region
  std::vector<Node> parts;
  Forward fwd;
};

class Engine {
 public:
  Engine(Backend& be, const Case& c, const Inputs& in, std::vector<CallRecord>* calls, LeafProblems* leaves)
      : be_(be), c_(c), in_(in), records_(calls), leaves_(leaves) {
    const Shape& s = c.shape;
    grads_ = {Tensor({s.batch, s.heads_q, s.seq_q, s.head_dim_qk}), Tensor({s.batch, s.heads_kv, s.seq_kv, s.head_dim_qk}),
              Tensor({s.batch, s.heads_kv, s.seq_kv, s.head_dim_v})};
    if (case_has_output(c, TensorId::dBias)) grads_.dbias = Tensor(c.bias->tensor_shape(s));
  }

  Node forward(const Composition& comp, Region r) {
    Node n;
    n.region = r;
    if (comp.kind == Composition::Kind::single) {
      if (r.q1 <= r.q0) {
        n.fwd = empty_forward(0);
      } else if (r.k1 <= r.k0) {
        n.fwd = empty_forward(r.q1 - r.q0);
      } else {
        n.leaf = leaves_ ? leaves_->get(LeafKey{&in_, r.q0, r.q1, r.k0, r.k1, r.restrictions}, [&] { return make_leaf(r); })
                         : std::make_shared<const Problem>(make_leaf(r));
        std::optional<std::string> why = be_.unsupported_reason(*n.leaf);
        // The always-enforced clauses hold whatever a backend's own check says (harness/envelope.h):
        // a backend that never reads Problem::bias would compute without it, one that never writes
        // Gradients::dbias would leave dBias unjudged, and one that reads the mask's expression
        // would not see a ragged batch's lengths.
        if (!why && (n.leaf->has_bias() || n.leaf->ragged())) {
          const SupportEnvelope e = be_.envelope();
          for (EnvelopeClause clause : {EnvelopeClause::bias, EnvelopeClause::bias_grad, EnvelopeClause::ragged})
            if (!why) why = e.breach(*n.leaf, clause);
        }
        if (why) throw UnsupportedError(be_.name() + " does not support a part: " + *why);
        n.fwd = be_.forward(*n.leaf);
        for (const auto& [t, k] : n.fwd.unwritten) unwritten_fwd_[t] += k;
        if (!be_.masked_rows_zero()) normalize_masked_rows(*n.leaf, n.fwd);
        ++calls_;
      }
      return n;
    }
    std::vector<Region> regions = split(comp, r);
    for (size_t i = 0; i < regions.size(); ++i) n.parts.push_back(forward(child(comp, i), regions[i]));
    if (comp.kind == Composition::Kind::q_split) {
      n.fwd = empty_forward(r.q1 - r.q0);
      n.fwd.lse.data.assign(n.fwd.lse.numel(), 0.0);
      for (const auto& p : n.parts) {
        place_seq(n.fwd.o, p.fwd.o, p.region.q0 - r.q0, false);
        place_seq(n.fwd.lse, p.fwd.lse, p.region.q0 - r.q0, false);
      }
    } else {
      std::vector<Forward> fs;
      for (const auto& p : n.parts) fs.push_back(p.fwd);
      n.fwd = be_.merger() ? be_.merger()->forward(fs) : merge_forward(fs);
    }
    return n;
  }

  void backward(const Composition& comp, const Node& n, const Tensor& d_out, const Tensor& d_lse) {
    const Region& r = n.region;
    if (comp.kind == Composition::Kind::single) {
      if (!n.leaf) return;  // empty region: no gradient
      Gradients g = leaf_backward(*n.leaf, n.fwd, d_out, d_lse);
      if (records_) records_->push_back({*n.leaf, n.fwd, g, d_out, d_lse});
      for (const auto& [t, k] : g.unwritten) grads_.unwritten[t] += k;
      place_seq(grads_.dq, g.dq, r.q0, true);
      place_seq(grads_.dk, g.dk, r.k0, true);
      place_seq(grads_.dv, g.dv, r.k0, true);
      if (n.leaf->bias_requires_grad) add_dbias(g.dbias, *n.leaf);
      return;
    }
    if (comp.kind == Composition::Kind::q_split) {
      for (size_t i = 0; i < n.parts.size(); ++i) {
        const Region& pr = n.parts[i].region;
        backward(child(comp, i), n.parts[i], slice_seq(d_out, pr.q0 - r.q0, pr.q1 - r.q0), slice_seq(d_lse, pr.q0 - r.q0, pr.q1 - r.q0));
      }
      return;
    }
    std::vector<Forward> fs;
    for (const auto& p : n.parts) fs.push_back(p.fwd);
    std::vector<PartGrad> pg = be_.merger() ? be_.merger()->backward(fs, n.fwd, d_out, d_lse) : merge_backward(fs, n.fwd, d_out, d_lse);
    for (size_t i = 0; i < n.parts.size(); ++i) backward(child(comp, i), n.parts[i], pg[i].d_out, pg[i].d_lse);
  }

  // A call's dBias into the case's: its spanned sequence dimensions at the call's rows and keys,
  // its broadcast ones summed (every call of a composition adds its part of the sum of dS).
  void add_dbias(const Tensor& part, const Problem& p) {
    if (part.shape != p.bias.shape)
      throw std::runtime_error(be_.name() + " returned a dBias of the wrong shape (" + std::to_string(part.numel()) + " elements, the bias has " +
                               std::to_string(p.bias.numel()) + ")");
    const auto &n = part.shape, &whole = grads_.dbias.shape;
    const int64_t q0 = whole[2] > 1 ? p.q_offset : 0, k0 = whole[3] > 1 ? p.kv_offset : 0;
    for (int64_t b = 0; b < n[0]; ++b)
      for (int64_t h = 0; h < n[1]; ++h)
        for (int64_t i = 0; i < n[2]; ++i)
          for (int64_t j = 0; j < n[3]; ++j)
            grads_.dbias.data[static_cast<size_t>(((b * whole[1] + h) * whole[2] + i + q0) * whole[3] + j + k0)] +=
                part.data[static_cast<size_t>(((b * n[1] + h) * n[2] + i) * n[3] + j)];
  }

  Gradients take_grads() { return std::move(grads_); }
  const UnwrittenCounts& unwritten_forward() const { return unwritten_fwd_; }
  int calls() const { return calls_; }
  bool dlse_added() const { return dlse_added_; }
  bool masked_rows_normalized() const { return masked_rows_normalized_; }

 private:
  static const Composition& child(const Composition& comp, size_t i) {
    static const Composition kSingle{};
    if (comp.children.empty()) return kSingle;
    return comp.children.size() == 1 ? comp.children[0] : comp.children[i];
  }

  Forward empty_forward(int64_t rows) const {
    const Shape& s = c_.shape;
    return Forward{Tensor({s.batch, s.heads_q, rows, s.head_dim_v}), Tensor({s.batch, s.heads_q, rows}, kNegInf)};
  }

  std::vector<Region> split(const Composition& comp, const Region& r) const {
    std::vector<Region> out;
    if (comp.kind == Composition::Kind::mask_partition) {
      BandRestriction band{comp.window_left, comp.window_right, comp.window_align, true};
      Region local = r, global = r;
      local.restrictions.push_back(band);
      band.inside = false;
      global.restrictions.push_back(band);
      return {local, global};
    }
    const bool on_q = comp.kind == Composition::Kind::q_split;
    const int64_t lo = on_q ? r.q0 : r.k0, hi = on_q ? r.q1 : r.k1;
    std::vector<int64_t> cuts{lo};
    for (int64_t b : comp.bounds) cuts.push_back(std::clamp(b, lo, hi));
    cuts.push_back(hi);
    for (size_t i = 0; i + 1 < cuts.size(); ++i) {
      Region p = r;
      (on_q ? p.q0 : p.k0) = cuts[i];
      (on_q ? p.q1 : p.k1) = std::max(cuts[i], cuts[i + 1]);
      out.push_back(p);
    }
    return out;
  }

  Problem make_leaf(const Region& r) const {
    Problem p = case_problem(c_);
    p.shape.seq_q = r.q1 - r.q0;
    p.shape.seq_kv = r.k1 - r.k0;
    p.q_offset = r.q0;
    p.kv_offset = r.k0;
    p.restrictions = r.restrictions;
    p.q = slice_seq(in_.q, r.q0, r.q1);
    p.k = slice_seq(in_.k, r.k0, r.k1);
    p.v = slice_seq(in_.v, r.k0, r.k1);
    if (c_.bias) p.bias = slice_bias(in_.bias, r.q0, r.q1, r.k0, r.k1);
    materialize_mask(p);
    return p;
  }

  // Calls f(b, h, i) for every row of the call with no visible key.
  template <class F>
  static void for_each_masked_row(const Problem& p, F&& f) {
    const Shape& s = p.shape;
    for (int64_t b = 0; b < s.batch; ++b)
      for (int64_t h = 0; h < s.heads_q; ++h)
        for (int64_t i = 0; i < s.seq_q; ++i) {
          bool any = false;
          for (int64_t j = 0; j < s.seq_kv && !any; ++j) any = p.visible(b, h, i, j);
          if (!any) f(b, h, i);
        }
  }

  // A backend with another fully-masked-row convention (LSE = 0, say) would corrupt a
  // merge; its rows with no visible key get O = 0 and LSE = -inf before merging.
  void normalize_masked_rows(const Problem& p, Forward& f) {
    for_each_masked_row(p, [&](int64_t b, int64_t h, int64_t i) {
      masked_rows_normalized_ = true;
      *f.lse.at(b, h, i) = kNegInf;
      std::fill(f.o.at(b, h, i), f.o.at(b, h, i) + p.shape.head_dim_v, 0.0);
    });
  }

  static bool has_masked_row(const Problem& p) {
    bool any = false;
    for_each_masked_row(p, [&](int64_t, int64_t, int64_t) { any = true; });
    return any;
  }

  // Whether some row with a visible key has a nonzero dLSE.
  static bool dlse_on_rows_with_keys(const Problem& p, const Tensor& d_lse) {
    const Shape& s = p.shape;
    for (int64_t b = 0; b < s.batch; ++b)
      for (int64_t h = 0; h < s.heads_q; ++h)
        for (int64_t i = 0; i < s.seq_q; ++i) {
          if (*d_lse.at(b, h, i) == 0.0) continue;
          for (int64_t j = 0; j < s.seq_kv; ++j)
            if (p.visible(b, h, i, j)) return true;
        }
    return false;
  }

  static void zero_masked_rows(const Problem& p, Tensor& d_out, Tensor& d_lse) {
    for_each_masked_row(p, [&](int64_t b, int64_t h, int64_t i) {
      *d_lse.at(b, h, i) = 0.0;
      std::fill(d_out.at(b, h, i), d_out.at(b, h, i) + p.shape.head_dim_v, 0.0);
    });
  }

  // A backend that ignores dLSE gets the term added here, through two extra calls
  // with V := K:  dQ += scale * g . (P K)  and  dK += scale * P^T (g . Q).
  Gradients leaf_backward(const Problem& p, const Forward& f, const Tensor& d_out_in, const Tensor& d_lse_in) {
    // Under the convention no gradient flows through a row with no visible key. A backend
    // with another convention (a uniform softmax over a finite mask bias, say) would let
    // such a row's dO reach dK and dV, so it gets those rows' upstream gradients as zeros.
    // (Copied only where there are such rows: at real size a copy is tens of megabytes.)
    std::optional<Tensor> zeroed_out, zeroed_lse;
    if (!be_.masked_rows_zero() && has_masked_row(p)) {
      zeroed_out = d_out_in;
      zeroed_lse = d_lse_in;
      zero_masked_rows(p, *zeroed_out, *zeroed_lse);
    }
    const Tensor& d_out = zeroed_out ? *zeroed_out : d_out_in;
    const Tensor& d_lse = zeroed_lse ? *zeroed_lse : d_lse_in;
    // A backend without dLSE gets zeros, whatever it would do with it: the term is added here
    // once. (The baselines run as such a backend through this same engine, so the term is never
    // counted twice.)
    const bool takes_dlse = be_.backward_takes_dlse();
    Gradients g = be_.backward(p, f, d_out, takes_dlse ? d_lse : Tensor(d_lse.shape));
    ++calls_;
    if (takes_dlse) return g;
    const bool any = std::any_of(d_lse.data.begin(), d_lse.data.end(), [](double x) { return x != 0.0; });
    if (!any) return g;
    if (p.softcap) throw UnsupportedError(be_.name() + " ignores dLSE and the case is softcapped: the dLSE term cannot be added exactly");
    // dBias's dLSE term, sum P_ij g_i, needs P itself, which no call of the backend returns. It is
    // 0 where g is 0 on every row that sees a key (a fully masked row's g reaches nothing, and
    // whether such rows' g was zeroed, as for a backend with another convention, changes nothing).
    if (p.bias_requires_grad && dlse_on_rows_with_keys(p, d_lse))
      throw UnsupportedError(be_.name() + " ignores dLSE and the case asks dBias: the dLSE term cannot be added to it");
    dlse_added_ = true;
    const auto make_pk = [&p] {
      Problem pk = p;
      pk.v = p.k;
      pk.shape.head_dim_v = p.shape.head_dim_qk;
      return pk;
    };
    const LeafKey key{&in_, p.q_offset, p.q_offset + p.shape.seq_q, p.kv_offset, p.kv_offset + p.shape.seq_kv, p.restrictions, true};
    const std::shared_ptr<const Problem> pk_leaf = leaves_ ? leaves_->get(key, make_pk) : std::make_shared<const Problem>(make_pk());
    const Problem& pk = *pk_leaf;
    const Forward pk_fwd = be_.forward(pk);  // O' = P K
    const Shape& s = p.shape;
    Tensor g_q(p.q.shape);  // g . Q, the upstream gradient whose dV is P^T (g . Q)
    // Rows over threads at real size: every element is computed on its own.
    const size_t rows = static_cast<size_t>(s.batch * s.heads_q * s.seq_q);
    parallel_for(rows, static_cast<size_t>(s.head_dim_qk), [&](size_t begin, size_t end) {
      for (size_t row = begin; row < end; ++row) {
        const int64_t r = static_cast<int64_t>(row), i = r % s.seq_q, h = (r / s.seq_q) % s.heads_q, b = r / (s.seq_q * s.heads_q);
        const double gi = *d_lse.at(b, h, i);
        for (int64_t d = 0; d < s.head_dim_qk; ++d) {
          g.dq.at(b, h, i)[d] += p.scale * gi * pk_fwd.o.at(b, h, i)[d];
          g_q.at(b, h, i)[d] = gi * p.q.at(b, h, i)[d];
        }
      }
    });
    const Gradients extra = be_.backward(pk, pk_fwd, g_q, Tensor(d_lse.shape));
    calls_ += 2;
    parallel_for(g.dk.numel(), [&](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) g.dk.data[i] += p.scale * extra.dv.data[i];
    });
    return g;
  }

  Backend& be_;
  const Case& c_;
  const Inputs& in_;
  std::vector<CallRecord>* records_;
  LeafProblems* leaves_;
  Gradients grads_;
  UnwrittenCounts unwritten_fwd_;
  int calls_ = 0;
  bool dlse_added_ = false;
  bool masked_rows_normalized_ = false;
};

}  // namespace

ComposedResult run_composition(Backend& backend, const Case& c, const Inputs& in, const Composition& comp, bool record_calls,
                               LeafProblems* leaves) {
  ComposedResult res;
  Engine e(backend, c, in, record_calls ? &res.calls : nullptr, leaves);
  const Region whole{0, c.shape.seq_q, 0, c.shape.seq_kv, {}};
  Node root = e.forward(comp, whole);
  e.backward(comp, root, in.d_out, in.d_lse);
  res.fwd = std::move(root.fwd);
  res.fwd.unwritten = e.unwritten_forward();
  res.grads = e.take_grads();
  res.backend_calls = e.calls();
  res.dlse_added_by_harness = e.dlse_added();
  if (res.dlse_added_by_harness) res.notes.push_back(backend.name() + " ignores dLSE: the harness added the dLSE term");
  if (e.masked_rows_normalized())
    res.notes.push_back("fully masked rows set to O = 0, LSE = -inf by the harness (the backend's convention differs)");
  return res;
}

}  // namespace attnfuzz
