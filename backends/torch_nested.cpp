// LibTorch's SDPA on nested tensors (see torch_nested.h). Signatures are LibTorch 2.11's:
//   _nested_view_from_buffer(buffer, nested_size, nested_strides, offsets) -> nested view
//   scaled_dot_product_attention(query, key, value, attn_mask?, dropout_p, is_causal, scale?,
//       enable_gqa) -> output
//
// Each call builds Q, K, V (and dO) from the Problem's dense float64 tensors, in the case dtype,
// as one flat buffer per tensor holding every sequence: sequence b's component at its own offset,
// then the case's gap rows of NaN after each sequence but the last and its tail rows of NaN after
// the last (harness/case.h, Ragged: p.gap_q, p.gap_kv, p.tail); a misaligned case
// (Ragged::misaligned) moves every component one element on, base pointers 2 (4 in fp32) bytes
// past the allocator's alignment. The nested tensor is a view of that buffer
// (_nested_view_from_buffer) with each component's sizes, strides and offset, so a gap or a tail
// is a hole the library has to step over, as in a model's nested tensors made by narrow() or
// from a larger buffer. Component layouts:
//   - flash: [L_b][H][D] (the packed THD rows, as a model's projections give them), transposed
//     to [H][L_b][D] for the call. LibTorch's nested preprocessing decides whether to read the
//     buffer in place or to copy it; with gaps it reads it in place as if packed back to back
//     (s61-torch-nested-gaps-read-as-rows, declined below).
//   - math: [H][L_b][D], contiguous per component: the math path refuses the transposed view
//     ("If inputs are nested tensors they must be contiguous"), and with gaps any view.
// Outputs come back as nested tensors; each component is scattered into the dense tensor, with
// O = 0 and zero gradients on rows and keys past the sequences' lengths.
// Masks: no mask tensor (nested SDPA takes none); is_causal where the dense mask is causal
// top-left in every sequence's block, none where it is all visible there (torch_nested_refusal).
// Anything LibTorch refuses with a c10::Error of its argument checks (no kernel for the inputs, a
// head dim, grouped heads, a zero-length sequence, a causal mask on the math path) is a clean
// refusal (library_call): the call is declined with LibTorch's message and, for the public entry
// point, the warnings in which its kernel choice says why. A CUDA error, a device out of memory
// and every error of the adapter's own building stay errors, and findings.
#include "backends/torch_nested.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/autograd.h>

#include <cmath>
#include <limits>

#include "backends/torch_packed.h"
#include "harness/compose.h"
#include "oracles/torch_common.h"

namespace attnfuzz {
namespace {
using namespace torch_detail;

const char* kernel_name(NestedSdpaKernel k) {
  switch (k) {
    case NestedSdpaKernel::math:
      return "math";
    case NestedSdpaKernel::flash:
      return "flash";
  }
  return "?";
}

// LibTorch warns, once per process, at the first strided nested tensor that the API is a
// prototype: no reason for anything, kept out of refusals and stderr.
constexpr const char* kPrototypeWarning = "nested tensors is in prototype stage";
struct QuietPrototypeWarning {
  WarningCollector dropped{kPrototypeWarning};
  c10::WarningUtils::WarningHandlerGuard guard{&dropped};
};

// LibTorch's kernel choice warns why each kernel was not used, the disabled ones first ("...
// has been disabled in the user settings"): the refusal keeps the enabled kernel's reasons.
std::string reasons_of_enabled_kernel(const std::string& warnings) {
  std::string kept;
  size_t at = 0;
  while (at <= warnings.size()) {
    const size_t end = std::min(warnings.find(" | ", at), warnings.size());
    const std::string one = warnings.substr(at, end - at);
    if (!one.empty() && one.find("disabled") == std::string::npos && one.find("not used because") == std::string::npos)
      kept += (kept.empty() ? "" : " | ") + one;
    at = end + 3;
  }
  return kept;
}

// How a component lays out its rows: [H][L][D] (heads outermost) or [L][H][D] (the packed rows).
enum class ComponentOrder { heads_rows, rows_heads };

// The mask the call passes (none or is_causal), or nothing where the dense mask is neither
// (remembered for a large mask: remembered_fit).
std::optional<OpMask> fit_mask(const Problem& p) {
  return remembered_fit("torch.nested", p, [](const Problem& q, const CallLens& l) -> std::optional<OpMask> {
    for (const OpMask& m : {OpMask{OpMask::Kind::none}, OpMask{OpMask::Kind::causal_top_left}})
      if (dense_mask_is(q, l, m)) return m;
    return std::nullopt;
  });
}

// A nested view of `dense`'s sequences (lengths `lens`) in a fresh flat buffer of the case dtype:
// component b at its own offset in `order`, `gap` rows of NaN after each but the last and `tail`
// after the last; misaligned: every offset one element on.
at::Tensor nested_of(const Tensor& dense, const std::vector<int64_t>& lens, int64_t gap, int64_t tail, ComponentOrder order,
                     at::ScalarType st, at::Device dev, bool misaligned) {
  const int64_t batch = dense.dim(0), heads = dense.dim(1), d = dense.dim(3), row = heads * d;
  const at::Tensor rows = to_torch(dense, st, dev);  // [B][H][S][D]
  std::vector<int64_t> sizes, strides, offsets;
  int64_t at = misaligned ? 1 : 0;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t len = lens[static_cast<size_t>(b)];
    offsets.push_back(at);
    if (order == ComponentOrder::heads_rows) {
      sizes.insert(sizes.end(), {heads, len, d});
      strides.insert(strides.end(), {len * d, d, 1});
    } else {
      sizes.insert(sizes.end(), {len, heads, d});
      strides.insert(strides.end(), {row, d, 1});
    }
    at += len * row + (b + 1 < batch ? gap * row : 0);
  }
  at += tail * row;
  at::Tensor buffer = at::full({at}, std::numeric_limits<double>::quiet_NaN(), rows.options());
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t len = lens[static_cast<size_t>(b)];
    if (len == 0) continue;
    const at::Tensor source = rows.select(0, b).narrow(1, 0, len);  // [H][L][D]
    at::Tensor part = buffer.narrow(0, offsets[static_cast<size_t>(b)], len * row);
    if (order == ComponentOrder::heads_rows)
      part.view({heads, len, d}).copy_(source);
    else
      part.view({len, heads, d}).copy_(source.transpose(0, 1));
  }
  const at::Device host(at::kCPU);
  return at::_nested_view_from_buffer(buffer, long_tensor(sizes, host).view({batch, 3}), long_tensor(strides, host).view({batch, 3}),
                                      long_tensor(offsets, host));
}

