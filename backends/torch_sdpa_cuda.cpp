// LibTorch's fused CUDA attention kernels, one forced at a time (see torch_sdpa_cuda.h).
// The op-level backends call the underlying op exactly as at::scaled_dot_product_attention
// would after choosing that kernel (head dim padded to 8 for flash; the boolean mask turned
// into an additive bias: -inf with an aligned stride for efficient, -65504 for cuDNN; a score
// bias travels as a float attn_mask, the bias where visible and -inf where masked, which the
// efficient path aligns and expands and the cuDNN path passes on as it is), so the
// two differ only in the LSE they return. Backward is LibTorch's autograd through the same call: the LSE output is not
// differentiable, so no backend here takes dLSE and the composition engine adds that term.
// dBias (a bias that requires a gradient) is the autograd gradient of the bias, a leaf in its
// broadcast shape from which the float attn_mask is built: the efficient kernel only (see
// bias_grad_support below for what LibTorch 2.11 computes and why the cuDNN kernel declines).
// The .deterministic variants are the same backends with LibTorch's deterministic algorithms on
// for each call (DeterministicAlgorithms below; what each kernel does then: docs/gpu.md,
// "Deterministic mode").
#include "backends/torch_sdpa_cuda.h"

#include <ATen/Context.h>
#include <ATen/SDPBackend.h>
#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/autograd.h>

#include <cmath>
#include <limits>

#include "harness/compose.h"
#include "oracles/torch_common.h"
#if ATTNFUZZ_HAVE_CUDA_KERNELS
#include "oracles/device_mirror.h"
#endif

namespace attnfuzz {
namespace {
using namespace torch_detail;

#if ATTNFUZZ_HAVE_CUDA_KERNELS
// Every LibTorch CUDA backend's inputs come from the device mirror (torch_common.h,
// device_copy_of) where it keeps copies: found there, or sent once and kept for the case's next
// call. The mirror's memory is on the process's current device, which a worker's device 0 is.
at::Tensor mirrored(const Tensor& t, at::Device dev) {
  if ((dev.has_index() && dev.index() != 0) || !gpu::mirror_keeps_copies()) return {};
  gpu::SharedCopy c = gpu::device_copy(t.ptr(), t.numel());
  void* data = const_cast<void*>(c->data());
  return at::from_blob(data, t.shape, [c](void*) {}, at::TensorOptions().dtype(at::kDouble).device(dev));
}
const bool kInputsFromTheMirror = (device_copy_of() = &mirrored, true);
#endif

// Enables exactly one of LibTorch's SDPA kernels for the lifetime of the guard (process-wide
// flags; campaign workers are single-threaded processes).
class ForceKernel {
 public:
  explicit ForceKernel(CudaSdpaKernel k)
      : enabled_({.flash = k == CudaSdpaKernel::flash, .efficient = k == CudaSdpaKernel::efficient, .cudnn = k == CudaSdpaKernel::cudnn}) {}

 private:
  SdpaKernelsEnabled enabled_;
};

// LibTorch's deterministic algorithms (torch.use_deterministic_algorithms(True), warn_only
// false: at::Context::setDeterministicAlgorithms) on for the lifetime of the guard, where `on`;
// the process's previous setting, warn_only included, is restored after it. Process-wide, as
// ForceKernel's flags (the autograd engine's device threads, which run the backward, read them
// too); the process runs other backends, which must find the setting as it was.
class DeterministicAlgorithms {
 public:
  explicit DeterministicAlgorithms(bool on) : on_(on) {
    if (!on_) return;
    auto& c = at::globalContext();
    saved_ = c.deterministicAlgorithms();
    saved_warn_only_ = c.deterministicAlgorithmsWarnOnly();
    c.setDeterministicAlgorithms(true, false);
  }
  ~DeterministicAlgorithms() {
    if (on_) at::globalContext().setDeterministicAlgorithms(saved_, saved_warn_only_);
  }
  DeterministicAlgorithms(const DeterministicAlgorithms&) = delete;
  DeterministicAlgorithms& operator=(const DeterministicAlgorithms&) = delete;

