#pragma once
// Shared by the LibTorch oracles and backends (included only by their .cpp files, which see ATen).
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <c10/util/Exception.h>

#include <array>
#include <string>

#include <limits>
#include <map>
#include <new>
#include <stdexcept>
#include <string_view>
#include <vector>

#include "harness/parallel.h"
#include "harness/problem.h"
#include "oracles/torch_oracle.h"

namespace attnfuzz::torch_detail {

// LibTorch's CPU allocator failed: this process is out of host memory.
inline bool host_out_of_memory(const c10::Error& e) {
  return std::string_view(e.what_without_backtrace()).find("DefaultCPUAllocator") != std::string_view::npos;
}

// LibTorch errors carry a C++ backtrace in what(); findings keep the message only. Out of host
// memory becomes std::bad_alloc: the process's limit, never a finding (harness/differential.cpp).
template <class F>
auto rethrow_plain(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const c10::Error& e) {
    if (host_out_of_memory(e)) throw std::bad_alloc();
    throw std::runtime_error(e.what_without_backtrace());
  }
}

// Exactly the SDPA kernels named enabled for the lifetime of the guard, the previous flags restored
// after it. The flags are process-wide (at::globalContext); campaign workers are single-threaded
// processes.
struct SdpaKernels {
  bool flash = false, efficient = false, cudnn = false, math = false;
};
class SdpaKernelsEnabled {
 public:
  explicit SdpaKernelsEnabled(SdpaKernels k) {
    auto& c = at::globalContext();
    saved_ = {c.userEnabledFlashSDP(), c.userEnabledMemEfficientSDP(), c.userEnabledCuDNNSDP(), c.userEnabledMathSDP(),
              c.userEnabledOverrideableSDP()};
    c.setSDPUseFlash(k.flash);
    c.setSDPUseMemEfficient(k.efficient);
    c.setSDPUseCuDNN(k.cudnn);
    c.setSDPUseMath(k.math);
    c.setSDPUseOverrideable(false);
  }
  ~SdpaKernelsEnabled() {
    auto& c = at::globalContext();
    c.setSDPUseFlash(saved_[0]);
    c.setSDPUseMemEfficient(saved_[1]);
    c.setSDPUseCuDNN(saved_[2]);
    c.setSDPUseMath(saved_[3]);
    c.setSDPUseOverrideable(saved_[4]);
  }
  SdpaKernelsEnabled(const SdpaKernelsEnabled&) = delete;
  SdpaKernelsEnabled& operator=(const SdpaKernelsEnabled&) = delete;

 private:
  std::array<bool, 5> saved_{};
};

// LibTorch explains why a kernel cannot run through warnings; this keeps them, but for those
// containing `ignored` (one that is no reason, only noise on stderr).
class WarningCollector final : public c10::WarningHandler {
 public:
  explicit WarningCollector(std::string ignored = {}) : ignored_(std::move(ignored)) {}
  void process(const c10::Warning& w) override {
    std::string m = w.msg();
    if (!ignored_.empty() && m.find(ignored_) != std::string::npos) return;
    if (!m.empty() && text_.find(m) == std::string::npos) text_ += (text_.empty() ? "" : " | ") + m;
  }
  const std::string& text() const { return text_; }

 private:
  std::string ignored_, text_;
};

inline at::ScalarType scalar_type(DType d) {
  switch (d) {
    case DType::f32:
      return at::kFloat;
    case DType::f16:
      return at::kHalf;
    case DType::bf16:
      return at::kBFloat16;
  }
  return at::kFloat;
}

inline at::Device device_of(Device d) { return d == Device::cuda ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU); }

