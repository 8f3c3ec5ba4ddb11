#include "oracles/gpu_oracles.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <type_traits>

#include "harness/compose.h"
#include "oracles/gpu_error_terms.h"
#include "oracles/gpu_model.h"
#include "oracles/gpu_verdict.h"

namespace attnfuzz {
namespace {

// The Problem's tensors as the kernels take them. The dense mask is [B][Hq][Sq][Skv]; when
// every (b, h) plane is the same (every mask kind but random ones) only one plane travels. The
// bias travels in its broadcast shape.
gpu::HostAttention host_attention(const Problem& p) {
  const Shape& s = p.shape;
  gpu::HostAttention a;
  a.batch = s.batch, a.heads_q = s.heads_q, a.heads_kv = s.heads_kv;
  a.seq_q = s.seq_q, a.seq_kv = s.seq_kv, a.dim_qk = s.head_dim_qk, a.dim_v = s.head_dim_v;
  a.scale = p.scale;
  a.softcap = p.softcap;
  a.q = p.q.ptr(), a.k = p.k.ptr(), a.v = p.v.ptr();
  a.mask = p.mask.data();
  if (p.has_bias()) {
    a.bias = p.bias.ptr();
    for (size_t d = 0; d < 4; ++d) a.bias_extent[d] = p.bias.shape[d];
  }
  const size_t plane = static_cast<size_t>(s.seq_q * s.seq_kv), planes = static_cast<size_t>(s.batch * s.heads_q);
  a.mask_one_plane = true;
  if (p.mask_expr && !varies_by_head(*p.mask_expr) && !p.ragged()) return a;
  for (size_t i = 1; i < planes && a.mask_one_plane; ++i)
    a.mask_one_plane = std::memcmp(p.mask.data(), p.mask.data() + i * plane, plane) == 0;
  return a;
}

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

Forward run_forward(const Problem& p, const gpu::Numerics& n, gpu::Timing* t) {
  const auto t0 = Clock::now();
  const Shape& s = p.shape;
  // Wholly overwritten by the download.
  Forward f{Tensor({s.batch, s.heads_q, s.seq_q, s.head_dim_v}, uninitialized), Tensor({s.batch, s.heads_q, s.seq_q}, uninitialized)};
  const gpu::HostAttention a = host_attention(p);
  const double host_ms = ms_since(t0);
  gpu::forward(a, n, f.o.ptr(), f.lse.ptr(), t);
  if (t) t->host_ms = host_ms;
  return f;
}

Gradients run_backward(const Problem& p, const gpu::Numerics& n, const Forward& fwd, const Tensor& d_out, const Tensor& d_lse,
                       gpu::Timing* t) {
  if (p.bias_requires_grad) throw UnsupportedError("dBias is not computed on the GPU yet (the kernels return dQ, dK and dV only)");
  const Shape& s = p.shape;
  const auto t0 = Clock::now();
  Gradients g{Tensor({s.batch, s.heads_q, s.seq_q, s.head_dim_qk}, uninitialized), Tensor({s.batch, s.heads_kv, s.seq_kv, s.head_dim_qk}, uninitialized),
              Tensor({s.batch, s.heads_kv, s.seq_kv, s.head_dim_v}, uninitialized)};  // wholly overwritten by the download
  const gpu::HostAttention a = host_attention(p);
  const double host_ms = ms_since(t0);
  gpu::backward(a, n, fwd.o.ptr(), d_out.ptr(), d_lse.ptr(), g.dq.ptr(), g.dk.ptr(), g.dv.ptr(), t);
  if (t) t->host_ms = host_ms;
  return g;
}

// harness/verdict.h's VerdictReducer on oracles/gpu_verdict.cu.
class CudaVerdictReducer final : public VerdictReducer {
 public:
  ErrorStats compare(const Tensor& a, const Tensor& ref, const std::vector<uint8_t>* skip_rows, double overflow) override {
    if (a.shape != ref.shape) throw std::invalid_argument("compare: shapes differ");
    if (ref.numel() == 0) return attnfuzz::compare(a, ref, skip_rows, overflow);
    const gpu::CompareSums c = gpu::compare(kept(a), kept(ref), skip_rows ? &kept(*skip_rows) : nullptr, shape_of(ref), overflow);
    return stats_of(c, ref.numel());
  }

