// cuda.flash.varlen and cuda.flash.paged (backends/flash_varlen.h): the call's memory in the
// plugin ABI's varlen layout (backends/plugin_packed.h), copied to the device whole, the kernels'
// Ragged and Pages pointing into it, the outputs copied back and unpacked.
#include "backends/flash_varlen.h"

#include <algorithm>
#include <limits>
#include <stdexcept>

#include "backends/flash_backends.h"
#include "backends/plugin_cuda.h"
#include "backends/plugin_packed.h"
#include "harness/mask.h"
#include "kernels/flash/flash.h"

namespace attnfuzz {

FlashBandOrWhy flash_varlen_band(const Problem& p) {
  if (!p.mask_expr) return {std::nullopt, "declines the mask: the call's mask has no expression to take a band from"};
  if (!p.restrictions.empty())
    return {std::nullopt, "declines the mask: it is restricted to a band of a composition (not one band per sequence)"};
  const MaskExpr& e = *p.mask_expr;
  FlashBand band;
  if (e.kind == MaskExpr::Kind::causal)
    band.right = 0;
  else if (e.kind == MaskExpr::Kind::sliding_window)
    band.left = e.left, band.right = e.right;
  else if (e.kind != MaskExpr::Kind::all)
    return {std::nullopt, "declines the mask: not a band (none, causal, a sliding window); the kernels take no dense mask with a ragged batch"};
  // Query i' = i + q_offset of sequence b sees key j' = j + kv_offset around the aligned diagonal
  // (+ its own Lkv_b - Lq_b when bottom-right).
  const bool bottom_right = e.kind != MaskExpr::Kind::all && e.align == Align::bottom_right;
  const Shape& s = p.shape;
  for (int64_t b = 0; b < s.batch; ++b)
    band.diagonals.push_back(p.q_offset - p.kv_offset + (bottom_right ? p.seq_len_kv(b) - p.seq_len_q(b) : 0));
  for (int64_t b = 0; b < s.batch; ++b) {
    const int64_t lq = p.call_len_q(b), lk = p.call_len_kv(b), diag = band.diagonals[static_cast<size_t>(b)];
    for (int64_t h = 0; h < s.heads_q; ++h)
      for (int64_t i = 0; i < s.seq_q; ++i)
        for (int64_t j = 0; j < s.seq_kv; ++j)
          if (p.visible(b, h, i, j) != (i < lq && j < lk && in_window(j - i - diag, band.left, band.right)))
            return {std::nullopt, "declines the mask: it differs from its band in sequence " + std::to_string(b) + " (query " +
                                      std::to_string(i) + ", key " + std::to_string(j) + "); the kernels take no dense mask with a ragged batch"};
  }
  return {std::move(band), ""};
}

namespace {

// The head dim the kernels run: the smallest instantiation that holds both dims.
int kernel_dim(const Shape& s) { return std::max(s.head_dim_qk, s.head_dim_v) <= 64 ? 64 : 128; }

// [B][H][S][D] zero-padded to kdim columns (zero columns change no score; the padded output
// columns are cut).
Tensor widened(const Tensor& t, int64_t kdim) {
  if (t.dim(3) == kdim) return t;
  Tensor out({t.dim(0), t.dim(1), t.dim(2), kdim});
  for (int64_t b = 0; b < t.dim(0); ++b)
    for (int64_t h = 0; h < t.dim(1); ++h)
      for (int64_t i = 0; i < t.dim(2); ++i) std::copy_n(t.at(b, h, i), t.dim(3), out.at(b, h, i));
  return out;
}
Tensor narrowed(const Tensor& t, int64_t dim) {
  if (t.dim(3) == dim) return t;
  Tensor out({t.dim(0), t.dim(1), t.dim(2), dim});
  for (int64_t b = 0; b < t.dim(0); ++b)
    for (int64_t h = 0; h < t.dim(1); ++h)
      for (int64_t i = 0; i < t.dim(2); ++i) std::copy_n(t.at(b, h, i), dim, out.at(b, h, i));
  return out;
}

std::vector<int32_t> as_int32(const std::vector<int64_t>& v) { return std::vector<int32_t>(v.begin(), v.end()); }

// One packed buffer and where the kernels see it.
struct Packed {
  PieceBuffer buf;
  void* dev = nullptr;  // element (0, 0, 0, 0) on the device
  flash::Strides strides;
};

class FlashVarlenBackend final : public Backend {
 public:
  explicit FlashVarlenBackend(bool paged) : paged_(paged) {}
  std::string name() const override { return paged_ ? "cuda.flash.paged" : "cuda.flash.varlen"; }
  std::string version() const override { return dense_.version() + (paged_ ? ", paged K/V forward" : ", varlen"); }
  Device device() const override { return Device::cuda; }
  std::optional<Contract> contract(DType d) const override { return dense_.contract(d); }
  // cuda.flash's, but for the mask: a band per sequence. Campaigns aim at none and causal; the
  // clause is left to the adapter (flash_varlen_band), so the windows just outside it still run.
  SupportEnvelope envelope() const override {
    SupportEnvelope e = dense_.envelope();
    e.masks = MaskSupport::causal_or_none;
    e.library_decides |= SupportEnvelope::bit(EnvelopeClause::mask);
    return e;
  }
  bool backward_takes_dlse() const override { return true; }

