// LibTorch's varlen attention ops on CUDA (see torch_varlen_cuda.h). Signatures are LibTorch
// 2.11's (ATen/ops/_flash_attention_{forward,backward}.h, _efficient_attention_{forward,backward}.h
// of the wheel this builds against):
//   _flash_attention_forward(query, key, value, cum_seq_q?, cum_seq_k?, max_q, max_k, dropout_p,
//       is_causal, return_debug_mask, scale?, window_size_left?, window_size_right?, seqused_k?,
//       alibi_slopes?) -> (output, logsumexp, rng_state, unused, debug_attn_mask)
//   _flash_attention_backward(grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k,
//       max_q, max_k, dropout_p, is_causal, rng_state, unused, scale?, window_size_left?,
//       window_size_right?) -> (grad_query, grad_key, grad_value)
//   _efficient_attention_forward(query, key, value, bias?, cu_seqlens_q?, cu_seqlens_k?,
//       max_seqlen_q?, max_seqlen_k?, dropout_p, custom_mask_type, compute_log_sumexp, scale?,
//       seqlen_k?, window_size?) -> (output, logsumexp, philox_seed, philox_offset, max_q, max_k)
//   _efficient_attention_backward(grad_out_, query, key, value, bias?, out, cu_seqlens_q?,
//       cu_seqlens_k?, max_seqlen_q, max_seqlen_k, logsumexp, dropout_p, philox_seed,
//       philox_offset, custom_mask_type, bias_requires_grad, scale?, num_splits_key?,
//       window_size?, shared_storage_dqdkdv) -> (grad_q, grad_k, grad_v, grad_bias)
//
// Layouts. flash: Q [total_q][Hq][D], K and V [total_k][Hkv][D] (grouped heads native), its
// LSE [Hq][total_q] float32 (FlashAttention-2's mha_varlen_fwd allocates {num_heads, total_q}, the
// "unpadded" LSE; also on its seqlen_q/ngroups swap for one query per sequence, which writes the
// LSE (h, seqlen_q, b) so that its reshape is again [Hq][total_q]). efficient: Q [1][total_q][Hq][D]
// (batch 1: the op's "cu_seqlen only supports batch_size=1"), K and V [1][total_k][Hq][D] (no
// grouped heads: K and V repeated per group, as SDPA does, and dK, dV summed back over the group),
// its LSE [B][Hq][ceil(max_seqlen_q / 32) * 32] float32, row i of sequence b at [b][h][i]
// (mem_eff_attention/kernel_forward.h: logsumexp_ptr += batch_id * lse_dim * num_heads +
// head_id * lse_dim + query_start). The adapter checks each LSE's shape before reading it.
//
// Each call packs the Problem's dense float64 Q, K, V (and dO) on the device, in the case dtype:
// rows i < call_len_q(b) of batch entry b from offset starts[b], gap rows of NaN between
// consecutive sequences and `tail` rows of NaN after the last (harness/case.h, Ragged; the call's
// p.gap_q, p.gap_kv, p.tail). Outputs are scattered back into the dense tensors, with O = 0,
// LSE = -inf and zero gradients on rows and keys past the sequences' lengths.
//   - Q with gaps (gap_q > 0) is declined: neither op has a seqused_q (cum_seq_q[b + 1] -
//     cum_seq_q[b] is sequence b's query count), so a gap's NaN rows would be queries of the
//     sequence before it, moving its bottom-right diagonal and reaching dK and dV.
//   - K and V with gaps (gap_kv > 0) reach the forward as the ops take them: cum_seq_k /
//     cu_seqlens_k hold each slot's start (its sequence, then its gap), and seqused_k / seqlen_k
//     the lengths used. Neither backward op takes seqused_k or seqlen_k (their signatures above),
//     so the backward packs K and V without gaps (its cumulative offsets are then the lengths'
//     sums); its forward, which the backward needs for O and the LSE in the op's own layout, is
//     rerun on that packing. Q's tail is kept on both.
//   - max_q and max_k are the largest lengths of the call, at least 1, plus the case's max_slack:
//     an upper bound is what both ops ask for, and a call whose sequences are all empty then still
//     launches a grid (the efficient backward checks max_seqlen_q > 0 and max_seqlen_k > 0
//     outright). The efficient op's maxima stop at its packed rows: its backward checks them
//     against those (max_seqlen_k <= key.size(1)), which are an upper bound too.
//   - A misaligned case (Ragged::misaligned) gets Q, K, V and dO as views one element into their
//     allocations: base pointers 2 (4 in fp32) bytes past the allocator's alignment.
//   - Masks: the op computes one mask per sequence, the same for every head: none; causal with
//     the sequence's bottom-right diagonal (key j visible to row i iff j <= i + Lkv_b - Lq_b, the
//     lengths of this call's part of sequence b); for efficient also causal top-left (j <= i,
//     custom_mask_type 1); for flash also a sliding window aligned bottom-right
//     (i + Lkv_b - Lq_b - left <= j <= i + Lkv_b - Lq_b + right: window_size_left/right). A call is
//     accepted only where the dense mask (p.visible) is element for element one of those in every
//     sequence's block, with nothing visible outside the blocks; otherwise declined, saying which
//     forms were tried. A composition's part whose offsets move the diagonal is declined so.
//   - flash pads D to a multiple of 8 with zero columns (the op requires it; SDPA and
//     FlashAttention's own Python wrapper pad the same way), Q, K and V to one D (the op takes one
//     head dim); the padding is exact (zero columns add nothing to Q K^T, and V's give output
//     columns that are cut). Over 256 after padding: declined (the op's limit).
//   - Anything else the ops refuse with a c10::Error of their argument checks (TORCH_CHECK: a
//     shape, an empty K buffer, a launch bound) is a clean refusal, so the call is declined with
//     LibTorch's message (UnsupportedError); a CUDA error, a device out of memory and every error
//     of the adapter's own packing stay errors, and findings.
// Sequences with 0 queries or 0 keys are passed to the library as they are.
// Backward: the backward op directly (no autograd), given the LSE as the forward returned it, no
// dLSE (backward_takes_dlse false: the composition engine adds that term), in LibTorch's default
// mode, whose flash and efficient backwards accumulate dQ over key blocks in no fixed order.
#include "backends/torch_varlen_cuda.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "harness/compose.h"
#include "backends/torch_packed.h"
#include "oracles/torch_common.h"

