// cudnn.varlen and cudnn.paged (see cudnn_varlen.h): cuDNN SDPA on packed sequences with ragged
// offsets, and its forward through a paged K/V cache. The graphs are cudnn_graph.cpp's
// (GraphSpec::ragged, GraphSpec::page_size); this file lays the call out in device memory and
// scatters the results back.
//
// The frontend (1.32) calls behind them, with the constraints read in its headers
// (node/scaled_dot_product_flash_attention.h, node/sdpa_support_surface.h, graph_properties.h):
//  - Tensor_attributes::set_ragged_offset on Q, K, V and O (forward), and on O, dO, dQ, dK, dV
//    (backward): a [B + 1, 1, 1, 1] tensor of offsets in elements (INT64 from cuDNN 9.6, INT32
//    before, as the frontend's own tests choose), the tensors' dims [B, H, S_max, D] with THD
//    strides (S*H*D, D, H*D, 1). Ragged offsets need the padding mask ("Ragged offsets are only
//    supported with padding mask"), so every plan has one: set_padding_mask(true), set_seq_len_q,
//    set_seq_len_kv ([B, 1, 1, 1] INT32). Offsets may leave room between sequences (the gaps): a
//    sequence's extent is its length, not the next offset. Stats stay the non-ragged packed
//    [B, Hq, S_max, 1] FP32 tensor: a ragged Stats input is refused for the THD backward on SM8x
//    and SM12x, and the non-ragged backward reads only that layout before cuDNN 9.26. Bands and
//    bottom-right alignment with ragged offsets only with the padding mask (there). The
//    deterministic backward (set_deterministic_algorithm) is refused for THD on SM8x and SM12x:
//    there the backend declines with cuDNN's message.
//  - SDPA_attributes::set_paged_attention_k_table / _v_table ([B, 1, table_size, 1] INT32) and
//    set_paged_attention_max_seq_len_kv, K and V as containers of dims [pages, Hkv, page_size, D]
//    laid out [pages][page_size][Hkv][D] (each page's rows whole, as vLLM's cache and the frontend's
//    own samples have them; see docs/gpu.md for why this layout): cuDNN
//    9.5 and newer, only with the padding mask and per-sequence lengths on both sides. The
//    backward's attributes have no page table: paged is forward only.
//  - a score bias is not handed on (the envelope refuses it); masks are the native plans of
//    cudnn_varlen_mask_plans (cudnn_sdpa.h).
#include "backends/cudnn_varlen.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "backends/cudnn_graph.h"
#include "backends/cudnn_sdpa.h"
#include "harness/dtype.h"

namespace attnfuzz {

// ---- The layout helpers (pure) ----

CudnnPacking cudnn_packing(const std::vector<int64_t>& lens, int64_t gap, int64_t tail) {
  Ragged r;
  r.lens_q = lens;
  r.gap_q = gap;
  CudnnPacking k;
  k.lens = lens;
  k.starts = r.starts_q();
  k.total = k.starts.back() + tail;
  return k;
}

std::vector<int64_t> cudnn_ragged_offsets(const CudnnPacking& k, int64_t heads, int64_t dim) {
  std::vector<int64_t> out;
  out.reserve(k.starts.size());
  for (int64_t s : k.starts) out.push_back(s * heads * dim);
  return out;
}

uint16_t cudnn_nan_bits(DType d) { return d == DType::bf16 ? uint16_t{0x7fc0} : uint16_t{0x7e00}; }

namespace {

uint16_t to_bits(DType d, double x) {
  const float f = static_cast<float>(x);  // exact: inputs are already rounded to d
  return d == DType::bf16 ? float_to_bf16_bits(f) : float_to_half_bits(f);
}

double from_bits(DType d, uint16_t bits) { return d == DType::bf16 ? bf16_bits_to_float(bits) : half_bits_to_float(bits); }

}  // namespace

std::vector<uint16_t> cudnn_pack_thd(const Tensor& dense, const CudnnPacking& k, DType d) {
  const int64_t heads = dense.dim(1), seq = dense.dim(2), dim = dense.dim(3);
  std::vector<uint16_t> out(static_cast<size_t>(k.total * heads * dim), cudnn_nan_bits(d));
  for (size_t b = 0; b < k.lens.size(); ++b) {
    const int64_t rows = std::min(k.lens[b], seq);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t h = 0; h < heads; ++h) {
        const double* src = dense.at(static_cast<int64_t>(b), h, i);
        uint16_t* dst = out.data() + ((k.starts[b] + i) * heads + h) * dim;
        for (int64_t e = 0; e < dim; ++e) dst[e] = to_bits(d, src[e]);
      }
  }
  return out;
}