 private:
  bool on_, saved_ = false, saved_warn_only_ = false;
};

// LibTorch's refusal of an operation that has no deterministic implementation while
// deterministic algorithms are on (at::Context::alertNotDeterministic: "<op> does not have a
// deterministic implementation, but you set 'torch.use_deterministic_algorithms(True)'. You can
// ..."), as one line without the advice; nothing for any other error.
std::optional<std::string> nondeterministic_refusal(const c10::Error& e) {
  std::string m = e.what_without_backtrace();
  if (m.find("does not have a deterministic implementation") == std::string::npos) return std::nullopt;
  m = m.substr(0, m.find('\n'));
  if (const size_t advice = m.find(". You can"); advice != std::string::npos) m.resize(advice);
  return m;
}

at::SDPBackend sdp_backend_of(CudaSdpaKernel k) {
  switch (k) {
    case CudaSdpaKernel::flash:
      return at::SDPBackend::flash_attention;
    case CudaSdpaKernel::efficient:
      return at::SDPBackend::efficient_attention;
    case CudaSdpaKernel::cudnn:
      return at::SDPBackend::cudnn_attention;
  }
  return at::SDPBackend::error;
}

const char* kernel_name(CudaSdpaKernel k) {
  switch (k) {
    case CudaSdpaKernel::flash:
      return "flash";
    case CudaSdpaKernel::efficient:
      return "efficient";
    case CudaSdpaKernel::cudnn:
      return "cudnn";
  }
  return "?";
}

// The mask as LibTorch takes it: nothing, is_causal (top-left, LibTorch's meaning), or a
// boolean [B][Hq][Sq][Skv] tensor. is_causal is used whenever it is exact, so the kernels'
// causal paths (block skipping) are exercised, not only their masked ones. With a score bias,
// a float mask in the query dtype instead (float_mask_arg).
struct MaskArg {
  bool is_causal = false;
  std::optional<at::Tensor> mask;
  // With a bias that requires a gradient: the leaf (the bias in its broadcast shape, requiring
  // grad) that `mask` is built from; autograd's gradient of it is dBias.
  at::Tensor bias_leaf;
};

// Whether the dense mask is all visible, or top-left causal.
struct DenseMaskKind {
  bool all = true, causal = true;
};

DenseMaskKind dense_mask_kind(const Problem& p) {
  const Shape& s = p.shape;
  // The last large mask asked about and its answer: every call of a real-size case (its
  // LibTorch choice, forward, backward, the dLSE term's extra calls) asks about the same mask,
  // and comparing it with the last is a plain memory comparison, cheaper than the scan.
  struct Last {
    int64_t seq_q = -1, seq_kv = -1;
    std::vector<uint8_t> mask;
    bool all = true, causal = true;
  };
  thread_local Last last;
  const bool large = p.mask.size() >= (size_t{1} << 16);
  bool all = true, causal = true;
  if (large && last.seq_q == s.seq_q && last.seq_kv == s.seq_kv && last.mask == p.mask) {
    all = last.all;
    causal = last.causal;
  } else {
    // At real sizes a full scan per call (forward, backward and LibTorch's choice) was
    // milliseconds each: the scan stops once the mask is neither, and the last answer is kept.
    // The padded call: these ops see a ragged batch's lengths only through the mask.
    const MaskShape shape = mask_shape(p, Align::top_left, MaskExtent::padded);
    all = shape.all;
    causal = shape.causal;
    if (large) last = {s.seq_q, s.seq_kv, p.mask, all, causal};
  }
  return {all, causal};
}

// The dense mask on the device, as LibTorch's boolean attn_mask (true = visible).
at::Tensor visible_mask(const Problem& p, at::Device dev) {
  const Shape& s = p.shape;
  return at::from_blob(const_cast<uint8_t*>(p.mask.data()), {s.batch, s.heads_q, s.seq_q, s.seq_kv}, at::kByte).to(at::kBool).to(dev);
}

// With a score bias, the attn_mask a caller hands the public entry point: the bias where
// visible and -inf where masked, in the query dtype (torch_common.h, biased_mask), the bias
// alone in its broadcast shape where every key is visible; never is_causal, which the public
// entry point takes with no attn_mask. `with_values` false: unfilled, as in mask_arg.
// `bias_grad`: the bias is a leaf that requires grad (MaskArg::bias_leaf) and the mask is built
// from it by the same operations as biased_mask (expand, then masked_fill), as a caller whose
// bias is a parameter builds it; unfilled, the mask itself requires grad, so that LibTorch's
// kernel choice sees what that caller's call shows it.
MaskArg float_mask_arg(const Problem& p, at::Device dev, at::ScalarType st, bool with_values, bool bias_grad) {
  const Shape& s = p.shape;
  const bool all = dense_mask_kind(p).all;
  MaskArg m;
  if (!with_values) {
    // biased_mask's result is contiguous either way (masked_fill writes a contiguous copy).
    const std::vector<int64_t> sizes = all ? p.bias.shape : std::vector<int64_t>{s.batch, s.heads_q, s.seq_q, s.seq_kv};
    m.mask = at::empty(sizes, at::TensorOptions().dtype(st).device(dev)).set_requires_grad(bias_grad);
    return m;
  }
  if (!bias_grad) {
    m.mask = all ? bias_tensor(p, st, dev) : biased_mask(p, visible_mask(p, dev), st, dev);
    return m;
  }
  m.bias_leaf = bias_tensor(p, st, dev).set_requires_grad(true);
  m.mask = all ? m.bias_leaf
               : m.bias_leaf.expand({s.batch, s.heads_q, s.seq_q, s.seq_kv})
                     .masked_fill(visible_mask(p, dev).logical_not(), -std::numeric_limits<double>::infinity());
  return m;
}

// `with_values` false: a mask of the right sizes but unfilled, for a caller that only looks
// at its metadata (LibTorch's kernel choice), so no copy to the device. `bias_grad`: the
// score bias requires a gradient (float_mask_arg).
MaskArg mask_arg(const Problem& p, at::Device dev, at::ScalarType st, bool with_values = true, bool bias_grad = false) {
  if (p.has_bias()) return float_mask_arg(p, dev, st, with_values, bias_grad);
  const Shape& s = p.shape;
  const auto [all, causal] = dense_mask_kind(p);
  MaskArg m;
  if (all) return m;
  if (causal) {
    m.is_causal = true;
    return m;
  }
  if (!with_values) {
    m.mask = at::empty({s.batch, s.heads_q, s.seq_q, s.seq_kv}, at::TensorOptions().dtype(at::kBool).device(dev));
    return m;
  }
  m.mask = visible_mask(p, dev);
  return m;
}

// What the public entry point does to a boolean mask before the efficient/cuDNN ops:
// an additive bias in the query dtype whose rows start aligned (LibTorch 2.11 pads them to a
// multiple of 8 elements, this to 16: the same values, a longer row stride).
at::Tensor additive_bias(const at::Tensor& mask, at::ScalarType st) {
  at::Tensor bias = at::zeros(mask.sizes(), mask.options().dtype(st)).masked_fill(mask.logical_not(), -INFINITY);
  const int64_t skv = bias.size(-1), rem = skv % 16;
  if (rem == 0) return bias;
  return at::constant_pad_nd(bias, {0, 16 - rem}).narrow(-1, 0, skv);
}

// What the public entry point hands the cuDNN op instead (convert_boolean_attn_mask_cudnn in
// LibTorch 2.11, a workaround for cuDNN and -inf): masked scores get -65504, a finite value, and
// the bias is not padded. A row with no visible key then attends uniformly, not to nothing.
at::Tensor cudnn_bias(const at::Tensor& mask, at::ScalarType st) {
  return at::zeros(mask.sizes(), mask.options().dtype(st)).masked_fill(mask.logical_not(), -65504.0);
}

// What LibTorch 2.11's public entry point does to a float attn_mask before the efficient op
// (preprocess_mask in aten/src/ATen/native/transformers/attention.cpp; the cuDNN op gets the
// float mask as it is): unless its last stride is 1 and every other stride a multiple of 8
// elements, the last dimension is padded past the next multiple of 8 and cut back, so rows start
// 8-element aligned; then it is expanded (a view: stride 0 where it broadcasts) to
// [B, Hq, Sq, Skv].
at::Tensor efficient_float_mask(const at::Tensor& mask, const at::Tensor& q, const at::Tensor& k) {
  bool aligned = mask.stride(-1) == 1;
  for (int64_t d = 0; d + 1 < mask.dim(); ++d) aligned = aligned && mask.stride(d) % 8 == 0;
  at::Tensor m = mask;
  if (!aligned) {
    const int64_t n = mask.size(-1);
    m = at::constant_pad_nd(mask, {0, 8 - n % 8}).narrow(-1, 0, n);
  }
  return m.expand({q.size(0), q.size(1), q.size(2), k.size(2)});
}

at::Tensor pad_last_dim_to_8(const at::Tensor& t) {
  const int64_t rem = t.size(-1) % 8;
  return rem ? at::constant_pad_nd(t, {0, 8 - rem}) : t;
}

class TorchCudaSdpaBackend final : public Backend {
 public:
  TorchCudaSdpaBackend(CudaSdpaKernel kernel, CudaSdpaEntry entry, CudaSdpaDeterminism determinism)
      : kernel_(kernel), entry_(entry), determinism_(determinism) {}

