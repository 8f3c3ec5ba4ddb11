// LibTorch's fused attention entry points with one backend forced:
//   torch.sdpa.math       at::_scaled_dot_product_attention_math (any device; returns no LSE)
//   torch.sdpa.cpu_flash  at::_scaled_dot_product_flash_attention_for_cpu (+ its backward; returns the LSE)
// Neither backward takes a gradient for the LSE: the composition engine adds that term.
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>
#include <cmath>

#include "oracles/torch_common.h"
#include "backends/torch_sdpa.h"

namespace attnfuzz {
namespace {
using namespace torch_detail;

class TorchSdpaBackend final : public Backend {
 public:
  TorchSdpaBackend(SdpaKind kind, Device dev) : kind_(kind), dev_(dev) {}

  std::string name() const override {
    const char* k = kind_ == SdpaKind::math ? "torch.sdpa.math" : "torch.sdpa.cpu_flash";
    return std::string(k) + (dev_ == Device::cuda ? ".cuda" : "");
  }
  std::string version() const override { return "libtorch-" + torch_version(); }
  Device device() const override { return dev_; }
  // The math path materializes B x Hq x Sq x Skv attention weights and their gradients; the CPU
  // flash kernel works in tiles.
  HostScores host_scores() const override {
    return kind_ == SdpaKind::math && dev_ == Device::cpu ? HostScores::every_head : HostScores::none;
  }
  bool backward_takes_dlse() const override { return false; }
  bool returns_lse() const override { return kind_ != SdpaKind::math; }
  // Measured with LibTorch 2.11 on the CPU: the flash kernel gives fully masked rows O = 0
  // but LSE = 0 (not -inf); the composition engine normalizes them before merging.
  bool masked_rows_zero() const override { return kind_ == SdpaKind::math; }
  // Measured with LibTorch 2.11 on the CPU: for fp16/bf16 inputs the flash kernel's LSE is
  // off by up to 7.3e-5 (absolute) over 2000 random small cases, far above fp32 rounding
  // (an approximate exp in the reduced-precision path); fp32 inputs give fp32 accuracy.
  double lse_unit_roundoff(DType d) const override {
    return kind_ == SdpaKind::cpu_flash && d != DType::f32 ? std::ldexp(1.0, -12) : unit_roundoff(DType::f32);
  }

  // Any dtype, layout and mask (as an additive float mask), a score bias in that mask; no softcap;
  // the CPU flash kernel needs Dqk == Dv. The math path is a graph of differentiable operations,
  // so the mask's gradient is dBias; the CPU flash kernel's backward returns dQ, dK and dV only.
  SupportEnvelope envelope() const override {
    SupportEnvelope e = Backend::envelope();
    e.softcap = false;
    e.bias = true;
    e.ragged = true;  // a ragged batch is its dense mask
    e.bias_grad = kind_ == SdpaKind::math;
    e.distinct_head_dims = kind_ != SdpaKind::cpu_flash;
    return e;
  }
  std::optional<std::string> unsupported_reason(const Problem& p) const override {
    std::string why;
    if (!torch_device_available(dev_, &why)) return why;
    if (kind_ == SdpaKind::cpu_flash && dev_ != Device::cpu) return "the CPU flash kernel runs on the CPU only";
    return Backend::unsupported_reason(p);
  }

  Forward forward(const Problem& p) override {
    return rethrow_plain([&] { return forward_impl(p); });
  }
  Gradients backward(const Problem& p, const Forward& f, const Tensor& d_out, const Tensor& d_lse) override {
    return rethrow_plain([&] { return backward_impl(p, f, d_out, d_lse); });
  }

 private:
  Forward forward_impl(const Problem& p) {
    c10::AutoGradMode no_grad(false);
    Call call = run(p, false);
    Forward f{from_torch(call.out), Tensor({p.shape.batch, p.shape.heads_q, p.shape.seq_q})};
    if (call.lse.defined()) f.lse = from_torch(call.lse);
    return f;
  }

