#include "oracles/torch_oracle.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/version.h>
#include <c10/core/GradMode.h>

#include <limits>

namespace attnfuzz {
namespace {

at::ScalarType scalar_type(DType d) {
  switch (d) {
    case DType::f32: return at::kFloat;
    case DType::f16: return at::kHalf;
    case DType::bf16: return at::kBFloat16;
  }
  return at::kFloat;
}

at::Device device_of(TorchDevice d) { return d == TorchDevice::cuda ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU); }

at::Tensor to_torch(const Tensor& t, at::Device dev) {
  return at::from_blob(const_cast<double*>(t.ptr()), t.shape, at::TensorOptions().dtype(at::kDouble)).clone().to(dev);
}

Tensor from_torch(const at::Tensor& t) {
  at::Tensor c = t.detach().to(at::kCPU, at::kDouble).contiguous();
  Tensor out(std::vector<int64_t>(c.sizes().begin(), c.sizes().end()));
  std::copy(c.data_ptr<double>(), c.data_ptr<double>() + c.numel(), out.ptr());
  return out;
}

// The mask rebuilt from its expression with tensor operations: an implementation of
// the mask algebra independent of harness/mask.cpp, so the two oracles also check the
// masks (alignment, windows, segments, blocks). Random leaves have no closed form and
// take the harness's materialization of that leaf alone.
class TorchMaskBuilder {
 public:
  explicit TorchMaskBuilder(const Problem& p) : p_(p) {
    const auto opts = at::TensorOptions().dtype(at::kLong);
    q_ = (at::arange(p.shape.seq_q, opts) + p.q_offset).view({1, 1, -1, 1});
    kv_ = (at::arange(p.shape.seq_kv, opts) + p.kv_offset).view({1, 1, 1, -1});
  }

  at::Tensor build() const {
    const Shape& s = p_.shape;
    at::Tensor m = p_.mask_expr ? eval(*p_.mask_expr) : at::ones({1, 1, 1, 1}, at::kBool);
    for (const auto& r : p_.restrictions) {
      at::Tensor in = band(r.left, r.right, r.align);
      m = m.logical_and(r.inside ? in : in.logical_not());
    }
    return m.expand({s.batch, s.heads_q, s.seq_q, s.seq_kv}).contiguous();
  }

 private:
  int64_t offset(Align a) const { return a == Align::bottom_right ? p_.full_seq_kv - p_.full_seq_q : 0; }

  at::Tensor band(int64_t left, int64_t right, Align a) const {
    const at::Tensor qa = q_ + offset(a);
    at::Tensor m = at::ones({1, 1, 1, 1}, at::kBool);
    if (left >= 0) m = m.logical_and(kv_.ge(qa - left));
    if (right >= 0) m = m.logical_and(kv_.le(qa + right));
    return m;
  }

  static at::Tensor segment_ids(const std::vector<int64_t>& lengths, const at::Tensor& pos) {
    // Position p lies in segment i iff cumsum[i-1] <= p < cumsum[i]; past the end: -1.
    at::Tensor ends = at::tensor(lengths, at::kLong).cumsum(0);
    at::Tensor id = at::searchsorted(ends, pos.flatten(), /*out_int32=*/false, /*right=*/true);
    id = at::where(id.ge(static_cast<int64_t>(lengths.size())), at::full_like(id, -1), id);
    return id.view(pos.sizes());
  }

  at::Tensor eval(const MaskExpr& m) const {
    using K = MaskExpr::Kind;
    switch (m.kind) {
      case K::all: return at::ones({1, 1, 1, 1}, at::kBool);
      case K::causal: return kv_.le(q_ + offset(m.align));
      case K::sliding_window: return band(m.left, m.right, m.align);
      case K::document: {
        at::Tensor sq = segment_ids(m.segments_q, q_), sk = segment_ids(m.segments_kv, kv_);
        return sq.eq(sk).logical_and(sq.ge(0));
      }
      case K::prefix_lm: return kv_.lt(m.prefix).logical_or(kv_.le(q_ + offset(m.align)));
      case K::block_sparse: {
        std::vector<uint8_t> bits;
        for (const auto& row : m.rows)
          for (char ch : row) bits.push_back(ch == '1');
        at::Tensor grid = at::tensor(at::ArrayRef<uint8_t>(bits), at::kByte).view({static_cast<int64_t>(m.rows.size()), -1}).to(at::kBool);
        return grid.index({at::floor_divide(q_, m.block_q).view({-1, 1}), at::floor_divide(kv_, m.block_kv).view({1, -1})}).view({1, 1, q_.numel(), kv_.numel()});
      }
      case K::random: {
        Problem leaf;
        leaf.shape = p_.shape;
        leaf.mask_expr = &m;
        leaf.q_offset = p_.q_offset;
        leaf.kv_offset = p_.kv_offset;
        leaf.full_seq_q = p_.full_seq_q;
        leaf.full_seq_kv = p_.full_seq_kv;
        materialize_mask(leaf);
        const Shape& s = p_.shape;
        return at::from_blob(leaf.mask.data(), {s.batch, s.heads_q, s.seq_q, s.seq_kv}, at::kByte).to(at::kBool).clone();
      }
      case K::not_: return eval(m.args.at(0)).logical_not();
      case K::and_:
      case K::or_: {
        at::Tensor acc = eval(m.args.at(0));
        for (size_t i = 1; i < m.args.size(); ++i) acc = m.kind == K::and_ ? acc.logical_and(eval(m.args[i])) : acc.logical_or(eval(m.args[i]));
        return acc;
      }
    }
    return {};
  }