  std::optional<VerdictSums> sums(const JudgeInput& in, const ToleranceRule& rule) override {
    const Tensor& ref = *in.ref;
    if (ref.numel() == 0 || std::max<int64_t>(1, rule.tile) > gpu::kMaxTileRows) return std::nullopt;
    if (in.impl->shape != ref.shape) throw std::invalid_argument("compare: shapes differ");
    const gpu::VerdictShape s = shape_of(ref);
    const Tensor* row_dof = in.row_dof && !in.row_dof->data.empty() ? in.row_dof : nullptr;
    if (row_dof && row_dof->numel() != static_cast<size_t>(s.rows)) throw std::invalid_argument("judge_tensor: row_dof is not one per row");
    const gpu::SharedCopy impl = gpu::device_copy(in.impl->ptr(), in.impl->numel());
    gpu::VerdictArrays a;
    a.impl = impl.get();
    a.ref = &kept(ref);
    a.baseline_fwd = in.baseline_fwd ? &kept(*in.baseline_fwd) : nullptr;
    a.baseline_rev = in.baseline_rev ? &kept(*in.baseline_rev) : nullptr;
    a.sigma = in.sigma ? &kept(*in.sigma) : nullptr;
    a.row_dof = row_dof ? &kept(*row_dof) : nullptr;
    a.skip_rows = in.skip_rows ? &kept(*in.skip_rows) : nullptr;
    a.tiny = in.tiny;
    a.overflow = in.overflow;
    const gpu::VerdictTotals t = gpu::totals(a, s);
    // NaN or Inf where the reference is finite: the host decides which the contract excuses.
    if (t.impl.nonfinite_mismatch > 0) return std::nullopt;
    VerdictSums v;
    v.err = stats_of(t.impl, ref.numel());
    if (in.baseline_fwd) v.baseline_fwd = stats_of(t.baseline_fwd, ref.numel());
    if (in.baseline_rev) v.baseline_rev = stats_of(t.baseline_rev, ref.numel());
    v.kappa = t.model2 > 0 ? std::sqrt(t.base2 / t.model2) : 0.0;
    v.model_rms = t.used > 0 ? std::sqrt(t.model2 / t.used) : 0.0;
    const int64_t tile = std::max<int64_t>(1, rule.tile);
    const gpu::VerdictBlocks b = gpu::blocks(a, s, std::max(v.kappa, rule.kappa_min), in.row_scale_variance, tile);
    v.rows.resize(static_cast<size_t>(s.rows));
    for (size_t r = 0; r < v.rows.size(); ++r) {
      const double* f = &b.rows[r * gpu::kRowFields];
      v.rows[r] = {f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8], f[9], b.hashes[r]};
    }
    v.tiles.resize(b.tiles.size() / gpu::kTileFields);
    for (size_t i = 0; i < v.tiles.size(); ++i) {
      const double* f = &b.tiles[i * gpu::kTileFields];
      v.tiles[i] = {f[0], f[1], f[2], f[3]};
    }
    return v;
  }

 private:
  static gpu::VerdictShape shape_of(const Tensor& ref) {
    gpu::VerdictShape s;
    s.width = ref.shape.size() > 3 ? ref.shape[3] : 1;
    s.seq = ref.shape.at(2);
    s.rows = static_cast<int64_t>(ref.numel()) / s.width;
    return s;
  }
  static ErrorStats stats_of(const gpu::CompareSums& c, size_t count) {
    return error_stats_from_sums(c.diff2, c.ref2, c.sum_abs, static_cast<size_t>(c.finite), c.max_abs, c.ref_max_abs,
                                 static_cast<size_t>(c.nonfinite_mismatch), count);
  }
  // A tensor's device copy (the mirror's: a reference or a baseline the oracles downloaded is
  // found there, not uploaded), found again by its address for the rest of the case without
  // digesting it each time. A few of its elements' bits, sampled, tell a tensor that reused a
  // freed one's address (which the contract rules out) from the one kept, and it is then looked
  // up again.
  struct Kept {
    size_t n = 0;
    uint64_t sample = 0;
    gpu::SharedCopy device;
  };
  template <class T>
  static uint64_t sample_of(const T* p, size_t n) {
    uint64_t h = 1469598103934665603ull ^ n;
    const size_t step = std::max<size_t>(1, n / 61);
    for (size_t i = 0; i < n; i += step) {
      uint64_t bits = 0;
      std::memcpy(&bits, p + i, sizeof(T));
      h = (h ^ bits) * 1099511628211ull;
    }
    return h;
  }
  template <class T>
  const gpu::DeviceCopy& keep(const T* p, size_t n) {
    Kept& k = kept_[p];
    const uint64_t sample = sample_of(p, n);
    if (!k.device || k.n != n || k.sample != sample) {
      k.device = gpu::device_copy(p, n);
      k.n = n, k.sample = sample;
    }
    return *k.device;
  }
  const gpu::DeviceCopy& kept(const Tensor& t) { return keep(t.ptr(), t.numel()); }
  const gpu::DeviceCopy& kept(const std::vector<uint8_t>& rows) { return keep(rows.data(), rows.size()); }
  std::map<const void*, Kept> kept_;
};

}  // namespace