// A nested [B][H][L_b][d] result (components in `order`) as a dense [B][H][seq][d] tensor, zero
// past each sequence's length. A component of another shape is the library's error.
Tensor dense_of(const at::Tensor& nested, ComponentOrder order, int64_t heads, int64_t seq, int64_t d, const std::vector<int64_t>& lens,
                const std::string& who, const char* what) {
  const std::vector<at::Tensor> parts = nested.unbind(0);
  const int64_t batch = static_cast<int64_t>(lens.size());
  if (static_cast<int64_t>(parts.size()) != batch)
    throw std::runtime_error(who + ": " + what + " has " + std::to_string(parts.size()) + " components, not " + std::to_string(batch));
  at::Tensor dense = at::zeros({batch, heads, seq, d}, at::TensorOptions().dtype(nested.scalar_type()).device(nested.device()));
  for (int64_t b = 0; b < batch; ++b) {
    const at::Tensor part = order == ComponentOrder::rows_heads ? parts[static_cast<size_t>(b)].transpose(0, 1) : parts[static_cast<size_t>(b)];
    const int64_t len = lens[static_cast<size_t>(b)];
    if (part.dim() != 3 || part.size(0) != heads || part.size(1) != len || part.size(2) != d)
      throw std::runtime_error(who + ": " + what + " component " + std::to_string(b) + " is " + sizes_of(part) + ", not [" +
                               std::to_string(heads) + ", " + std::to_string(len) + ", " + std::to_string(d) + "]");
    dense.select(0, b).narrow(1, 0, len).copy_(part);
  }
  return from_torch(dense);
}

class TorchNestedBackend final : public Backend {
 public:
  TorchNestedBackend(NestedSdpaKernel kernel, Device dev) : kernel_(kernel), dev_(dev) {}