Tensor cudnn_unpack_thd(const std::vector<uint16_t>& packed, const CudnnPacking& k, const std::vector<int64_t>& keep, int64_t heads,
                        int64_t seq, int64_t dim, DType d) {
  const int64_t batch = static_cast<int64_t>(k.lens.size());
  if (packed.size() < static_cast<size_t>(k.total * heads * dim)) throw std::logic_error("cudnn_unpack_thd: buffer smaller than its packing");
  Tensor out({batch, heads, seq, dim});
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t rows = std::min({keep[static_cast<size_t>(b)], k.lens[static_cast<size_t>(b)], seq});
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t h = 0; h < heads; ++h) {
        const uint16_t* src = packed.data() + ((k.starts[static_cast<size_t>(b)] + i) * heads + h) * dim;
        double* dst = out.at(b, h, i);
        for (int64_t e = 0; e < dim; ++e) dst[e] = from_bits(d, src[e]);
      }
  }
  return out;
}

CudnnPagePool cudnn_page_pool(const std::vector<int64_t>& lens, int64_t page_size, int64_t seq_kv, uint64_t seed) {
  if (page_size <= 0) throw std::invalid_argument("cudnn_page_pool: page_size must be positive");
  const PageTable t = page_table(lens, page_size, seed);
  CudnnPagePool pool;
  pool.page_size = page_size;
  pool.pages = t.pages;
  std::vector<uint8_t> used(static_cast<size_t>(t.pages), 0);
  for (int64_t e : t.table)
    if (e >= 0) used[static_cast<size_t>(e)] = 1;
  pool.spare = static_cast<int64_t>(std::find(used.begin(), used.end(), 0) - used.begin());
  if (pool.spare >= t.pages) throw std::logic_error("cudnn_page_pool: the page table left no spare page");
  pool.table_size = std::max<int64_t>({t.max_pages_per_seq, (seq_kv + page_size - 1) / page_size, 1});
  pool.table.assign(lens.size() * static_cast<size_t>(pool.table_size), static_cast<int32_t>(pool.spare));
  for (size_t b = 0; b < lens.size(); ++b) {
    const int64_t count = (lens[b] + page_size - 1) / page_size;
    for (int64_t p = 0; p < count; ++p)
      pool.table[b * static_cast<size_t>(pool.table_size) + static_cast<size_t>(p)] = static_cast<int32_t>(t.at(static_cast<int64_t>(b), p));
  }
  return pool;
}

std::vector<uint16_t> cudnn_pack_pages(const Tensor& dense, const CudnnPagePool& pool, const std::vector<int64_t>& lens, DType d) {
  const int64_t heads = dense.dim(1), seq = dense.dim(2), dim = dense.dim(3), P = pool.page_size;
  std::vector<uint16_t> out(static_cast<size_t>(pool.pages * heads * P * dim), to_bits(d, kUnusedPageRowValue));
  for (size_t b = 0; b < lens.size(); ++b) {
    const int64_t keys = std::min(lens[b], seq);
    for (int64_t j = 0; j < keys; ++j) {
      const int64_t page = pool.table[b * static_cast<size_t>(pool.table_size) + static_cast<size_t>(j / P)];
      for (int64_t h = 0; h < heads; ++h) {
        const double* src = dense.at(static_cast<int64_t>(b), h, j);
        uint16_t* dst = out.data() + ((page * P + j % P) * heads + h) * dim;
        for (int64_t e = 0; e < dim; ++e) dst[e] = to_bits(d, src[e]);
      }
    }
  }
  return out;
}

// ---- The backends ----