  std::string name() const override {
    return std::string(entry_ == CudaSdpaEntry::op ? "torch." : "torch.sdpa.") + kernel_name(kernel_) +
           (deterministic() ? ".deterministic" : "");
  }
  std::string version() const override { return "libtorch-" + torch_version(); }
  Device device() const override { return Device::cuda; }
  std::optional<Contract> contract(DType d) const override {
    // Flash and cuDNN take fp16/bf16 only. The efficient kernel also takes fp32, and its GEMMs
    // for fp32 on sm80 and newer are CUTLASS's 3xTF32 (`DefaultGemmType<ArchTag, float>` is
    // `OpMultiplyAddFastF32` on tensor cores in LibTorch's mem_eff_attention; SIMT fp32 only
    // before sm80, which is finer, so the declaration only loosens bounds there): where dP - D
    // cancels it errs 2.6-3.2x more than strict fp32 (docs/findings). Held to 3xTF32,
    // a kernel that quietly used plain TF32 still shows as a contract violation.
    if (d == DType::f32) return kernel_ == CudaSdpaKernel::efficient ? std::optional<Contract>(Contract::tf32x3) : std::nullopt;
    return natural_contract(d);
  }
  bool backward_takes_dlse() const override { return false; }
  // In LibTorch's default mode, measured on the H200 (docs/findings/README.md, N-1): every one of
  // the three kernels' dQ differs bitwise between identical backward calls (FlashAttention-2 and
  // the CUTLASS memory-efficient backward add each key block's dQ with atomics; LibTorch warns
  // "cuDNN SDPA is not deterministic"). dK, dV and the forward repeat bit for bit, and stay
  // checked. With deterministic algorithms on, LibTorch 2.11 promises every output: flash passes
  // FlashAttention-2 its deterministic flag, efficient forces num_splits_key = 1, and the cuDNN
  // kernel is not chosen at all (docs/gpu.md, "Deterministic mode"), so nothing is declared and
  // the determinism check holds the promise.
  std::vector<TensorId> nondeterministic_outputs() const override {
    if (deterministic()) return {};
    return {TensorId::dQ};
  }
  std::string why_nondeterministic() const override {
    return deterministic() ? std::string() : "dQ is accumulated over key blocks in no fixed order";
  }
  bool returns_lse() const override { return entry_ == CudaSdpaEntry::op; }
  // Rows with no visible key get an all -inf bias row: what the kernels make of it is not
  // documented, so those rows are left out of the comparison.
  bool masked_rows_zero() const override { return false; }
  // The kernels fold scale * log2(e) into the scores and use the hardware's approximate
  // exp2 (a few ulp), so their LSE is a few fp32 ulp off, never 2^-24.
  double lse_unit_roundoff(DType) const override { return std::ldexp(1.0, -21); }