namespace attnfuzz {
namespace {
using namespace torch_detail;

constexpr int64_t kFlashMaxHeadDim = 256;

// The narrowest bottom-right window holding every visible key of head 0 (dense_mask_is then
// checks it everywhere), or nothing where no key is visible or the diagonal is outside the band
// (a window reaches 0 or more keys on each side of it).
std::optional<OpMask> covering_window(const Problem& p, const CallLens& l) {
  const Shape& s = p.shape;
  int64_t lo = std::numeric_limits<int64_t>::max(), hi = std::numeric_limits<int64_t>::min();
  for (int64_t b = 0; b < s.batch; ++b) {
    const int64_t lq = l.q[static_cast<size_t>(b)], lk = l.kv[static_cast<size_t>(b)];
    for (int64_t i = 0; i < lq; ++i)
      for (int64_t j = 0; j < lk; ++j)
        if (p.visible(b, 0, i, j)) {
          const int64_t d = j - (i + lk - lq);
          lo = std::min(lo, d);
          hi = std::max(hi, d);
        }
  }
  if (lo > hi || lo > 0 || hi < 0) return std::nullopt;
  OpMask m;
  m.kind = OpMask::Kind::window;
  m.left = -lo;
  m.right = hi;
  return m;
}

std::optional<OpMask> fit_mask_uncached(TorchVarlenOp op, const Problem& p, const CallLens& l) {
  std::vector<OpMask> tries{OpMask{OpMask::Kind::none}, OpMask{OpMask::Kind::causal_bottom_right}};
  if (op == TorchVarlenOp::efficient) tries.push_back(OpMask{OpMask::Kind::causal_top_left});
  for (const OpMask& m : tries)
    if (dense_mask_is(p, l, m)) return m;
  if (op == TorchVarlenOp::flash)
    if (const auto w = covering_window(p, l); w && dense_mask_is(p, l, *w)) return w;
  return std::nullopt;
}

// The op's mask for this call, or nothing (remembered for a large mask: remembered_fit).
std::optional<OpMask> fit_mask(TorchVarlenOp op, const Problem& p) {
  return remembered_fit(op == TorchVarlenOp::flash ? "torch.flash.varlen" : "torch.efficient.varlen", p,
                        [op](const Problem& q, const CallLens& l) { return fit_mask_uncached(op, q, l); });
}

const char* op_name(TorchVarlenOp op) { return op == TorchVarlenOp::flash ? "torch.flash.varlen" : "torch.efficient.varlen"; }

int64_t round_up_8(int64_t d) { return (d + 7) / 8 * 8; }
// The head dim flash gets Q, K and V in: one, a multiple of 8.
int64_t flash_head_dim(const Shape& s) { return round_up_8(std::max(s.head_dim_qk, s.head_dim_v)); }

std::optional<at::Tensor> optional_of(const at::Tensor& t) { return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt; }

class TorchVarlenBackend final : public Backend {
 public:
  explicit TorchVarlenBackend(TorchVarlenOp op) : op_(op) {}