// A copy of `t` on `dev` (never a view of the harness's memory). To a GPU the upload is that
// copy: the host copy first (clone) only for the CPU.
// The float64 copy of host tensor `t` that a CUDA device already holds, where the build keeps
// such copies (oracles/device_mirror.h: the GPU oracles have sent the case's Q, K, V, dO and bias
// before any backend runs); read only. Set once by backends/torch_sdpa_cuda.cpp in the gpu build;
// null, or an undefined tensor back: the host converts and sends.
using DeviceCopyOf = at::Tensor (*)(const Tensor& t, at::Device dev);
inline DeviceCopyOf& device_copy_of() {
  static DeviceCopyOf f = nullptr;
  return f;
}
inline at::Tensor kept_on(const Tensor& t, at::Device dev) {
  return dev.is_cuda() && !t.data.empty() && device_copy_of() ? device_copy_of()(t, dev) : at::Tensor();
}

inline at::Tensor to_torch(const Tensor& t, at::Device dev) {
  if (const at::Tensor kept = kept_on(t, dev); kept.defined()) return kept.clone();
  const at::Tensor host = at::from_blob(const_cast<double*>(t.ptr()), t.shape, at::TensorOptions().dtype(at::kDouble));
  return dev.is_cpu() ? host.clone() : host.to(dev);
}

// A copy of `t` in `st` on `dev`. To a GPU it is converted on the device from the copy kept
// there, or else on the host first (over LibTorch's threads), so that a 16-bit tensor crosses
// the bus in a quarter of float64's bytes: the same rounding (the same conversion code on both
// sides), and the harness's values are exact in the case dtype anyway.
inline at::Tensor to_torch(const Tensor& t, at::ScalarType st, at::Device dev) {
  if (const at::Tensor kept = kept_on(t, dev); kept.defined()) return st == at::kDouble ? kept.clone() : kept.to(st);
  const at::Tensor host = at::from_blob(const_cast<double*>(t.ptr()), t.shape, at::TensorOptions().dtype(at::kDouble));
  if (st == at::kDouble) return dev.is_cpu() ? host.clone() : host.to(dev);
  return host.to(st).to(dev);
}

// `t` in float64 on the host. A 16- or 32-bit tensor comes to the host in its own type (a
// quarter or half of float64's bytes) and is widened here, over threads at real size: widening
// is exact, so the values are those of a conversion anywhere else.
inline Tensor from_torch(const at::Tensor& t) {
  const at::ScalarType st = t.scalar_type();
  const bool narrow = st == at::kBFloat16 || st == at::kHalf || st == at::kFloat;
  at::Tensor c = narrow ? t.detach().to(at::kCPU).contiguous() : t.detach().to(at::kCPU, at::kDouble).contiguous();
  Tensor out(std::vector<int64_t>(c.sizes().begin(), c.sizes().end()), uninitialized);
  double* dst = out.ptr();
  auto widen = [&](const auto* src) {
    parallel_for(out.numel(), [&](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) dst[i] = static_cast<double>(static_cast<float>(src[i]));
    });
  };
  if (st == at::kBFloat16)
    widen(c.data_ptr<at::BFloat16>());
  else if (st == at::kHalf)
    widen(c.data_ptr<at::Half>());
  else if (st == at::kFloat)
    widen(c.data_ptr<float>());
  else
    std::copy(c.data_ptr<double>(), c.data_ptr<double>() + c.numel(), dst);
  return out;
}

// A view at a tensor's placement (harness/layout.h): its strides and storage offset in
// `storage`, a flat buffer of at least the placement's extent.
inline at::Tensor view_at(const at::Tensor& storage, const Placement& pl) {
  const std::vector<int64_t> sizes(pl.sizes.begin(), pl.sizes.begin() + pl.ndim), strides(pl.strides.begin(), pl.strides.begin() + pl.ndim);
  return storage.as_strided(sizes, strides, pl.offset);
}