  // What LibTorch 2.11's dispatcher (sdp_utils) takes for sure on sm80+: 16-bit (efficient: and
  // fp32) inputs, head dims that are multiples of 8, 16-byte aligned views; flash and cuDNN with
  // Dqk == Dv and no mask but is_causal; efficient any boolean mask, but no GQA. The adapter
  // enforces the dtype (no contract, nothing to judge) and the softcap (SDPA takes none); the rest
  // is LibTorch's to decide (choice_refusal), so the cases just outside stay reject or correct.
  // A score bias reaches efficient and cuDNN as a float attn_mask; flash takes no attn_mask.
  // dBias: the efficient kernel only (bias_grad_support).
  SupportEnvelope envelope() const override {
    SupportEnvelope e = Backend::envelope();
    e.head_dim_multiple = 8;
    e.alignment_bytes = 16;
    e.softcap = false;
    e.bias = kernel_ != CudaSdpaKernel::flash;
    e.bias_grad = bias_grad_support();
    e.ragged = true;  // a ragged batch is its dense mask (is_causal only where the mask is causal)
    e.library_decides = SupportEnvelope::library_decides_all_but({EnvelopeClause::dtype, EnvelopeClause::softcap});
    switch (kernel_) {
      case CudaSdpaKernel::flash:
        e.max_head_dim = 256;
        e.distinct_head_dims = false;
        e.masks = MaskSupport::causal_or_none;
        // Its padding needs an attn_mask, which flash does not take (torch.flash.varlen does).
        e.ragged = false;
        break;
      case CudaSdpaKernel::efficient:
        e.max_head_dim = 256;
        e.grouped_heads = false;
        break;
      case CudaSdpaKernel::cudnn:
        e.max_head_dim = 128;
        e.distinct_head_dims = false;
        e.grouped_heads = false;
        e.masks = MaskSupport::causal_or_none;
        break;
    }
    return e;
  }