  std::string name() const override { return op_name(op_); }
  std::string version() const override { return "libtorch-" + torch_version(); }
  Device device() const override { return Device::cuda; }
  // As the dense ops (backends/torch_sdpa_cuda.cpp): flash takes fp16/bf16; the efficient kernel
  // also fp32, whose GEMMs are CUTLASS's 3xTF32 on sm80+ (its seqstart path is the same kernel).
  std::optional<Contract> contract(DType d) const override {
    if (d == DType::f32) return op_ == TorchVarlenOp::efficient ? std::optional<Contract>(Contract::tf32x3) : std::nullopt;
    return natural_contract(d);
  }
  bool backward_takes_dlse() const override { return false; }
  // LibTorch's default mode: FlashAttention-2's and the CUTLASS backward add each key block's
  // dQ with atomics, as for the dense ops (docs/findings/README.md, N-1).
  std::vector<TensorId> nondeterministic_outputs() const override { return {TensorId::dQ}; }
  std::string why_nondeterministic() const override { return "dQ is accumulated over key blocks in no fixed order"; }
  // A row with no visible key inside a sequence (bottom-right causal with Lq > Lkv, a sequence
  // with no keys) gets flash's LSE = +inf and efficient's LSE = 0, not -inf: those rows are left
  // out of the comparison, as for the dense ops.
  bool masked_rows_zero() const override { return false; }
  // Both fold scale * log2(e) into the scores and use the hardware's approximate exp2.
  double lse_unit_roundoff(DType) const override { return std::ldexp(1.0, -21); }

  // Ragged batches (what these ops are for) and dense ones (every length full). The adapter
  // enforces the dtype and the softcap (neither op takes one); head dims and the rest are the
  // library's (with what the dense ops declare for the generators' aim), masks the adapter's
  // check against what the op computes (torch_varlen_refusal). Layouts are not restricted: the
  // adapter packs its own buffers. Grouped heads: flash natively, efficient through repeated K, V.
  SupportEnvelope envelope() const override {
    SupportEnvelope e = Backend::envelope();
    e.max_head_dim = kFlashMaxHeadDim;
    e.head_dim_multiple = 8;
    e.softcap = false;
    e.bias = false;
    e.bias_grad = false;
    e.ragged = true;
    e.masks = MaskSupport::causal_or_none;
    e.library_decides = SupportEnvelope::library_decides_all_but({EnvelopeClause::dtype, EnvelopeClause::softcap});
    return e;
  }

  std::optional<std::string> unsupported_reason(const Problem& p) const override {
    std::string why;
    if (!torch_device_available(Device::cuda, &why)) return why;
    if (auto refused = Backend::unsupported_reason(p)) return refused;
    return torch_varlen_refusal(op_, p);
  }