namespace {
using namespace cudnn_detail;

enum class Kind { varlen, paged };

const char* kind_name(Kind k) { return k == Kind::varlen ? "cudnn.varlen" : "cudnn.paged"; }

int64_t page_size_of(const Problem& p) { return p.page_size > 0 ? p.page_size : kCudnnDefaultPageSize; }

// The call's rows of each sequence (Q, O, dO, dQ) and keys (K, V, dK, dV) in its packed buffers.
struct Geometry {
  std::vector<int64_t> lens_q, lens_kv;
  CudnnPacking q, kv;
};

Geometry geometry(const Problem& p) {
  Geometry g;
  for (int64_t b = 0; b < p.shape.batch; ++b) {
    g.lens_q.push_back(p.call_len_q(b));
    g.lens_kv.push_back(p.call_len_kv(b));
  }
  g.q = cudnn_packing(g.lens_q, p.gap_q, p.tail);
  g.kv = cudnn_packing(g.lens_kv, p.gap_kv, p.tail);
  return g;
}

// [B][H][S][D] indices over a THD buffer [tokens][H][D] (the batch stride is the dense one; cuDNN
// reads each sequence's start from the ragged offsets).
Strides thd(int64_t heads, int64_t seq, int64_t dim) { return {seq * heads * dim, dim, heads * dim, 1}; }
Strides bhsd(int64_t heads, int64_t seq, int64_t dim) { return {heads * seq * dim, seq * dim, dim, 1}; }

GraphSpec base_spec(const Problem& p, const CudnnMaskPlan& plan) {
  const Shape& s = p.shape;
  GraphSpec g;
  g.dtype = p.dtype;
  g.batch = s.batch;
  g.heads_q = s.heads_q;
  g.heads_kv = s.heads_kv;
  g.seq_q = s.seq_q;
  g.seq_kv = s.seq_kv;
  g.dim_qk = s.head_dim_qk;
  g.dim_v = s.head_dim_v;
  g.scale_bits = std::bit_cast<uint32_t>(static_cast<float>(p.scale));
  g.padding = true;  // every varlen plan has one (cudnn_varlen_mask_plans)
  g.left_bound = plan.left_bound;
  g.right_bound = plan.right_bound;
  g.bottom_right = (plan.left_bound || plan.right_bound) && plan.alignment == Align::bottom_right;
  return g;
}

// The packed graphs (forward and backward) of cudnn.varlen, and cudnn.paged's backward.
GraphSpec varlen_spec(const Problem& p, const CudnnMaskPlan& plan) {
  const Shape& s = p.shape;
  GraphSpec g = base_spec(p, plan);
  g.q_stride = g.d_q_stride = thd(s.heads_q, s.seq_q, s.head_dim_qk);
  g.o_stride = g.d_o_stride = thd(s.heads_q, s.seq_q, s.head_dim_v);
  g.k_stride = g.d_k_stride = thd(s.heads_kv, s.seq_kv, s.head_dim_qk);
  g.v_stride = g.d_v_stride = thd(s.heads_kv, s.seq_kv, s.head_dim_v);
  g.ragged = true;
  g.offsets_int32 = cudnn_runtime_version() < 90600;
  return g;
}

// cudnn.paged's forward: Q and O dense [B][Hq][Sq][D] (packed), K and V in the pool's pages.
GraphSpec paged_spec(const Problem& p, const CudnnMaskPlan& plan, const CudnnPagePool& pool) {
  const Shape& s = p.shape;
  GraphSpec g = base_spec(p, plan);
  g.q_stride = g.d_q_stride = bhsd(s.heads_q, s.seq_q, s.head_dim_qk);
  g.o_stride = g.d_o_stride = bhsd(s.heads_q, s.seq_q, s.head_dim_v);
  g.page_size = pool.page_size;
  g.pages = pool.pages;
  g.table_size = pool.table_size;
  return g;
}

// Device memory of at least `bytes`, zero-filled; never empty, so that a buffer with no rows (every
// sequence empty, no gaps, no tail) still hands cuDNN a pointer.
DeviceBuffer room(size_t bytes) { return DeviceBuffer(std::max<size_t>(bytes, 256)); }

DeviceBuffer upload(const void* host, size_t bytes) {
  DeviceBuffer buf = room(bytes);
  buf.upload(host, bytes);
  return buf;
}

template <class T>
DeviceBuffer upload(const std::vector<T>& host) {
  return upload(host.data(), host.size() * sizeof(T));
}

std::vector<uint16_t> download_bits(const DeviceBuffer& buf) {
  std::vector<uint16_t> h(buf.bytes() / sizeof(uint16_t));
  buf.download(h.data(), h.size() * sizeof(uint16_t));
  return h;
}

DeviceBuffer offsets_buffer(const std::vector<int64_t>& offsets, bool int32) {
  if (!int32) return upload(offsets);
  std::vector<int32_t> narrow(offsets.begin(), offsets.end());
  return upload(narrow);
}

// The LSE from cuDNN's Stats ([B][Hq][Sq] fp32): rows past each sequence's plan length -inf.
Tensor lse_of(const std::vector<float>& stats, const Shape& s, const std::vector<int32_t>& plan_q) {
  Tensor lse({s.batch, s.heads_q, s.seq_q}, -std::numeric_limits<double>::infinity());
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads_q; ++h)
      for (int64_t i = 0; i < std::min<int64_t>(plan_q[static_cast<size_t>(b)], s.seq_q); ++i)
        *lse.at(b, h, i) = stats[static_cast<size_t>((b * s.heads_q + h) * s.seq_q + i)];
  return lse;
}

