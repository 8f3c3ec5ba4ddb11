#include "oracles/torch_oracle.h"

#include <ATen/Parallel.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/version.h>

#include "oracles/torch_common.h"
#include "oracles/torch_cuda_loader.h"

#include <limits>

namespace attnfuzz {
namespace {
using namespace torch_detail;

class TorchComposedBackend final : public Backend {
 public:
  TorchComposedBackend(TorchPrecision prec, Device dev) : prec_(prec), dev_(dev) {}

  std::string name() const override {
    return std::string(prec_ == TorchPrecision::float64 ? "torch.f64" : "torch.math") + (dev_ == Device::cuda ? ".cuda" : "");
  }
  std::string version() const override { return "libtorch-" + torch_version(); }
  Device device() const override { return dev_; }
  // The graph holds B x Hq x Sq x Skv scores, probabilities and their gradients.
  HostScores host_scores() const override { return dev_ == Device::cpu ? HostScores::every_head : HostScores::none; }
  std::optional<std::string> unsupported_reason(const Problem& p) const override {
    std::string why;
    if (!torch_device_available(dev_, &why)) return why;
    return Backend::unsupported_reason(p);
  }
  // Everything the semantics has, the score bias included (added to the graph's scores, a leaf
  // whose gradient is dBias).
  SupportEnvelope envelope() const override {
    SupportEnvelope e = Backend::envelope();
    e.bias = true;
    e.bias_grad = true;
    e.ragged = true;
    return e;
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
    Graph g = build(p, false);
    return {from_torch(g.o), from_torch(g.lse_out)};
  }

  Gradients backward_impl(const Problem& p, const Forward&, const Tensor& d_out, const Tensor& d_lse) {
    // Recomputes the forward with autograd on; the backend's own O enters only through the graph.
    Graph g = build(p, true);
    const at::Device dev = device_of(dev_);
    at::Tensor d_o = laid_out(p, TensorId::dO, d_out, g.o.scalar_type(), dev);
    at::Tensor d_l = (to_torch(d_lse, dev).unsqueeze(-1) * g.row_has).to(g.lse_raw.scalar_type());
    std::vector<at::Tensor> leaves{g.q, g.k, g.v};
    if (p.bias_requires_grad) leaves.push_back(g.bias);
    auto grads = torch::autograd::grad({g.o, g.lse_raw}, leaves, {d_o, d_l}, /*retain_graph=*/false,
                                       /*create_graph=*/false, /*allow_unused=*/true);
    auto out = [&](const at::Tensor& gr, const at::Tensor& like) { return from_torch(gr.defined() ? gr : at::zeros_like(like)); };
    Gradients r{out(grads[0], g.q), out(grads[1], g.k), out(grads[2], g.v)};
    if (p.bias_requires_grad) r.dbias = dbias_from(grads[3], p);
    return r;
  }

  struct Graph {
    at::Tensor q, k, v, bias, o, lse_raw, lse_out, row_has;
  };

  Graph build(const Problem& p, bool requires_grad) const {
    const Shape& s = p.shape;
    const at::Device dev = device_of(dev_);
    const bool f64 = prec_ == TorchPrecision::float64;
    const at::ScalarType operand = f64 ? at::kDouble : scalar_type(p.dtype);
    const at::ScalarType accum = f64 ? at::kDouble : at::kFloat;
    Graph g;
    // The inputs as a caller lays them out (strides, storage offsets, packed views).
    const LaidOutInputs in = laid_out_inputs(p, operand, dev);
    g.q = in.q.detach().set_requires_grad(requires_grad);
    g.k = in.k.detach().set_requires_grad(requires_grad);
    g.v = in.v.detach().set_requires_grad(requires_grad);
    at::Tensor mask = TorchMaskBuilder(p).build().to(dev);
    const int64_t group = s.group();
    at::Tensor k = group > 1 ? g.k.repeat_interleave(group, 1) : g.k;
    at::Tensor v = group > 1 ? g.v.repeat_interleave(group, 1) : g.v;
    // Scores accumulate in `accum` from the (exact) operand values.
    at::Tensor scores = at::matmul(g.q.to(accum), k.to(accum).transpose(-2, -1)) * p.scale;
    if (p.softcap) scores = at::tanh(scores / *p.softcap) * *p.softcap;
    if (p.has_bias()) {  // broadcast from its own shape: autograd sums dBias over the broadcast dimensions
      g.bias = bias_tensor(p, accum, dev).set_requires_grad(requires_grad && p.bias_requires_grad);
      scores = scores + g.bias;
    }
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
  Device dev_;
};

}  // namespace

bool torch_device_available(Device device, std::string* why) {
  if (device == Device::cpu) return true;
  std::string load_error;
  if (!load_torch_cuda(&load_error)) {
    if (why) *why = "LibTorch's CUDA half is not here: " + load_error;
    return false;
  }
  if (!at::hasCUDA()) {
    if (why) *why = "LibTorch's CUDA half loaded but sees no GPU";
    return false;
  }
  return true;
}

std::string torch_version() { return TORCH_VERSION; }

void torch_set_threads(int n) { at::set_num_threads(n); }

std::map<std::string, std::string> torch_cuda_environment() {
  std::map<std::string, std::string> e;
  if (!load_torch_cuda() || !at::hasCUDA()) {
    e["cuda"] = "none (no GPU, or a CPU-only LibTorch)";
    e["cudnn"] = "none";
    return e;
  }
  const long cuda = at::detail::getCUDAHooks().versionCUDART();
  e["cuda"] = std::to_string(cuda / 1000) + "." + std::to_string(cuda % 1000 / 10);
  e["cudnn"] = at::detail::getCUDAHooks().hasCuDNN() ? std::to_string(at::detail::getCUDAHooks().versionCuDNN()) : "none";
  return e;
}

std::optional<std::string> torch_cuda_health() {
  if (!load_torch_cuda() || !at::hasCUDA()) return std::nullopt;
  try {
    // A copy back to the host synchronizes: an error left by any earlier kernel surfaces here.
    (void)at::ones({1}, at::TensorOptions().device(at::kCUDA)).sum().item<float>();
  } catch (const c10::OutOfMemoryError&) {
    return std::nullopt;  // memory is a resource (another process may hold it all), not a sticky fault
  } catch (const c10::Error& e) {
    const std::string what = e.what_without_backtrace();
    // cudaErrorMemoryAllocation (a context that could not be created on a full GPU, say) is not
    // sticky either: seen on the H200 while JAX processes held the memory, blamed on the backend.
    if (what.find("CUDA error: out of memory") != std::string::npos) return std::nullopt;
    return what;
  }
  return std::nullopt;
}

std::unique_ptr<Backend> make_torch_composed_backend(TorchPrecision precision, Device device) {
  return std::make_unique<TorchComposedBackend>(precision, device);
}

}  // namespace attnfuzz