  std::string name() const override {
    return std::string("torch.nested.") + kernel_name(kernel_) + (kernel_ == NestedSdpaKernel::math && dev_ == Device::cuda ? ".cuda" : "");
  }
  std::string version() const override { return "libtorch-" + torch_version(); }
  Device device() const override { return dev_; }
  // The math path materializes each sequence's attention weights and their gradients.
  HostScores host_scores() const override {
    return kernel_ == NestedSdpaKernel::math && dev_ == Device::cpu ? HostScores::every_head : HostScores::none;
  }
  // Flash takes fp16/bf16 only. The math path keeps 16-bit nested inputs in their dtype
  // (LibTorch 2.11's _scaled_dot_product_attention_math widens fp16/bf16 to fp32 only where
  // `!query_.is_nested()`), so its scores are rounded to 16 bits before the softmax: coarser than
  // any 16-bit contract (measured on the CPU: fp16 cases judged "computes like bf16", O rows at
  // 7.8 sigma' in bf16, while torch.sdpa.math on the same cases looks fp32). It is held to fp32.
  std::optional<Contract> contract(DType d) const override {
    if (kernel_ == NestedSdpaKernel::math) return d == DType::f32 ? std::optional<Contract>(Contract::fp32) : std::nullopt;
    if (d == DType::f32) return std::nullopt;
    return natural_contract(d);
  }
  bool backward_takes_dlse() const override { return false; }
  bool returns_lse() const override { return false; }
  // The math path gives a row with no visible key (a sequence with no key) O = 0. What the fused
  // kernels make of such rows is not documented: they are left out of the comparison.
  bool masked_rows_zero() const override { return kernel_ == NestedSdpaKernel::math; }
  // The nested backward op runs FlashAttention-2's varlen backward, whose dQ is accumulated over
  // key blocks in no fixed order (as for the dense ops, docs/findings N-1).
  std::vector<TensorId> nondeterministic_outputs() const override {
    if (kernel_ == NestedSdpaKernel::math) return {};
    return {TensorId::dQ};
  }
  std::string why_nondeterministic() const override {
    return kernel_ == NestedSdpaKernel::math ? std::string() : "dQ is accumulated over key blocks in no fixed order";
  }

  // Ragged batches (what nested tensors are for) and dense ones (every length full). The adapter
  // enforces the dtype and the softcap (SDPA takes none) and its mask check; the rest is
  // LibTorch's to decide, with what its dense kernels take for the generators' aim. Layouts are
  // not restricted: the adapter builds its own buffers.
  SupportEnvelope envelope() const override {
    SupportEnvelope e = Backend::envelope();
    e.softcap = false;
    e.bias = false;
    e.bias_grad = false;
    e.ragged = true;
    e.masks = MaskSupport::causal_or_none;
    // Grouped heads: the math path fails inside LibTorch on nested K and V with fewer heads
    // ("NestedTensorImpl doesn't support sizes").
    e.grouped_heads = kernel_ == NestedSdpaKernel::flash;
    if (kernel_ != NestedSdpaKernel::math) {
      e.head_dim_multiple = 8;
      e.distinct_head_dims = false;
      e.max_head_dim = 256;
    }
    e.library_decides = SupportEnvelope::library_decides_all_but({EnvelopeClause::dtype, EnvelopeClause::softcap});
    return e;
  }

  std::optional<std::string> unsupported_reason(const Problem& p) const override {
    std::string why;
    if (!torch_device_available(dev_, &why)) return why;
    if (auto refused = Backend::unsupported_reason(p)) return refused;
    return torch_nested_refusal(kernel_, p);
  }

  Forward forward(const Problem& p) override {
    return rethrow_plain([&] {
      QuietPrototypeWarning quiet;
      c10::AutoGradMode no_grad(false);
      const Call c = run(p, false);
      const Shape& s = p.shape;
      return Forward{dense_of(c.out, ComponentOrder::heads_rows, s.heads_q, s.seq_q, s.head_dim_v, c.lens.q, name(), "the output"),
                     Tensor({s.batch, s.heads_q, s.seq_q})};
    });
  }

  Gradients backward(const Problem& p, const Forward&, const Tensor& d_out, const Tensor&) override {
    return rethrow_plain([&] {
      QuietPrototypeWarning quiet;
      c10::AutoGradMode grad_mode(true);
      const Call c = run(p, true);
      const Shape& s = p.shape;
      const at::Tensor d_o = seen(nested_of(d_out, c.lens.q, p.gap_q, p.tail, order(), scalar_type(p.dtype), device_of(dev_), p.misaligned));
      const std::vector<at::Tensor> g = library_call(name(), "autograd backward", [&] {
        return torch::autograd::grad({c.out}, {c.q, c.k, c.v}, {d_o}, false, false, true);
      });
      // A leaf the output does not depend on (no query anywhere) has no gradient: zero.
      auto gradient = [&](size_t i, int64_t heads, int64_t seq, int64_t d, const std::vector<int64_t>& lens, const char* what) {
        if (!g[i].defined()) return Tensor({s.batch, heads, seq, d});
        return dense_of(g[i], order(), heads, seq, d, lens, name(), what);
      };
      return Gradients{gradient(0, s.heads_q, s.seq_q, s.head_dim_qk, c.lens.q, "dQ"),
                       gradient(1, s.heads_kv, s.seq_kv, s.head_dim_qk, c.lens.kv, "dK"),
                       gradient(2, s.heads_kv, s.seq_kv, s.head_dim_v, c.lens.kv, "dV")};
    });
  }

 private:
  struct Call {
    CallLens lens;
    at::Tensor q, k, v;  // the nested leaves, components in order()
    at::Tensor out;      // nested [B][H][L_b][Dv]
  };