  std::optional<std::string> unsupported_reason(const Problem& p) const override { return refusal(p, nullptr); }

  Forward forward(const Problem& p) override {
    const Call call(p, paged_, taken_band(p));
    DeviceArena gpu;
    const PackedGeometry& g = call.g;
    const Shape& s = p.shape;
    Packed q = input(gpu, PieceBuffer::packed(g.q, s.heads_q, call.kdim, call.type, 0, false), widened(p.q, call.kdim));
    auto kv = [&](const Tensor& t) {
      if (paged_) return input(gpu, PieceBuffer::pool(g, s.heads_kv, call.kdim, call.type), widened(t, call.kdim), true);
      return input(gpu, PieceBuffer::packed(g.kv, s.heads_kv, call.kdim, call.type, 0, false), widened(t, call.kdim));
    };
    Packed k = kv(p.k), v = kv(p.v);
    Packed o = output(gpu, PieceBuffer::packed(g.q, s.heads_q, call.kdim, call.type, 0, true));
    Packed lse = output(gpu, PieceBuffer::packed(g.q, s.heads_q, 0, ElementType::f32, 0, true));
    flash::Problem fp = call.problem(gpu, q, k, v);
    flash::ForwardArgs a;
    a.o = o.dev, a.o_strides = o.strides, a.lse = static_cast<float*>(lse.dev), a.lse_strides = lse.strides;
    flash::forward(fp, a);
    gpu.synchronize(name() + " forward");
    for (Packed* out : {&o, &lse}) gpu.download(out->buf.base(), out->buf.bytes());
    check_outside(name() + " forward", {{"O", &o}, {"LSE", &lse}});
    Forward f;
    f.o = narrowed(o.buf.load({s.batch, s.heads_q, s.seq_q, call.kdim}, 0.0, &f.unwritten[TensorId::O]), s.head_dim_v);
    f.lse = lse.buf.load({s.batch, s.heads_q, s.seq_q}, -std::numeric_limits<double>::infinity(), &f.unwritten[TensorId::LSE]);
    return f;
  }

