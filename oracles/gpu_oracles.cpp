#include "oracles/gpu_oracles.h"

#include <chrono>
#include <cstring>

#include "harness/compose.h"
#include "oracles/gpu_error_terms.h"

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

}  // namespace

bool cuda_kernels_available(std::string* why) { return gpu::device_available(why); }

ErrorTerms cuda_error_terms(const Problem& p, const Forward& fwd, const Tensor& d_out, const Tensor& d_lse, gpu::Timing* t) {
  const auto t0 = Clock::now();
  const Shape& s = p.shape;
  const std::vector<int64_t> oq{s.batch, s.heads_q, s.seq_q, s.head_dim_v}, lq{s.batch, s.heads_q, s.seq_q},
      qq{s.batch, s.heads_q, s.seq_q, s.head_dim_qk}, kk{s.batch, s.heads_kv, s.seq_kv, s.head_dim_qk},
      vv{s.batch, s.heads_kv, s.seq_kv, s.head_dim_v};
  // Shapes and lengths as oracles/error_terms.cpp makes them.
  ErrorTerms e;
  const double kv = reduction_length(TensorId::O, s), q_group = reduction_length(TensorId::dK, s);
  e[TensorId::O] = TermTensors{Tensor(oq), Tensor(oq), Tensor(oq), kv};
  e[TensorId::LSE] = TermTensors{Tensor(lq), Tensor(lq), Tensor(lq), kv};
  e[TensorId::dQ] = TermTensors{Tensor(qq), Tensor(qq), Tensor(qq), kv, Tensor(qq), Tensor(qq), Tensor(qq), Tensor(qq)};
  e[TensorId::dK] = TermTensors{Tensor(kk), Tensor(kk), Tensor(kk), q_group, Tensor(kk), Tensor(kk), Tensor(kk), Tensor(kk)};
  e[TensorId::dV] = TermTensors{Tensor(vv), Tensor(vv), Tensor(vv), q_group};
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
    e[o].operand_sources = Tensor(rows);
    e[o].score_sources = Tensor(rows);
    out.operand_sources[i] = e[o].operand_sources.ptr();
    out.score_sources[i] = e[o].score_sources.ptr();
  }
  e[TensorId::LSE].truncation = Tensor(lq);
  out.truncation_lse = e[TensorId::LSE].truncation.ptr();
  e[TensorId::dK].underflow = Tensor(kk);
  e[TensorId::dV].underflow = Tensor(vv);
  out.underflow_dk = e[TensorId::dK].underflow.ptr();
  out.underflow_dv = e[TensorId::dV].underflow.ptr();
  if (p.dtype == DType::f16)  // the subnormal part (harness/error_model.h)
    for (TensorId o : {TensorId::O, TensorId::dQ, TensorId::dK, TensorId::dV}) {
      const auto i = output_index(o);
      e[o].subnormal = Tensor(e[o].operand.shape);
      e[o].subnormal_sources = Tensor(e[o].operand_sources.shape);
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