  Forward forward(const Problem& p) override {
    return rethrow_plain([&] {
      c10::AutoGradMode no_grad(false);
      const Shape& s = p.shape;
      const Call c = call_forward(p, p.gap_kv);
      Forward f;
      if (op_ == TorchVarlenOp::flash) {
        f.o = unpack(c.out, s.head_dim_v, c.pq, s.batch, s.seq_q);
        if (c.lse.dim() != 2 || c.lse.size(0) != s.heads_q || c.lse.size(1) != c.pq.total)
          throw std::runtime_error(name() + ": _flash_attention_forward returned an LSE of " + sizes_of(c.lse) + ", not [" +
                                   std::to_string(s.heads_q) + ", " + std::to_string(c.pq.total) + "] (heads, total_q)");
        f.lse = unpack_lse(c.lse.t(), c.pq.packed_rows, c.pq, s.batch, s.seq_q);
      } else {
        f.o = unpack(c.out.select(0, 0), s.head_dim_v, c.pq, s.batch, s.seq_q);
        if (c.lse.dim() != 3 || c.lse.size(0) != s.batch || c.lse.size(1) != s.heads_q || c.lse.size(2) < c.pq.longest)
          throw std::runtime_error(name() + ": _efficient_attention_forward returned an LSE of " + sizes_of(c.lse) + ", not [" +
                                   std::to_string(s.batch) + ", " + std::to_string(s.heads_q) + ", >= " + std::to_string(c.pq.longest) +
                                   "] (sequences, heads, padded max_seqlen_q)");
        const int64_t lse_dim = c.lse.size(2);
        std::vector<int64_t> rows;
        for (size_t t = 0; t < c.pq.b_of.size(); ++t) rows.push_back(c.pq.b_of[t] * lse_dim + c.pq.i_of[t]);
        const at::Tensor flat = c.lse.permute({0, 2, 1}).reshape({s.batch * lse_dim, s.heads_q});
        f.lse = unpack_lse(flat, long_tensor(rows, flat.device()), c.pq, s.batch, s.seq_q);
      }
      return f;
    });
  }

  Gradients backward(const Problem& p, const Forward&, const Tensor& d_out, const Tensor&) override {
    return rethrow_plain([&] {
      c10::AutoGradMode no_grad(false);
      const Shape& s = p.shape;
      // No seqused_k in either backward op: K and V without gaps, the forward rerun on them.
      const Call c = call_forward(p, 0);
      const at::Device dev = device_of(Device::cuda);
      const at::ScalarType st = scalar_type(p.dtype);
      at::Tensor dq, dk, dv;
      if (op_ == TorchVarlenOp::flash) {
        const at::Tensor d_o = pack(d_out, c.d, c.pq, st, dev, p.misaligned);
        std::tie(dq, dk, dv) = library_call(name(), "_flash_attention_backward", [&] {
          return at::_flash_attention_backward(d_o, c.q, c.k, c.v, c.out, c.lse, c.cu_q, c.cu_k, c.max_q, c.max_k, 0.0, c.is_causal(),
                                               c.rng_a, c.rng_b, p.scale, c.window_left(), c.window_right());
        });
      } else {
        const at::Tensor d_o = pack(d_out, s.head_dim_v, c.pq, st, dev, p.misaligned).unsqueeze(0);
        at::Tensor unused_dbias;
        std::tie(dq, dk, dv, unused_dbias) = library_call(name(), "_efficient_attention_backward", [&] {
          return at::_efficient_attention_backward(d_o, c.q, c.k, c.v, std::nullopt, c.out, c.cu_q, c.cu_k, c.max_q, c.max_k, c.lse, 0.0,
                                                   c.rng_a, c.rng_b, c.custom_mask_type(), false, p.scale, std::nullopt, std::nullopt,
                                                   false);
        });
        dq = dq.select(0, 0);
        dk = dk.select(0, 0);
        dv = dv.select(0, 0);
        if (s.group() > 1) {  // K and V were repeated per group: their gradients summed back
          dk = dk.reshape({dk.size(0), s.heads_kv, s.group(), dk.size(2)}).sum(2);
          dv = dv.reshape({dv.size(0), s.heads_kv, s.group(), dv.size(2)}).sum(2);
        }
      }
      return Gradients{unpack(dq, s.head_dim_qk, c.pq, s.batch, s.seq_q), unpack(dk, s.head_dim_qk, c.pk, s.batch, s.seq_kv),
                       unpack(dv, s.head_dim_v, c.pk, s.batch, s.seq_kv)};
    });
  }

 private:
  // One forward call as the op made it, with what its backward needs.
  struct Call {
    PackedRows pq, pk;
    at::Tensor cu_q, cu_k, seqused_k;  // seqused_k defined where K and V have gaps
    int64_t max_q = 1, max_k = 1;
    int64_t d = 0;            // flash: the one head dim Q, K and V are passed in
    at::Tensor q, k, v;       // as passed (efficient: [1][total][Hq][D], K and V repeated per group)
    at::Tensor out, lse;      // the op's
    at::Tensor rng_a, rng_b;  // flash: rng_state, unused; efficient: philox_seed, philox_offset
    OpMask mask;