  // Packed K and V (the kernels' backward takes no page table), dQ, dK, dV unpacked with zeros
  // past each sequence's rows and keys.
  Gradients backward(const Problem& p, const Forward& fwd, const Tensor& d_out, const Tensor& d_lse) override {
    const Call call(p, false, taken_band(p));
    DeviceArena gpu;
    const PackedGeometry& g = call.g;
    const Shape& s = p.shape;
    auto rows = [&](const PackedSide& side, int64_t heads, const Tensor& t) {
      return input(gpu, PieceBuffer::packed(side, heads, call.kdim, call.type, 0, false), widened(t, call.kdim));
    };
    auto lse_like = [&](const Tensor& t) { return input(gpu, PieceBuffer::packed(g.q, s.heads_q, 0, ElementType::f32, 0, false), t); };
    Packed q = rows(g.q, s.heads_q, p.q), k = rows(g.kv, s.heads_kv, p.k), v = rows(g.kv, s.heads_kv, p.v);
    Packed o = rows(g.q, s.heads_q, fwd.o), dout = rows(g.q, s.heads_q, d_out), lse = lse_like(fwd.lse), dlse = lse_like(d_lse);
    Packed dq = output(gpu, PieceBuffer::packed(g.q, s.heads_q, call.kdim, call.type, 0, true));
    Packed dk = output(gpu, PieceBuffer::packed(g.kv, s.heads_kv, call.kdim, call.type, 0, true));
    Packed dv = output(gpu, PieceBuffer::packed(g.kv, s.heads_kv, call.kdim, call.type, 0, true));
    flash::Problem fp = call.problem(gpu, q, k, v);
    std::vector<unsigned char> workspace(flash::backward_workspace_bytes(fp));
    void* ws = gpu.upload(workspace.data(), workspace.size());
    flash::BackwardArgs a;
    a.o = o.dev, a.o_strides = o.strides, a.lse = static_cast<const float*>(lse.dev), a.lse_strides = lse.strides;
    a.d_out = dout.dev, a.d_out_strides = dout.strides, a.d_lse = static_cast<const float*>(dlse.dev), a.d_lse_strides = dlse.strides;
    a.dq = dq.dev, a.dq_strides = dq.strides, a.dk = dk.dev, a.dk_strides = dk.strides, a.dv = dv.dev, a.dv_strides = dv.strides;
    a.workspace = ws;
    flash::backward(fp, a);
    gpu.synchronize(name() + " backward");
    for (Packed* out : {&dq, &dk, &dv}) gpu.download(out->buf.base(), out->buf.bytes());
    check_outside(name() + " backward", {{"dQ", &dq}, {"dK", &dk}, {"dV", &dv}});
    Gradients out;
    out.dq = narrowed(dq.buf.load({s.batch, s.heads_q, s.seq_q, call.kdim}, 0.0, &out.unwritten[TensorId::dQ]), s.head_dim_qk);
    out.dk = narrowed(dk.buf.load({s.batch, s.heads_kv, s.seq_kv, call.kdim}, 0.0, &out.unwritten[TensorId::dK]), s.head_dim_qk);
    out.dv = narrowed(dv.buf.load({s.batch, s.heads_kv, s.seq_kv, call.kdim}, 0.0, &out.unwritten[TensorId::dV]), s.head_dim_v);
    return out;
  }

 private:
  static PackedGeometry geometry(const Problem& p, bool paged) { return packed_geometry(p, paged, paged ? kFlashDefaultPageSize : 0); }

  // Why the call is declined, or nothing; where it is taken, *band gets its band (the scan of the
  // dense mask that decides it, made once per call).
  std::optional<std::string> refusal(const Problem& p, FlashBand* band) const {
    if (auto why = dense_.unsupported_reason(p)) return why;
    if (p.misaligned) return "a misaligned packed buffer: the kernels load 16 bytes at a time from 16-byte aligned rows";
    FlashBandOrWhy b = flash_varlen_band(p);
    if (!b.band) return b.why;
    if (auto why = packed_geometry_refusal(geometry(p, paged_))) return why;
    if (band) *band = std::move(*b.band);
    return std::nullopt;
  }
  FlashBand taken_band(const Problem& p) const {
    FlashBand band;
    if (auto why = refusal(p, &band)) throw std::invalid_argument(name() + ": " + *why);
    return band;
  }

  // What one call hands the kernels besides the tensors: the geometry, the band, the element type.
  struct Call {
    PackedGeometry g;
    FlashBand band;
    int64_t kdim;
    ElementType type;
    flash::Elem elem;
    const Problem& p;
    // Device copies of the int32 arrays, alive as long as the arena.
    Call(const Problem& p, bool paged, FlashBand taken)
        : g(geometry(p, paged)),
          band(std::move(taken)),
          kdim(kernel_dim(p.shape)),
          type(p.dtype == DType::f16 ? ElementType::f16 : ElementType::bf16),
          elem(p.dtype == DType::f16 ? flash::Elem::f16 : flash::Elem::bf16),
          p(p) {
      starts_q = as_int32(std::vector<int64_t>(g.q.starts.begin(), g.q.starts.end() - 1));
      starts_kv = as_int32(std::vector<int64_t>(g.kv.starts.begin(), g.kv.starts.end() - 1));
      lens_q = as_int32(g.q.lens), lens_kv = as_int32(g.kv.lens);
      table.reserve(g.table.size());
      for (int64_t t : g.table) table.push_back(static_cast<int32_t>(std::max<int64_t>(t, 0)));  // -1 past a sequence's pages: never read
    }
    std::vector<int32_t> starts_q, starts_kv, lens_q, lens_kv, table;