std::vector<int64_t> widen(const std::vector<int32_t>& v) { return {v.begin(), v.end()}; }

// The device memory of one packed call: Q, K, V (and dO) packed with NaN gaps and tails, the
// offsets, the plan's lengths, and cuDNN's own O and Stats, which the backward consumes. A
// misaligned case (Ragged::misaligned) has every packed buffer, inputs and outputs, start one
// element (2 bytes) into its allocation, which every ragged offset then counts: the base pointer
// cuDNN is given stays aligned, the sequences' rows do not.
class PackedCall {
 public:
  PackedCall(const Problem& p, const CudnnMaskPlan& plan, const GraphSpec& spec)
      : p_(p), plan_(plan), spec_(spec), geo_(geometry(p)), lead_(p.misaligned ? 1 : 0) {
    const Shape& s = p.shape;
    const DType d = p.dtype;
    q_ = upload(led(cudnn_pack_thd(p.q, geo_.q, d)));
    k_ = upload(led(cudnn_pack_thd(p.k, geo_.kv, d)));
    v_ = upload(led(cudnn_pack_thd(p.v, geo_.kv, d)));
    off_q_ = offsets_buffer(shifted(cudnn_ragged_offsets(geo_.q, s.heads_q, s.head_dim_qk)), spec.offsets_int32);
    off_k_ = offsets_buffer(shifted(cudnn_ragged_offsets(geo_.kv, s.heads_kv, s.head_dim_qk)), spec.offsets_int32);
    off_v_ = offsets_buffer(shifted(cudnn_ragged_offsets(geo_.kv, s.heads_kv, s.head_dim_v)), spec.offsets_int32);
    off_o_ = offsets_buffer(shifted(cudnn_ragged_offsets(geo_.q, s.heads_q, s.head_dim_v)), spec.offsets_int32);
    seq_len_q_ = upload(plan.seq_len_q);
    seq_len_kv_ = upload(plan.seq_len_kv);
    stats_ = room(static_cast<size_t>(s.batch * s.heads_q * s.seq_q) * sizeof(float));
  }

  void forward(GraphCache& graphs) {
    const Shape& s = p_.shape;
    // O: zeros in the sequences' rows (what a row cuDNN does not write reads as, as for `cudnn`),
    // NaN in the gaps and the tail, which the backward then reads as its O input.
    o_ = upload(led(cudnn_pack_thd(Tensor({s.batch, s.heads_q, s.seq_q, s.head_dim_v}), geo_.q, p_.dtype)));
    stats_.zero();
    DevicePointers ptrs = inputs();
    ptrs.o = o_.get();
    ptrs.stats = stats_.get();
    graphs.execute(spec_, Pass::forward, ptrs);
  }