  // With deterministic algorithms on, LibTorch's choice refuses the cuDNN kernel ("cuDNN SDPA is
  // not deterministic"): the .deterministic variant of torch.cudnn declines every problem, with
  // that reason, before any call.
  std::optional<std::string> unsupported_reason(const Problem& p) const override {
    std::string why;
    if (!torch_device_available(Device::cuda, &why)) return why;
    if (auto refused = Backend::unsupported_reason(p)) return refused;
    DeterministicAlgorithms mode(deterministic());
    try {
      return choice_refusal(p);
    } catch (const std::exception& e) {
      return std::string("LibTorch refused the inputs: ") + e.what();
    }
  }

  Forward forward(const Problem& p) override {
    return rethrow_plain([&] {
      return in_mode([&] {
        c10::AutoGradMode no_grad(false);
        Call c = run(p, false);
        Forward f{from_torch(c.out), Tensor({p.shape.batch, p.shape.heads_q, p.shape.seq_q})};
        if (c.lse.defined()) f.lse = from_torch(c.lse);
        return f;
      });
    });
  }

  Gradients backward(const Problem& p, const Forward&, const Tensor& d_out, const Tensor&) override {
    return rethrow_plain([&] { return in_mode([&] { return gradients(p, d_out); }); });
  }

 private:
  struct Call {
    at::Tensor q, k, v, out, lse;
    at::Tensor bias_leaf;  // defined when the backward returns dBias (MaskArg::bias_leaf)
  };

  bool deterministic() const { return determinism_ == CudaSdpaDeterminism::deterministic_algorithms; }

  // Runs f in this backend's determinism mode. Where LibTorch refuses an operation for want of a
  // deterministic implementation, this backend declines the problem (UnsupportedError: the
  // composition engine's refusal, a skip with the reason), never reports an error: none of the
  // kernels' refusals in LibTorch 2.11 is known to reach here (the cuDNN one is the kernel choice's,
  // in unsupported_reason), but an operation on the way that raises would.
  template <class F>
  auto in_mode(F&& f) const -> decltype(f()) {
    DeterministicAlgorithms mode(deterministic());
    try {
      return f();
    } catch (const c10::Error& e) {
      if (!deterministic()) throw;
      if (const auto why = nondeterministic_refusal(e))
        throw UnsupportedError(name() + " declines under LibTorch's deterministic algorithms: " + *why);
      throw;
    }
  }

  Gradients gradients(const Problem& p, const Tensor& d_out) const {
    Call c = run(p, true);
    at::Tensor d_o = laid_out(p, TensorId::dO, d_out, c.out.scalar_type(), c.out.device());
    std::vector<at::Tensor> inputs{c.q, c.k, c.v};
    if (c.bias_leaf.defined()) inputs.push_back(c.bias_leaf);
    auto g = torch::autograd::grad({c.out}, inputs, {d_o}, false, false, true);
    auto out = [](const at::Tensor& t, const at::Tensor& like) { return from_torch(t.defined() ? t : at::zeros_like(like)); };
    Gradients grads{out(g[0], c.q), out(g[1], c.k), out(g[2], c.v)};
    if (c.bias_leaf.defined()) {
      // No gradient at all would be LibTorch dropping the attn_mask's derivative: an error,
      // not a dBias of zeros (which the verdict would take for LibTorch's answer).
      if (!g[3].defined()) throw std::runtime_error(std::string("LibTorch returned no gradient for the ") + kernel_name(kernel_) + " attn_mask");
      grads.dbias = from_torch(g[3]);
    }
    return grads;
  }