// Views of `roles` as a real caller lays them out: each in a buffer of its extent, the members
// of a packed group views of one buffer, every element outside them holding the case's
// surround (harness/layout.h). Unfilled (filled false) where only their sizes, strides and
// offsets are looked at: no kernel, no device round trip.
inline std::map<TensorId, at::Tensor> laid_out_views(const Problem& p, std::initializer_list<TensorId> roles,
                                                       const at::TensorOptions& opts, bool filled = true) {
  std::map<TensorId, at::Tensor> buffers, views;
  // The surround of the views' own element type (float64 for the f64 backends).
  const at::ScalarType st = opts.dtype().toScalarType();
  const Surround::Fill fill = p.layouts.surround.fill;
  const double around = st == at::kDouble && fill == Surround::Fill::large
                            ? std::numeric_limits<double>::max()
                            : surround_value(fill, st == at::kHalf ? DType::f16 : st == at::kBFloat16 ? DType::bf16 : DType::f32);
  for (TensorId r : roles) {
    const Placement pl = place(p.layouts, r, p.shape);
    at::Tensor& buf = buffers[pl.buffer];
    if (!buf.defined()) buf = !filled ? at::empty({pl.extent}, opts) : around == 0.0 ? at::zeros({pl.extent}, opts) : at::full({pl.extent}, around, opts);
    views[r] = view_at(buf, pl);
  }
  return views;
}

struct LaidOutInputs {
  at::Tensor q, k, v;
};

// Q, K, V with their values, in `st` on `dev`, at their placements.
inline LaidOutInputs laid_out_inputs(const Problem& p, at::ScalarType st, at::Device dev) {
  using R = TensorId;
  auto views = laid_out_views(p, {R::Q, R::K, R::V}, at::TensorOptions().dtype(st).device(dev));
  views[R::Q].copy_(to_torch(p.q, st, dev));
  views[R::K].copy_(to_torch(p.k, st, dev));
  views[R::V].copy_(to_torch(p.v, st, dev));
  return {views[R::Q], views[R::K], views[R::V]};
}

// One tensor with its values at the placement of `role`.
inline at::Tensor laid_out(const Problem& p, TensorId role, const Tensor& t, at::ScalarType st, at::Device dev) {
  at::Tensor view = laid_out_views(p, {role}, at::TensorOptions().dtype(st).device(dev))[role];
  view.copy_(to_torch(t, st, dev));
  return view;
}

// The score bias (harness/case.h, ScoreBias) in `st` on `dev`, in its broadcast shape
// [B|1][Hq|1][Sq|1][Skv|1], as a caller hands it over; undefined when the call has none. Its
// values are in the case dtype, so `st` holds them exactly.
inline at::Tensor bias_tensor(const Problem& p, at::ScalarType st, at::Device dev) {
  if (!p.has_bias()) return {};
  return to_torch(p.bias, st, dev);
}

// SDPA's float attn_mask for a call with a bias: the bias where `visible`, -inf elsewhere. With
// every key visible, the bias itself in its broadcast shape (the kernels' broadcast of a mask's
// dimensions of extent 1 is then what is tested).
// `bias` may be a leaf that requires a gradient: masked_fill passes none to the masked entries.
inline at::Tensor biased_mask_of(const at::Tensor& bias, const at::Tensor& visible) {
  if (visible.all().item<bool>()) return bias;
  return bias.expand(visible.sizes()).masked_fill(visible.logical_not(), -std::numeric_limits<double>::infinity());
}
inline at::Tensor biased_mask(const Problem& p, const at::Tensor& visible, at::ScalarType st, at::Device dev) {
  return biased_mask_of(bias_tensor(p, st, dev), visible);
}