  const Problem& p_;
  at::Tensor q_, kv_;
};

class TorchComposedBackend final : public Backend {
 public:
  TorchComposedBackend(TorchPrecision prec, TorchDevice dev) : prec_(prec), dev_(dev) {}

  std::string name() const override {
    return std::string(prec_ == TorchPrecision::float64 ? "torch.f64" : "torch.math") + (dev_ == TorchDevice::cuda ? ".cuda" : "");
  }
  std::string version() const override { return "libtorch-" + torch_version(); }
  std::optional<std::string> unsupported_reason(const Problem&) const override {
    std::string why;
    if (!torch_device_available(dev_, &why)) return why;
    return std::nullopt;
  }

  Forward forward(const Problem& p) override {
    c10::AutoGradMode no_grad(false);
    Graph g = build(p, false);
    return {from_torch(g.o), from_torch(g.lse_out)};
  }

  Gradients backward(const Problem& p, const Forward&, const Tensor& d_out, const Tensor& d_lse) override {
    // Recomputes the forward with autograd on; the backend's own O enters only through the graph.
    Graph g = build(p, true);
    const at::Device dev = device_of(dev_);
    at::Tensor d_o = to_torch(d_out, dev).to(g.o.scalar_type());
    at::Tensor d_l = (to_torch(d_lse, dev).unsqueeze(-1) * g.row_has).to(g.lse_raw.scalar_type());
    auto grads = torch::autograd::grad({g.o, g.lse_raw}, {g.q, g.k, g.v}, {d_o, d_l}, /*retain_graph=*/false,
                                       /*create_graph=*/false, /*allow_unused=*/true);
    auto out = [&](const at::Tensor& gr, const at::Tensor& like) { return from_torch(gr.defined() ? gr : at::zeros_like(like)); };
    return {out(grads[0], g.q), out(grads[1], g.k), out(grads[2], g.v)};
  }

 private:
  struct Graph {
    at::Tensor q, k, v, o, lse_raw, lse_out, row_has;
  };

  Graph build(const Problem& p, bool requires_grad) const {
    const Shape& s = p.shape;
    const at::Device dev = device_of(dev_);
    const bool f64 = prec_ == TorchPrecision::float64;
    const at::ScalarType operand = f64 ? at::kDouble : scalar_type(p.dtype);
    const at::ScalarType accum = f64 ? at::kDouble : at::kFloat;
    Graph g;
    g.q = to_torch(p.q, dev).to(operand).set_requires_grad(requires_grad);
    g.k = to_torch(p.k, dev).to(operand).set_requires_grad(requires_grad);
    g.v = to_torch(p.v, dev).to(operand).set_requires_grad(requires_grad);
    at::Tensor mask = TorchMaskBuilder(p).build().to(dev);
    const int64_t group = s.group();
    at::Tensor k = group > 1 ? g.k.repeat_interleave(group, 1) : g.k;
    at::Tensor v = group > 1 ? g.v.repeat_interleave(group, 1) : g.v;
    // Scores accumulate in `accum` from the (exact) operand values.
    at::Tensor scores = at::matmul(g.q.to(accum), k.to(accum).transpose(-2, -1)) * p.scale;
    if (p.softcap) scores = at::tanh(scores / *p.softcap) * *p.softcap;
    g.row_has = mask.any(-1, /*keepdim=*/true);
    // Fully masked rows keep their finite scores so logsumexp stays finite; their P
    // is zeroed below, which is what keeps NaN out of the gradient.
    at::Tensor filled = scores.masked_fill(mask.logical_not().logical_and(g.row_has), -std::numeric_limits<double>::infinity());
    g.lse_raw = at::logsumexp(filled, -1, /*keepdim=*/true);
    at::Tensor prob = at::exp(filled - g.lse_raw) * g.row_has.to(accum);
    g.o = at::matmul(prob.to(operand), v);
    g.lse_out = at::where(g.row_has, g.lse_raw, at::full_like(g.lse_raw, -std::numeric_limits<double>::infinity())).squeeze(-1);
    return g;
  }

  TorchPrecision prec_;
  TorchDevice dev_;
};

}  // namespace

bool torch_device_available(TorchDevice device, std::string* why) {
  if (device == TorchDevice::cpu) return true;
  if (!at::hasCUDA()) {
    if (why) *why = "LibTorch has no usable CUDA here (no GPU, or a CPU-only build)";
    return false;
  }
  return true;
}

std::string torch_version() { return TORCH_VERSION; }

std::unique_ptr<Backend> make_torch_composed_backend(TorchPrecision precision, TorchDevice device) {
  return std::make_unique<TorchComposedBackend>(precision, device);
}

}  // namespace attnfuzz