std::unique_ptr<VerdictReducer> make_cuda_verdict_reducer() { return std::make_unique<CudaVerdictReducer>(); }

bool cuda_kernels_available(std::string* why) { return gpu::device_available(why); }

ModelOfOutput cuda_output_model(TensorId t, const TermTensors& terms, const Tensor& ref, const RoundingUnits& u) {
  const auto [rows, width] = model_shape(t, terms, ref);
  const size_t n = ref.numel(), row_count = width > 0 ? n / static_cast<size_t>(width) : 0;
  // Every term of the element's shape, every source one per row; anything else (and the shape
  // errors model_sigma_and_row_dof reports) goes to the host.
  bool fits = width > 0 && terms.operand.shape == ref.shape;
  for (const Tensor* x : {&terms.stored, &terms.score, &terms.via_op, &terms.via_st, &terms.via_acc, &terms.via_sc, &terms.underflow,
                          &terms.subnormal, &terms.normalizer_lse, &terms.normalizer_acc, &terms.truncation})
    fits = fits && (x->data.empty() || x->numel() == n);
  for (const Tensor* x : {&terms.operand_sources, &terms.score_sources, &terms.subnormal_sources, &terms.row_lse, &terms.direction_sources})
    fits = fits && (x->data.empty() || x->numel() == row_count);
  if (!fits || n == 0) return model_sigma_and_row_dof(t, terms, ref, u);
  gpu::ModelInput in;
  in.output = t;
  in.u = u;
  in.terms = model_row::term_arrays(terms);
  in.ref = ref.ptr();
  in.rows = static_cast<int64_t>(row_count);
  in.width = width;
  in.row_dof = rows;
  ModelOfOutput m{Tensor(ref.shape, uninitialized), rows ? Tensor({ref.shape[0], ref.shape[1], ref.shape[2]}, uninitialized) : Tensor()};
  gpu::output_model(in, m.sigma.ptr(), rows ? m.row_dof.ptr() : nullptr);
  return m;
}

bool gpu_via_blocks() {
  const char* e = std::getenv("ATTNFUZZ_GPU_VIA_BLOCKS");
  return e && std::string(e) == "1";
}