    flash::Problem problem(DeviceArena& gpu, const Packed& q, const Packed& k, const Packed& v) const {
      const Shape& s = p.shape;
      flash::Problem fp;
      fp.elem = elem, fp.head_dim = static_cast<int>(kdim);
      fp.batch = s.batch, fp.heads_q = s.heads_q, fp.heads_kv = s.heads_kv, fp.seq_q = g.max_q, fp.seq_kv = g.max_kv;
      fp.scale = static_cast<float>(p.scale);
      fp.softcap = p.softcap ? static_cast<float>(*p.softcap) : 0.f;
      fp.mask.left = band.left, fp.mask.right = band.right;
      fp.mask.diagonals = static_cast<const int64_t*>(upload(gpu, band.diagonals));
      fp.ragged.starts_q = static_cast<const int32_t*>(upload(gpu, starts_q));
      fp.ragged.starts_kv = static_cast<const int32_t*>(upload(gpu, starts_kv));
      fp.ragged.lens_q = static_cast<const int32_t*>(upload(gpu, lens_q));
      fp.ragged.lens_kv = static_cast<const int32_t*>(upload(gpu, lens_kv));
      if (g.page_size > 0) {
        fp.pages.table = static_cast<const int32_t*>(upload(gpu, table));
        fp.pages.table_stride = g.pages_per_seq, fp.pages.page_size = g.page_size;
      }
      fp.q = q.dev, fp.k = k.dev, fp.v = v.dev;
      fp.q_strides = q.strides, fp.k_strides = k.strides, fp.v_strides = v.strides;
      return fp;
    }
    template <class T>
    static const void* upload(DeviceArena& gpu, const std::vector<T>& h) {
      return h.empty() ? nullptr : gpu.upload(h.data(), h.size() * sizeof(T));
    }
  };

  // On the device, with the kernels' strides: a packed [tokens][H][D] buffer with batch stride 0
  // (Ragged's starts place each sequence), the LSE [H][tokens], a pool [pages][page_size][H][D]
  // with the page stride in the batch's place (Pages).
  static Packed placed(DeviceArena& gpu, PieceBuffer buf, bool pool) {
    Packed out{std::move(buf), nullptr, {}};
    const af_tensor t = out.buf.tensor();
    out.strides = {pool ? t.strides[0] : 0, t.strides[1], t.strides[2]};
    out.dev = gpu.upload(out.buf.base(), out.buf.bytes());
    return out;
  }
  static Packed input(DeviceArena& gpu, PieceBuffer buf, const Tensor& dense, bool pool = false) {
    buf.store(dense);
    return placed(gpu, std::move(buf), pool);
  }
  static Packed output(DeviceArena& gpu, PieceBuffer buf) { return placed(gpu, std::move(buf), false); }

  static void check_outside(const std::string& who, std::initializer_list<std::pair<const char*, const Packed*>> outputs) {
    for (const auto& [role, out] : outputs)
      if (const size_t n = out->buf.written_outside())
        throw OutOfBoundsWrite(who + " wrote " + std::to_string(n) + " element(s) of its packed output " + role +
                               " out of bounds: into the gaps between sequences or the tail after the last one");
  }

  bool paged_;
  FlashBackend dense_;
};

}  // namespace

std::unique_ptr<Backend> make_flash_varlen_backend() { return std::make_unique<FlashVarlenBackend>(false); }
std::unique_ptr<Backend> make_flash_paged_backend() { return std::make_unique<FlashVarlenBackend>(true); }

}  // namespace attnfuzz