  // Whether LibTorch 2.11 computes the attn_mask's gradient through this kernel, so that a bias
  // requiring a gradient gets its dBias (the bias_grad clause):
  //  - efficient: yes. derivatives.yaml (torchgen/packaged/autograd/derivatives.yaml of the 2.11
  //    wheel) differentiates `_scaled_dot_product_efficient_attention` in "query, key, value,
  //    attn_bias" through `_scaled_dot_product_efficient_attention_backward(..., grad_input_mask,
  //    ...)`, which passes grad_input_mask[3] to `_efficient_attention_backward` as
  //    bias_requires_grad. That (aten/src/ATen/native/transformers/cuda/attention_backward.cu)
  //    allocates grad_bias as `at::empty(bias->sizes() with the last dim rounded up to 16,
  //    bias->options()).slice(-1, 0, lastDim)`: dense, in the bias's dtype (the case dtype), of the
  //    bias *as passed*, i.e. the expanded [B, Hq, Sq, Skv] view (efficient_float_mask), so the
  //    kernel writes dS for every (b, h, i, j), rounded to the case dtype, and sums over nothing;
  //    the padding past Skv is sliced off. The sums over the broadcast dimensions are then
  //    autograd's, back through the operations the mask was built with: expand's backward is
  //    at::sum_to (on CUDA a reduction accumulated in float32, stored once in the case dtype),
  //    constant_pad_nd / narrow's take the padding off, masked_fill's zeroes the masked
  //    positions (their -inf entries then add exactly 0, whatever the kernel wrote there). So
  //    dBias is summed in float32 over dS elements each already rounded to the case dtype, and
  //    stored in the case dtype: exactly what a PyTorch caller whose broadcast bias is a
  //    parameter gets, which is what is tested (one rounding per summand more than the contract
  //    baselines' single store).
  //  - cuDNN: no. The same derivatives.yaml differentiates `_scaled_dot_product_cudnn_attention`
  //    in "query, key, value" only, and `_scaled_dot_product_cudnn_attention_backward` returns
  //    three tensors (ATen/ops/_scaled_dot_product_cudnn_attention_backward.h): no attn_bias
  //    gradient exists. A call asking for dBias is declined by the envelope (an always-enforced
  //    clause), never run.
  //  - flash takes no bias at all.
  // Both entry points of the efficient kernel take it: the public one builds the same
  // operations (its preprocess_mask pads and expands a float mask) under autograd.
  bool bias_grad_support() const { return kernel_ == CudaSdpaKernel::efficient; }

  // LibTorch's own verdict: at::_fused_sdp_choice with only this kernel enabled chooses it,
  // or says (in warnings and its error) why not.
  std::optional<std::string> choice_refusal(const Problem& p) const {
    const at::Device dev = device_of(Device::cuda);
    const at::ScalarType st = scalar_type(p.dtype);
    const auto opts = at::TensorOptions().dtype(st).device(dev);
    const Shape& s = p.shape;
    // The real strides and storage offsets: LibTorch's checks look at them (alignment), as
    // they do for a caller. They look at nothing else (sizes, strides, offsets, dtypes, device,
    // whether a mask is given): unfilled tensors, so asking costs no kernel and no copy (a case
    // the kernel declines, most of a toy campaign, then never waits on the GPU for it).
    using R = TensorId;
    auto views = laid_out_views(p, {R::Q, R::K, R::V}, opts, false);
    at::Tensor q = views[R::Q], k = views[R::K], v = views[R::V];
    q.set_requires_grad(true);  // the choice differs for training: backward must be supported
    const MaskArg m = mask_arg(p, dev, st, false, p.bias_requires_grad);
    WarningCollector warnings;
    c10::WarningUtils::WarningHandlerGuard guard(&warnings);
    c10::WarningUtils::WarnAlways warn_always(true);
    ForceKernel force(kernel_);
    int64_t chosen = -1;
    std::string error;
    try {
      chosen = at::_fused_sdp_choice(q, k, v, m.mask, 0.0, m.is_causal, p.scale, s.group() > 1);
    } catch (const c10::Error& e) {
      error = e.what_without_backtrace();
    }
    if (chosen == static_cast<int64_t>(sdp_backend_of(kernel_))) return std::nullopt;
    std::string why = std::string("LibTorch does not choose its ") + kernel_name(kernel_) + " kernel";
    if (!warnings.text().empty())
      why += ": " + warnings.text();
    else if (!error.empty())
      why += ": " + error;
    return why;
  }