    bool is_causal() const { return mask.kind == OpMask::Kind::causal_bottom_right; }
    std::optional<int64_t> window_left() const {
      return mask.kind == OpMask::Kind::window ? std::optional<int64_t>(mask.left) : std::nullopt;
    }
    std::optional<int64_t> window_right() const {
      return mask.kind == OpMask::Kind::window ? std::optional<int64_t>(mask.right) : std::nullopt;
    }
    int64_t custom_mask_type() const {
      return mask.kind == OpMask::Kind::causal_top_left ? 1 : mask.kind == OpMask::Kind::causal_bottom_right ? 2 : 0;
    }
  };

  Call call_forward(const Problem& p, int64_t gap_kv) const {
    const Shape& s = p.shape;
    const at::Device dev = device_of(Device::cuda);
    const at::ScalarType st = scalar_type(p.dtype);
    Call c;
    const auto mask = fit_mask(op_, p);
    if (!mask) throw UnsupportedError(*torch_varlen_refusal(op_, p));
    c.mask = *mask;
    const CallLens l = call_lens(p);
    c.pq = plan_packing(s.seq_q, l.q, p.gap_q, p.tail, dev);
    c.pk = plan_packing(s.seq_kv, l.kv, gap_kv, p.tail, dev);
    c.max_q = declared_max(c.pq.longest, p.max_slack);
    c.max_k = declared_max(c.pk.longest, p.max_slack);
    c.cu_q = int_tensor(c.pq.starts, dev);
    c.cu_k = int_tensor(c.pk.starts, dev);
    if (gap_kv > 0) c.seqused_k = int_tensor(l.kv, dev);
    if (op_ == TorchVarlenOp::flash) {
      c.d = flash_head_dim(s);
      c.q = pack(p.q, c.d, c.pq, st, dev, p.misaligned);
      c.k = pack(p.k, c.d, c.pk, st, dev, p.misaligned);
      c.v = pack(p.v, c.d, c.pk, st, dev, p.misaligned);
      std::tie(c.out, c.lse, c.rng_a, c.rng_b, std::ignore) = library_call(name(), "_flash_attention_forward", [&] {
        return at::_flash_attention_forward(c.q, c.k, c.v, c.cu_q, c.cu_k, c.max_q, c.max_k, 0.0, c.is_causal(), false, p.scale,
                                            c.window_left(), c.window_right(), optional_of(c.seqused_k), std::nullopt);
      });
    } else {
      c.q = pack(p.q, s.head_dim_qk, c.pq, st, dev, p.misaligned).unsqueeze(0);
      at::Tensor k = pack(p.k, s.head_dim_qk, c.pk, st, dev, p.misaligned), v = pack(p.v, s.head_dim_v, c.pk, st, dev, p.misaligned);
      if (s.group() > 1) {
        k = k.repeat_interleave(s.group(), 1);
        v = v.repeat_interleave(s.group(), 1);
      }
      c.k = k.unsqueeze(0);
      c.v = v.unsqueeze(0);
      // The backward checks each maximum against the packed rows (max_seqlen_k <= key.size(1)):
      // told more, it refuses the call. The rows are an upper bound too, so the maxima stop there.
      c.max_q = std::clamp<int64_t>(c.q.size(1), 1, c.max_q);
      c.max_k = std::clamp<int64_t>(c.k.size(1), 1, c.max_k);
      auto r = library_call(name(), "_efficient_attention_forward", [&] {
        return at::_efficient_attention_forward(c.q, c.k, c.v, std::nullopt, c.cu_q, c.cu_k, c.max_q, c.max_k, 0.0, c.custom_mask_type(),
                                                true, p.scale, optional_of(c.seqused_k), std::nullopt);
      });
      c.out = std::get<0>(r);
      c.lse = std::get<1>(r);
      c.rng_a = std::get<2>(r);
      c.rng_b = std::get<3>(r);
    }
    return c;
  }