  Forward forward_result() const {
    const Shape& s = p_.shape;
    Forward f;
    f.o = cudnn_unpack_thd(unled(download_bits(o_)), geo_.q, widen(plan_.seq_len_q), s.heads_q, s.seq_q, s.head_dim_v, p_.dtype);
    std::vector<float> stats(static_cast<size_t>(s.batch * s.heads_q * s.seq_q));
    stats_.download(stats.data(), stats.size() * sizeof(float));
    f.lse = lse_of(stats, s, plan_.seq_len_q);
    return f;
  }

  Gradients backward(GraphCache& graphs, const Tensor& d_out) {
    const Shape& s = p_.shape;
    const DType d = p_.dtype;
    DeviceBuffer d_o = upload(led(cudnn_pack_thd(d_out, geo_.q, d)));
    // Zero-filled, as for `cudnn`: rows and keys past the plan's lengths are not written.
    DeviceBuffer d_q = room(static_cast<size_t>(lead_ + geo_.q.total * s.heads_q * s.head_dim_qk) * sizeof(uint16_t));
    DeviceBuffer d_k = room(static_cast<size_t>(lead_ + geo_.kv.total * s.heads_kv * s.head_dim_qk) * sizeof(uint16_t));
    DeviceBuffer d_v = room(static_cast<size_t>(lead_ + geo_.kv.total * s.heads_kv * s.head_dim_v) * sizeof(uint16_t));
    DevicePointers ptrs = inputs();
    ptrs.o = o_.get();
    ptrs.stats = stats_.get();
    ptrs.d_o = d_o.get();
    ptrs.d_q = d_q.get();
    ptrs.d_k = d_k.get();
    ptrs.d_v = d_v.get();
    graphs.execute(spec_, Pass::backward, ptrs);
    const std::vector<int64_t> keep_q = widen(plan_.seq_len_q), keep_kv = widen(plan_.seq_len_kv);
    return {cudnn_unpack_thd(unled(download_bits(d_q)), geo_.q, keep_q, s.heads_q, s.seq_q, s.head_dim_qk, d),
            cudnn_unpack_thd(unled(download_bits(d_k)), geo_.kv, keep_kv, s.heads_kv, s.seq_kv, s.head_dim_qk, d),
            cudnn_unpack_thd(unled(download_bits(d_v)), geo_.kv, keep_kv, s.heads_kv, s.seq_kv, s.head_dim_v, d),
            {}};
  }

 private:
  // A packed buffer with the misaligned case's leading NaN element, and back.
  std::vector<uint16_t> led(std::vector<uint16_t> bits) const {
    bits.insert(bits.begin(), static_cast<size_t>(lead_), cudnn_nan_bits(p_.dtype));
    return bits;
  }
  std::vector<uint16_t> unled(std::vector<uint16_t> bits) const {
    bits.erase(bits.begin(), bits.begin() + lead_);
    return bits;
  }
  std::vector<int64_t> shifted(std::vector<int64_t> offsets) const {
    for (int64_t& o : offsets) o += lead_;
    return offsets;
  }

  DevicePointers inputs() const {
    DevicePointers ptrs;
    ptrs.q = q_.get();
    ptrs.k = k_.get();
    ptrs.v = v_.get();
    ptrs.seq_len_q = seq_len_q_.get();
    ptrs.seq_len_kv = seq_len_kv_.get();
    ptrs.ragged_q = off_q_.get();
    ptrs.ragged_k = off_k_.get();
    ptrs.ragged_v = off_v_.get();
    ptrs.ragged_o = off_o_.get();
    return ptrs;
  }

  const Problem& p_;
  const CudnnMaskPlan& plan_;
  const GraphSpec& spec_;
  Geometry geo_;
  int64_t lead_ = 0;
  DeviceBuffer q_, k_, v_, o_, stats_, off_q_, off_k_, off_v_, off_o_, seq_len_q_, seq_len_kv_;
};