  Call run(const Problem& p, bool requires_grad) const {
    const at::Device dev = device_of(Device::cuda);
    const at::ScalarType st = scalar_type(p.dtype);
    const Shape& s = p.shape;
    Call c;
    {
      c10::AutoGradMode no_grad(false);
      const LaidOutInputs in = laid_out_inputs(p, st, dev);
      c.q = in.q;
      c.k = in.k;
      c.v = in.v;
    }
    c.q = c.q.detach().set_requires_grad(requires_grad);
    c.k = c.k.detach().set_requires_grad(requires_grad);
    c.v = c.v.detach().set_requires_grad(requires_grad);
    // dBias only where the backward is asked for it (the forward never needs the leaf).
    const MaskArg m = mask_arg(p, dev, st, true, requires_grad && p.bias_requires_grad);
    c.bias_leaf = m.bias_leaf;
    const bool gqa = s.group() > 1;
    ForceKernel force(kernel_);
    if (entry_ == CudaSdpaEntry::public_api) {
      c.out = at::scaled_dot_product_attention(c.q, c.k, c.v, m.mask, 0.0, m.is_causal, p.scale, gqa);
      return c;
    }
    at::Tensor lse;
    switch (kernel_) {
      case CudaSdpaKernel::flash: {
        // Flash takes grouped K/V as they are; the public entry point pads D to a multiple of 8.
        auto r = at::_scaled_dot_product_flash_attention(pad_last_dim_to_8(c.q), pad_last_dim_to_8(c.k), pad_last_dim_to_8(c.v), 0.0,
                                                         m.is_causal, false, p.scale);
        c.out = std::get<0>(r).narrow(-1, 0, s.head_dim_v);
        lse = std::get<1>(r);
        break;
      }
      case CudaSdpaKernel::efficient: {
        // The efficient kernel has no grouped heads: K/V repeated per group (autograd sums
        // their gradients back), as the public entry point does for it.
        at::Tensor k = gqa ? c.k.repeat_interleave(s.group(), 1) : c.k;
        at::Tensor v = gqa ? c.v.repeat_interleave(s.group(), 1) : c.v;
        std::optional<at::Tensor> bias;
        if (m.mask) bias = p.has_bias() ? efficient_float_mask(*m.mask, c.q, k) : additive_bias(*m.mask, st);
        auto r = at::_scaled_dot_product_efficient_attention(c.q, k, v, bias, true, 0.0, m.is_causal, p.scale);
        c.out = std::get<0>(r);
        lse = std::get<1>(r);
        break;
      }
      case CudaSdpaKernel::cudnn: {
        std::optional<at::Tensor> bias;
        if (m.mask) bias = p.has_bias() ? *m.mask : cudnn_bias(*m.mask, st);
        auto r = at::_scaled_dot_product_cudnn_attention(c.q, c.k, c.v, bias, true, 0.0, m.is_causal, false, p.scale);
        c.out = std::get<0>(r);
        lse = std::get<1>(r);
        break;
      }
    }
    // Kernels pad the LSE's row count (efficient: to a multiple of 32) or add a unit dim.
    c.lse = lse.detach().narrow(2, 0, s.seq_q).reshape({s.batch, s.heads_q, s.seq_q});
    return c;
  }

  CudaSdpaKernel kernel_;
  CudaSdpaEntry entry_;
  CudaSdpaDeterminism determinism_;
};

}  // namespace

std::unique_ptr<Backend> make_torch_cuda_sdpa_backend(CudaSdpaKernel kernel, CudaSdpaEntry entry, CudaSdpaDeterminism determinism) {
  return std::make_unique<TorchCudaSdpaBackend>(kernel, entry, determinism);
}

TorchDeterminismSetting torch_determinism_setting() {
  const auto& c = at::globalContext();
  return {c.deterministicAlgorithms(), c.deterministicAlgorithmsWarnOnly()};
}

void set_torch_determinism_setting(TorchDeterminismSetting s) { at::globalContext().setDeterministicAlgorithms(s.deterministic, s.warn_only); }

}  // namespace attnfuzz