  TorchVarlenOp op_;
};

}  // namespace

std::optional<std::string> torch_varlen_refusal(TorchVarlenOp op, const Problem& p) {
  const std::string who = op_name(op);
  if (p.gap_q > 0)
    return who + " declines Q with gaps between sequences (gap_q = " + std::to_string(p.gap_q) +
           "): the op has cumulative query offsets but no seqused_q, so a gap's rows would be queries of the sequence before it";
  const Shape& s = p.shape;
  if (op == TorchVarlenOp::flash && flash_head_dim(s) > kFlashMaxHeadDim)
    return who + ": LibTorch's flash op takes head dims up to " + std::to_string(kFlashMaxHeadDim) +
           " (Dqk = " + std::to_string(s.head_dim_qk) + ", Dv = " + std::to_string(s.head_dim_v) + ", padded to " +
           std::to_string(flash_head_dim(s)) + ")";
  // The efficient kernel's vector loads need rows of 16 bytes at 16-bit (8 elements): the public
  // SDPA refuses other head dims for it, and the op itself checks none (D = 15 in bf16 faulted with
  // a sticky misaligned address on the H100, stop 56). fp32 rows are read 4 elements at a time.
  if (op == TorchVarlenOp::efficient) {
    const int64_t multiple = p.dtype == DType::f32 ? 4 : 8;
    if (s.head_dim_qk % multiple != 0 || s.head_dim_v % multiple != 0)
      return who + " takes head dims that are multiples of " + std::to_string(multiple) + " in " + std::string(to_string(p.dtype)) +
             " (Dqk = " + std::to_string(s.head_dim_qk) + ", Dv = " + std::to_string(s.head_dim_v) +
             "): the op checks none, and its vector loads fault on others";
  }
  const CallLens l = call_lens(p);
  const int64_t rows = std::max(packed_rows_of(l.q, p.gap_q, p.tail), packed_rows_of(l.kv, p.gap_kv, p.tail));
  if (rows > std::numeric_limits<int32_t>::max())
    return who + ": " + std::to_string(rows) + " packed rows do not fit the ops' int32 cumulative offsets";
  const std::optional<OpMask> mask = fit_mask(op, p);
  if (!mask)
    return who + " declines the mask: the dense mask is not, in every sequence and head alike, " +
           (op == TorchVarlenOp::flash ? std::string("all visible, causal bottom-right or a bottom-right sliding window")
                                       : std::string("all visible, causal bottom-right or causal top-left")) +
           " over that sequence's queries and keys in this call";
  // Three known library bugs (docs/findings/LEDGER.md), declined so that campaigns judge the rest.
  const int64_t max_k = declared_max(l.kv.empty() ? 0 : *std::max_element(l.kv.begin(), l.kv.end()), p.max_slack);
  for (size_t b = 0; b < l.q.size(); ++b) {
    // The CUTLASS kernel keeps the bottom-right diagonal's offset unsigned: with more queries than
    // keys it wraps and the rows that do see keys are computed without the mask.
    if (op == TorchVarlenOp::efficient && mask->kind == OpMask::Kind::causal_bottom_right && l.q[b] > l.kv[b])
      return who + " declines causal bottom-right where a sequence has more queries (" + std::to_string(l.q[b]) + ") than keys (" +
             std::to_string(l.kv[b]) + "): LibTorch 2.11's efficient kernel computes those rows unmasked (pytorch/pytorch PR 193632)";
    // The efficient backward leaves the dQ rows of a sequence with no key unwritten (whatever the
    // allocator left there: NaN, or values in the thousands where every right one is 0).
    if (op == TorchVarlenOp::efficient && l.q[b] > 0 && l.kv[b] == 0)
      return who + " declines a sequence with " + std::to_string(l.q[b]) +
             " queries and no key in this call: LibTorch 2.11's efficient backward leaves their dQ rows unwritten "
             "(docs/findings/LEDGER.md, s59-torch-efficient-varlen-empty-key-part)";
    // FlashAttention-2 takes a window reach of at least max_seqlen_k as unbounded, which it is only
    // where no sequence has more queries than the reach plus one.
    if (op == TorchVarlenOp::flash && mask->kind == OpMask::Kind::window && mask->right >= max_k && mask->right < l.q[b] - 1)
      return who + " declines a window reaching " + std::to_string(mask->right) + " keys right of the diagonal with max_seqlen_k " +
             std::to_string(max_k) + " and a sequence of " + std::to_string(l.q[b]) +
             " queries: FlashAttention-2 takes that reach as unbounded (Dao-AILab/flash-attention issue 895)";
  }
  return std::nullopt;
}

std::unique_ptr<Backend> make_torch_varlen_backend(TorchVarlenOp op) { return std::make_unique<TorchVarlenBackend>(op); }

}  // namespace attnfuzz