// cudnn.paged's forward: Q dense with NaN past each sequence's rows, K and V in the pool's pages.
Forward paged_forward(GraphCache& graphs, const Problem& p, const CudnnMaskPlan& plan, const GraphSpec& spec, const CudnnPagePool& pool) {
  const Shape& s = p.shape;
  const DType d = p.dtype;
  const Geometry geo = geometry(p);
  // Q as [B][Hq][Sq][D]: the same bits a packing with no gaps would hold, NaN in the absent rows.
  std::vector<uint16_t> q(static_cast<size_t>(s.batch * s.heads_q * s.seq_q * s.head_dim_qk), cudnn_nan_bits(d));
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads_q; ++h)
      for (int64_t i = 0; i < geo.lens_q[static_cast<size_t>(b)]; ++i) {
        const double* src = p.q.at(b, h, i);
        uint16_t* dst = q.data() + ((b * s.heads_q + h) * s.seq_q + i) * s.head_dim_qk;
        for (int64_t e = 0; e < s.head_dim_qk; ++e) dst[e] = to_bits(d, src[e]);
      }
  DeviceBuffer q_dev = upload(q);
  DeviceBuffer k_dev = upload(cudnn_pack_pages(p.k, pool, geo.lens_kv, d));
  DeviceBuffer v_dev = upload(cudnn_pack_pages(p.v, pool, geo.lens_kv, d));
  DeviceBuffer table = upload(pool.table);
  DeviceBuffer seq_len_q = upload(plan.seq_len_q), seq_len_kv = upload(plan.seq_len_kv);
  DeviceBuffer o = room(static_cast<size_t>(s.batch * s.heads_q * s.seq_q * s.head_dim_v) * sizeof(uint16_t));  // zeros
  DeviceBuffer stats = room(static_cast<size_t>(s.batch * s.heads_q * s.seq_q) * sizeof(float));
  DevicePointers ptrs;
  ptrs.q = q_dev.get();
  ptrs.k = k_dev.get();
  ptrs.v = v_dev.get();
  ptrs.page_table = table.get();
  ptrs.seq_len_q = seq_len_q.get();
  ptrs.seq_len_kv = seq_len_kv.get();
  ptrs.o = o.get();
  ptrs.stats = stats.get();
  graphs.execute(spec, Pass::forward, ptrs);

  Forward f;
  f.o = Tensor({s.batch, s.heads_q, s.seq_q, s.head_dim_v});
  const std::vector<uint16_t> o_bits = download_bits(o);
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads_q; ++h)
      for (int64_t i = 0; i < std::min<int64_t>(plan.seq_len_q[static_cast<size_t>(b)], s.seq_q); ++i) {
        const uint16_t* src = o_bits.data() + ((b * s.heads_q + h) * s.seq_q + i) * s.head_dim_v;
        double* dst = f.o.at(b, h, i);
        for (int64_t e = 0; e < s.head_dim_v; ++e) dst[e] = from_bits(d, src[e]);
      }
  std::vector<float> st(static_cast<size_t>(s.batch * s.heads_q * s.seq_q));
  stats.download(st.data(), st.size() * sizeof(float));
  f.lse = lse_of(st, s, plan.seq_len_q);
  return f;
}

class CudnnVarlenBackend final : public Backend {
 public:
  explicit CudnnVarlenBackend(Kind kind) : kind_(kind) {}

  std::string name() const override { return kind_name(kind_); }
  std::string version() const override {
    return "cudnn-" + std::to_string(cudnn_runtime_version()) + " frontend-" + cudnn_frontend_version();
  }
  Device device() const override { return Device::cuda; }
  // As `cudnn`: fp16/bf16 only.
  std::optional<Contract> contract(DType d) const override {
    if (d == DType::f32) return std::nullopt;
    return natural_contract(d);
  }
  // As `cudnn`: a row with no visible key gets cuDNN's own values; the harness leaves it out.
  bool masked_rows_zero() const override { return false; }
  bool backward_takes_dlse() const override { return false; }

  // `cudnn`'s envelope, with a ragged batch (what these are for) and no score bias (not handed
  // on). The adapter enforces the dtype and the softcap; the packed buffers are its own, so
  // neither the case's layouts nor its LSE layout reach cuDNN (no alignment or LSE clause); masks
  // are declared none or causal for the generators' aim and decided per call (the native plans).
  SupportEnvelope envelope() const override {
    SupportEnvelope e = Backend::envelope();
    e.max_head_dim = 128;
    e.head_dim_multiple = 8;
    e.min_seq_kv = 2;
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
    if (!cudnn_sdpa_available(&why)) return why;
    if (auto refused = Backend::unsupported_reason(p)) return refused;
    try {
      const Choice c = choose(p);
      if (!c.selection) return c.reason;
    } catch (const std::exception& e) {
      return "cuDNN: " + std::string(e.what());
    }
    return std::nullopt;
  }