// dBias from autograd's gradient of the bias leaf (undefined where nothing reached it: zeros).
inline Tensor dbias_from(const at::Tensor& grad, const Problem& p) {
  return grad.defined() ? from_torch(grad.reshape(p.bias.shape)) : Tensor(p.bias.shape);
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
    if (p.ragged()) {
      lens_q_ = at::tensor(p.lens_q, opts).view({-1, 1, 1, 1});
      lens_kv_ = at::tensor(p.lens_kv, opts).view({-1, 1, 1, 1});
    }
  }

  at::Tensor build() const {
    const Shape& s = p_.shape;
    at::Tensor m = p_.mask_expr ? eval(*p_.mask_expr) : at::ones({1, 1, 1, 1}, at::kBool);
    for (const auto& r : p_.restrictions) {
      at::Tensor in = band(r.left, r.right, r.align);
      m = m.logical_and(r.inside ? in : in.logical_not());
    }
    // A ragged batch: nothing past a sequence's lengths is visible.
    if (p_.ragged()) m = m.logical_and(q_.lt(lens_q_)).logical_and(kv_.lt(lens_kv_));
    return m.expand({s.batch, s.heads_q, s.seq_q, s.seq_kv}).contiguous();
  }

 private:
  // Skv - Sq of each sequence ([B][1][1][1] for a ragged batch, whose sequences align their own
  // diagonals), 0 top-left.
  at::Tensor offset(Align a) const {
    if (a != Align::bottom_right) return at::zeros({1, 1, 1, 1}, at::kLong);
    if (!p_.ragged()) return at::full({1, 1, 1, 1}, p_.full_seq_kv - p_.full_seq_q, at::kLong);
    return lens_kv_ - lens_q_;
  }

  at::Tensor band(int64_t left, int64_t right, Align a) const {
    // On the difference kv - q': q' - left or q' + right would overflow for huge windows.
    const at::Tensor d = kv_ - (q_ + offset(a));
    at::Tensor m = at::ones({1, 1, 1, 1}, at::kBool);
    if (left >= 0) m = m.logical_and(d.ge(-left));
    if (right >= 0) m = m.logical_and(d.le(right));
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
      case K::all:
        return at::ones({1, 1, 1, 1}, at::kBool);
      case K::causal:
        return kv_.le(q_ + offset(m.align));
      case K::sliding_window:
        return band(m.left, m.right, m.align);
      case K::document: {
        at::Tensor sq = segment_ids(m.segments_q, q_), sk = segment_ids(m.segments_kv, kv_);
        return sq.eq(sk).logical_and(sq.ge(0));
      }
      case K::prefix_lm:
        return kv_.lt(m.prefix).logical_or(kv_.le(q_ + offset(m.align)));
      case K::block_sparse: {
        std::vector<uint8_t> bits;
        for (const auto& row : m.rows)
          for (char ch : row) bits.push_back(ch == '1');
        at::Tensor grid = at::tensor(at::ArrayRef<uint8_t>(bits), at::kByte).view({static_cast<int64_t>(m.rows.size()), -1}).to(at::kBool);
        return grid.index({at::floor_divide(q_, m.block_q).view({-1, 1}), at::floor_divide(kv_, m.block_kv).view({1, -1})})
            .view({1, 1, q_.numel(), kv_.numel()});
      }
      case K::random: {
        Problem leaf;
        leaf.shape = p_.shape;
        leaf.mask_expr = &m;
        leaf.q_offset = p_.q_offset;
        leaf.kv_offset = p_.kv_offset;
        leaf.full_seq_q = p_.full_seq_q;
        leaf.full_seq_kv = p_.full_seq_kv;
        leaf.lens_q = p_.lens_q;
        leaf.lens_kv = p_.lens_kv;
        materialize_mask(leaf);
        const Shape& s = p_.shape;
        return at::from_blob(leaf.mask.data(), {s.batch, s.heads_q, s.seq_q, s.seq_kv}, at::kByte).to(at::kBool).clone();
      }
      case K::not_:
        return eval(m.args.at(0)).logical_not();
      case K::and_:
      case K::or_: {
        at::Tensor acc = eval(m.args.at(0));
        for (size_t i = 1; i < m.args.size(); ++i)
          acc = m.kind == K::and_ ? acc.logical_and(eval(m.args[i])) : acc.logical_or(eval(m.args[i]));
        return acc;
      }
    }
    return {};
  }

  const Problem& p_;
  at::Tensor q_, kv_, lens_q_, lens_kv_;
};

}  // namespace attnfuzz::torch_detail