  Gradients backward_impl(const Problem& p, const Forward&, const Tensor& d_out, const Tensor&) {
    const at::Device dev = device_of(dev_);
    Call call = run(p, kind_ == SdpaKind::math);
    at::Tensor d_o = laid_out(p, TensorId::dO, d_out, call.out.scalar_type(), dev);
    at::Tensor dq, dk, dv, dbias;
    if (kind_ == SdpaKind::math) {
      std::vector<at::Tensor> leaves{call.q, call.k, call.v};
      if (p.bias_requires_grad) leaves.push_back(call.bias);
      auto g = torch::autograd::grad({call.out}, leaves, {d_o}, false, false, true);
      dq = g[0];
      dk = g[1];
      dv = g[2];
      if (p.bias_requires_grad) dbias = g[3];
    } else {
      std::tie(dq, dk, dv) = at::_scaled_dot_product_flash_attention_for_cpu_backward(d_o, call.q, call.k_rep, call.v_rep, call.out,
                                                                                      call.lse_raw, 0.0, false, call.mask, p.scale);
      dk = sum_groups(dk, p.shape);
      dv = sum_groups(dv, p.shape);
    }
    auto out = [](const at::Tensor& t, const at::Tensor& like) { return from_torch(t.defined() ? t : at::zeros_like(like)); };
    Gradients r{out(dq, call.q), out(dk, call.k), out(dv, call.v)};
    if (p.bias_requires_grad) r.dbias = dbias_from(dbias, p);
    return r;
  }

  struct Call {
    at::Tensor q, k, v, bias, k_rep, v_rep, mask, out, lse, lse_raw;
  };

  static at::Tensor sum_groups(const at::Tensor& t, const Shape& s) {
    if (s.group() == 1) return t;
    return t.view({s.batch, s.heads_kv, s.group(), t.size(2), t.size(3)}).sum(2);
  }

  Call run(const Problem& p, bool requires_grad) const {
    const at::Device dev = device_of(dev_);
    const at::ScalarType st = scalar_type(p.dtype);
    Call c;
    // The inputs as a caller lays them out (strides, storage offsets, packed views).
    const LaidOutInputs in = laid_out_inputs(p, st, dev);
    c.q = in.q.detach().set_requires_grad(requires_grad);
    c.k = in.k.detach().set_requires_grad(requires_grad);
    c.v = in.v.detach().set_requires_grad(requires_grad);
    at::Tensor mask = TorchMaskBuilder(p).build().to(dev);
    // Additive float mask (0 visible, -inf masked): what at::scaled_dot_product_attention
    // hands its backends after converting a boolean mask.
    // With a score bias: the bias where visible (biased_mask).
    if (p.has_bias()) c.bias = bias_tensor(p, st, dev).set_requires_grad(requires_grad && p.bias_requires_grad);
    c.mask = p.has_bias() ? biased_mask_of(c.bias, mask)
                          : at::zeros(mask.sizes(), at::TensorOptions().dtype(st).device(dev)).masked_fill(mask.logical_not(), -INFINITY);
    if (kind_ == SdpaKind::math) {
      c.out = std::get<0>(at::_scaled_dot_product_attention_math(c.q, c.k, c.v, c.mask, 0.0, false, std::nullopt, p.scale,
                                                                 /*enable_gqa=*/p.shape.group() > 1));
      return c;
    }
    // The CPU flash kernel takes no GQA flag: K and V are repeated per group, dK and dV summed back.
    const int64_t g = p.shape.group();
    c.k_rep = g > 1 ? c.k.repeat_interleave(g, 1) : c.k;
    c.v_rep = g > 1 ? c.v.repeat_interleave(g, 1) : c.v;
    std::tie(c.out, c.lse_raw) = at::_scaled_dot_product_flash_attention_for_cpu(c.q, c.k_rep, c.v_rep, 0.0, false, c.mask, p.scale);
    // The kernel's logsumexp is [B][S][H] or [B][H][S] depending on the version; ours is [B][H][S].
    c.lse = c.lse_raw.size(1) == p.shape.heads_q && c.lse_raw.size(2) == p.shape.seq_q ? c.lse_raw : c.lse_raw.transpose(1, 2);
    return c;
  }

  SdpaKind kind_;
  Device dev_;
};

}  // namespace

std::unique_ptr<Backend> make_torch_sdpa_backend(SdpaKind kind, Device device) {
  return std::make_unique<TorchSdpaBackend>(kind, device);
}

}  // namespace attnfuzz