  Forward forward(const Problem& p) override {
    const Selection sel = select_or_throw(p);
    if (kind_ == Kind::paged) return paged_forward(graphs_, p, sel.plan, *sel.paged, *sel.pool);
    PackedCall call(p, sel.plan, sel.varlen);
    call.forward(graphs_);
    return call.forward_result();
  }

  // cuDNN's backward on its own O and Stats, recomputed here (the Forward handed in may have been
  // normalized by the harness); for cudnn.paged the packed graphs (cuDNN has no paged backward).
  Gradients backward(const Problem& p, const Forward&, const Tensor& d_out, const Tensor&) override {
    const Selection sel = select_or_throw(p);
    PackedCall call(p, sel.plan, sel.varlen);
    call.forward(graphs_);
    return call.backward(graphs_, d_out);
  }

 private:
  struct Selection {
    CudnnMaskPlan plan;
    GraphSpec varlen;                   // the packed graphs (both passes; cudnn.paged's backward)
    std::optional<GraphSpec> paged;     // cudnn.paged's forward
    std::optional<CudnnPagePool> pool;  // and its pages
  };
  struct Choice {
    std::optional<Selection> selection;
    std::string reason;
  };

  // The first native plan (cudnn_varlen_mask_plans' order) whose graphs cuDNN builds: the packed
  // forward and backward, and for cudnn.paged the paged forward.
  Choice choose(const Problem& p) const {
    const std::vector<CudnnMaskPlan> plans = cudnn_varlen_mask_plans(p);
    if (plans.empty())
      return {std::nullopt, name() +
                                " declines the mask: it is not, in every sequence's block and for every head alike, one of cuDNN's native "
                                "masks relative to the sequences' lengths (none, causal top-left or bottom-right, a diagonal band), "
                                "and a packed or paged call has no mask tensor"};
    std::optional<CudnnPagePool> pool;
    if (kind_ == Kind::paged) {
      std::vector<int64_t> lens_kv;
      for (int64_t b = 0; b < p.shape.batch; ++b) lens_kv.push_back(p.call_len_kv(b));
      pool = cudnn_page_pool(lens_kv, page_size_of(p), p.shape.seq_kv, p.page_seed);
    }
    std::string first;
    for (const CudnnMaskPlan& plan : plans) {
      Selection sel{plan, varlen_spec(p, plan), std::nullopt, pool};
      std::optional<std::string> err;
      if (auto fwd = graphs_.prepare(sel.varlen, Pass::forward))
        err = "packed forward (" + plan.describe() + "): " + *fwd;
      else if (auto bwd = graphs_.prepare(sel.varlen, Pass::backward))
        err = "packed backward (" + plan.describe() + "): " + *bwd;
      else if (kind_ == Kind::paged) {
        sel.paged = paged_spec(p, plan, *pool);
        if (auto paged = graphs_.prepare(*sel.paged, Pass::forward))
          err = "paged forward (" + plan.describe() + ", page size " + std::to_string(pool->page_size) + "): " + *paged;
      }
      if (!err) return {sel, {}};
      if (first.empty()) first = *err;
    }
    return {std::nullopt, "cuDNN: " + first};
  }

  Selection select_or_throw(const Problem& p) const {
    std::string why;
    if (!cudnn_sdpa_available(&why)) throw std::runtime_error("cuDNN: " + why);
    Choice c = choose(p);
    if (!c.selection) throw std::runtime_error(c.reason);
    return *c.selection;
  }

  Kind kind_;
  mutable GraphCache graphs_;  // unsupported_reason() builds graphs too: the build is cuDNN's support check
};

}  // namespace

std::unique_ptr<Backend> make_cudnn_varlen_backend() { return std::make_unique<CudnnVarlenBackend>(Kind::varlen); }
std::unique_ptr<Backend> make_cudnn_paged_backend() { return std::make_unique<CudnnVarlenBackend>(Kind::paged); }

}  // namespace attnfuzz