  ComponentOrder order() const { return kernel_ == NestedSdpaKernel::math ? ComponentOrder::heads_rows : ComponentOrder::rows_heads; }
  // The leaves as the call sees them: [B][H][L_b][D].
  at::Tensor seen(const at::Tensor& t) const { return order() == ComponentOrder::rows_heads ? t.transpose(1, 2) : t; }

  Call run(const Problem& p, bool requires_grad) const {
    const auto mask = fit_mask(p);
    if (!mask) throw UnsupportedError(*torch_nested_refusal(kernel_, p));
    const bool is_causal = mask->kind == OpMask::Kind::causal_top_left;
    const at::Device dev = device_of(dev_);
    const at::ScalarType st = scalar_type(p.dtype);
    Call c;
    c.lens = call_lens(p);
    {
      c10::AutoGradMode no_grad(false);
      c.q = nested_of(p.q, c.lens.q, p.gap_q, p.tail, order(), st, dev, p.misaligned);
      c.k = nested_of(p.k, c.lens.kv, p.gap_kv, p.tail, order(), st, dev, p.misaligned);
      c.v = nested_of(p.v, c.lens.kv, p.gap_kv, p.tail, order(), st, dev, p.misaligned);
    }
    c.q = c.q.detach().set_requires_grad(requires_grad);
    c.k = c.k.detach().set_requires_grad(requires_grad);
    c.v = c.v.detach().set_requires_grad(requires_grad);
    // The public entry point with one kernel enabled: where it has none for the inputs it warns
    // why and fails; the warnings are the refusal's reason.
    WarningCollector warnings(kPrototypeWarning);
    c10::WarningUtils::WarningHandlerGuard warning_guard(&warnings);
    c10::WarningUtils::WarnAlways warn_always(true);
    SdpaKernelsEnabled enabled({.flash = kernel_ == NestedSdpaKernel::flash, .math = kernel_ == NestedSdpaKernel::math});
    try {
      c.out = library_call(name(), "scaled_dot_product_attention", [&] {
        return at::scaled_dot_product_attention(seen(c.q), seen(c.k), seen(c.v), std::nullopt, 0.0, is_causal, p.scale,
                                                p.shape.group() > 1);
      });
    } catch (const UnsupportedError& e) {
      const std::string why = reasons_of_enabled_kernel(warnings.text());
      if (why.empty()) throw;
      throw UnsupportedError(std::string(e.what()) + " (" + message_safe(why, 300) + ")");
    }
    return c;
  }

  NestedSdpaKernel kernel_;
  Device dev_;
};

}  // namespace

std::optional<std::string> torch_nested_refusal(NestedSdpaKernel kernel, const Problem& p) {
  const std::string who = std::string("torch.nested.") + kernel_name(kernel);
  const std::optional<OpMask> mask = fit_mask(p);
  if (!mask)
    return who +
           " declines the mask: the dense mask is not, in every sequence and head alike, all visible or causal top-left over that "
           "sequence's queries and keys in this call (what SDPA's is_causal means; nested SDPA takes no mask tensor)";
  if (kernel == NestedSdpaKernel::math) return std::nullopt;
  // Known bugs of LibTorch 2.11's nested path to the fused kernels (docs/findings/LEDGER.md).
  if (p.misaligned)
    return who + " declines a misaligned case: LibTorch 2.11 hands a nested view whose components start 2 bytes past alignment to "
                 "the kernel, which faults with a sticky misaligned address (s61-torch-nested-misaligned-fault)";
  const CallLens l = call_lens(p);
  if ((p.gap_q > 0 || p.gap_kv > 0) && p.shape.batch > 1)
    return who + " declines gaps between sequences (gap_q = " + std::to_string(p.gap_q) + ", gap_kv = " + std::to_string(p.gap_kv) +
           "): LibTorch 2.11's nested preprocessing reads the components as if packed back to back, so a gap's rows reach the "
           "kernel as the next sequence's (s61-torch-nested-gaps-read-as-rows)";
  if (kernel == NestedSdpaKernel::flash && mask->kind == OpMask::Kind::causal_top_left)
    for (size_t b = 0; b < l.q.size(); ++b)
      if (l.q[b] > 0 && l.kv[b] > 0 && l.q[b] != l.kv[b])
        return who + " declines is_causal where a sequence has " + std::to_string(l.q[b]) + " queries and " + std::to_string(l.kv[b]) +
               " keys: LibTorch 2.11's nested flash path aligns each sequence's causal mask bottom-right, not top-left as SDPA "
               "documents and its nested efficient and cuDNN paths compute (s61-torch-nested-flash-causal-bottom-right)";
  return std::nullopt;
}

std::unique_ptr<Backend> make_torch_nested_backend(NestedSdpaKernel kernel, Device device) {
  return std::make_unique<TorchNestedBackend>(kernel, device);
}

}  // namespace attnfuzz