ErrorTerms cuda_error_terms(const Problem& p, const Forward& fwd, const Tensor& d_out, const Tensor& d_lse, gpu::Timing* t) {
  const auto t0 = Clock::now();
  const Shape& s = p.shape;
  const std::vector<int64_t> oq{s.batch, s.heads_q, s.seq_q, s.head_dim_v}, lq{s.batch, s.heads_q, s.seq_q},
      qq{s.batch, s.heads_q, s.seq_q, s.head_dim_qk}, kk{s.batch, s.heads_kv, s.seq_kv, s.head_dim_qk},
      vv{s.batch, s.heads_kv, s.seq_kv, s.head_dim_v};
  // Shapes and lengths as oracles/error_terms.cpp makes them. Every tensor the download below
  // wholly overwrites is left unset (filling them was a twentieth of a real-size case's wall
  // time); `stored` stays zero where the kernels leave it (O, LSE, dQ, and dK, dV of a group of
  // one), and so does the LSE's operand part.
  ErrorTerms e;
  const double kv = reduction_length(TensorId::O, s), q_group = reduction_length(TensorId::dK, s);
  auto unset = [](const std::vector<int64_t>& shape) { return Tensor(shape, uninitialized); };
  e[TensorId::O] = TermTensors{unset(oq), Tensor(oq), unset(oq), kv};
  e[TensorId::LSE] = TermTensors{Tensor(lq), Tensor(lq), unset(lq), kv};  // the LSE has no operand part
  e[TensorId::dQ] = TermTensors{unset(qq), Tensor(qq), unset(qq), kv, unset(qq), unset(qq), unset(qq), unset(qq)};
  e[TensorId::dK] = TermTensors{unset(kk), Tensor(kk), unset(kk), q_group, unset(kk), unset(kk), unset(kk), unset(kk)};
  e[TensorId::dV] = TermTensors{unset(vv), Tensor(vv), unset(vv), q_group};
  gpu::HostErrorTerms out;
  // The kernels' five outputs (dBias is not computed on the GPU: a case that asks it is judged by the CPU set).
  for (TensorId o : {TensorId::O, TensorId::LSE, TensorId::dQ, TensorId::dK, TensorId::dV}) {
    const auto i = output_index(o);
    out.operand[i] = e[o].operand.ptr();
    out.score[i] = e[o].score.ptr();
  }
  for (TensorId o : {TensorId::O, TensorId::dQ, TensorId::dK, TensorId::dV}) {
    const auto i = output_index(o);
    const std::vector<int64_t> rows(e[o].operand.shape.begin(), e[o].operand.shape.begin() + 3);
    e[o].operand_sources = unset(rows);
    e[o].score_sources = unset(rows);
    out.operand_sources[i] = e[o].operand_sources.ptr();
    out.score_sources[i] = e[o].score_sources.ptr();
  }
  e[TensorId::LSE].truncation = unset(lq);
  out.truncation_lse = e[TensorId::LSE].truncation.ptr();
  e[TensorId::dK].underflow = unset(kk);
  e[TensorId::dV].underflow = unset(vv);
  out.underflow_dk = e[TensorId::dK].underflow.ptr();
  out.underflow_dv = e[TensorId::dV].underflow.ptr();
  if (p.dtype == DType::f16)  // the subnormal part (harness/error_model.h)
    for (TensorId o : {TensorId::O, TensorId::dQ, TensorId::dK, TensorId::dV}) {
      const auto i = output_index(o);
      e[o].subnormal = unset(e[o].operand.shape);
      e[o].subnormal_sources = unset(e[o].operand_sources.shape);
      out.subnormal[i] = e[o].subnormal.ptr();
      out.subnormal_sources[i] = e[o].subnormal_sources.ptr();
    }
  out.stored_dk = e[TensorId::dK].stored.ptr();
  out.stored_dv = e[TensorId::dV].stored.ptr();
  for (TensorId o : {TensorId::dQ, TensorId::dK}) {
    double** via = o == TensorId::dQ ? out.via_dq : out.via_dk;
    TermTensors& tt = e[o];
    via[0] = tt.via_op.ptr(), via[1] = tt.via_st.ptr(), via[2] = tt.via_acc.ptr(), via[3] = tt.via_sc.ptr();
  }
  // dK's via blocks (harness/error_model.h, "D's error across key rows"): asked for with
  // ATTNFUZZ_GPU_VIA_BLOCKS=1 until they have run on a GPU (docs/gpu.md); without them the
  // verdict counts a block's rows as independent, as before.
  if (gpu_via_blocks()) {
    TermTensors& tk = e[TensorId::dK];
    size_via_blocks(tk, s);
    out.via_block_tile = tk.via_block_tile;
    out.via_tile_sum = tk.via_tile_sum.data(), out.via_tile_sum_sq = tk.via_tile_sum_sq.data();
    out.via_head_sum = tk.via_head_sum.data(), out.via_head_sum_sq = tk.via_head_sum_sq.data();
  }
  const gpu::HostAttention a = host_attention(p);
  const double host_ms = ms_since(t0);
  gpu::error_terms(a, fwd.o.ptr(), fwd.lse.ptr(), d_out.ptr(), d_lse.ptr(), out, t);
  if (t) t->host_ms = host_ms, t->release_ms = ms_since(t0) - host_ms - t->upload_ms - t->compute_ms - t->download_ms;
  return e;
}

std::string CudaReference64Backend::version() const { return "attnfuzz kernels float64 (" + gpu::device_description() + ")"; }

Forward CudaReference64Backend::forward(const Problem& p) { return run_forward(p, gpu::Numerics{}, &timing_); }

Gradients CudaReference64Backend::backward(const Problem& p, const Forward& fwd, const Tensor& d_out, const Tensor& d_lse) {
  return run_backward(p, gpu::Numerics{}, fwd, d_out, d_lse, &timing_);
}

std::string CudaEmulatedBackend::name() const {
  return std::string("cuda.emulated.") + std::string(to_string(contract_)) + (reversed_ ? ".reversed" : "");
}

std::string CudaEmulatedBackend::version() const { return "attnfuzz kernels (" + gpu::device_description() + ")"; }

Forward CudaEmulatedBackend::forward(const Problem& p) { return run_forward(p, numerics(p), nullptr); }

Gradients CudaEmulatedBackend::backward(const Problem& p, const Forward& fwd, const Tensor& d_out, const Tensor& d_lse) {
  return run_backward(p, numerics(p), fwd, d_out, d_lse, nullptr);
}

}  // namespace attnfuzz
