// The `cudnn` backend: cuDNN SDPA forward and backward through the cuDNN frontend.
//
//  - the mask: the dense mask is matched against cuDNN's native masking (no mask, causal,
//    diagonal band, each with or without padding to per-batch lengths); the first native
//    plan that reproduces it exactly and that cuDNN accepts runs, else an additive bias;
//  - the score bias: cuDNN's bias input, with a native plan the bias alone (where cuDNN takes a
//    bias with that mask), else inside the fallback's bias (the score bias where visible);
//  - the layouts: Q, K, V, O, dO and the gradients live on the device each at its placement
//    (harness/layout.h: any order, padded rows and heads, offsets, packed views) and cuDNN
//    gets their strides; pointers not 16-byte aligned and a non-packed LSE are declined;
//  - conventions: fp32 Stats are the natural-log LSE; cuDNN's backward takes no dLSE, and
//    fully masked rows follow cuDNN's own convention, both of which the harness handles;
//  - dBias (a score bias that requires a gradient): the backward graph's dBias output
//    (set_dbias), [B or 1][Hq or 1][Sq][Skv] in the io type, cuDNN summing dS over the batch
//    (heads) where it is 1; the sums over the rest of the bias's broadcast are ours (sum_dbias).
#include "backends/cudnn_sdpa.h"

#include <algorithm>
#include <bit>
#include <map>
#include <stdexcept>

#include "harness/dtype.h"
#include "harness/parallel.h"
#include "backends/cudnn_graph.h"

namespace attnfuzz {

// ---- The mask plan (pure) ----

std::string CudnnMaskPlan::describe() const {
  const std::string tensor = std::string("bias[") + (bias_per_batch ? "B" : "1") + "," + (bias_per_head ? "H" : "1") + "]";
  if (bias) return tensor;
  std::string s;
  const char* align = alignment == Align::top_left ? "tl" : "br";
  if (!left_bound && !right_bound)
    s = "none";
  else if (!left_bound && *right_bound == 0)
    s = std::string("causal_") + align;
  else {
    s = std::string("band_") + align + "(";
    if (left_bound) s += "left=" + std::to_string(*left_bound);
    if (left_bound && right_bound) s += ",";
    if (right_bound) s += "right=" + std::to_string(*right_bound);
    s += ")";
  }
  if (padding()) s += "+padding";
  return score_bias ? s + "+" + tensor : s;
}

namespace {

// The diagonal's offset for batch b: cuDNN's bottom-right alignment puts the last query
// row on the last key column, of the whole tensors or, with padding, of each sequence.
int64_t diagonal_shift(const CudnnMaskPlan& plan, const Shape& s, int64_t b) {
  if (plan.alignment == Align::top_left) return 0;
  if (plan.padding()) return int64_t{plan.seq_len_kv[static_cast<size_t>(b)]} - plan.seq_len_q[static_cast<size_t>(b)];
  return s.seq_kv - s.seq_q;
}

size_t plane_size(const Shape& s) { return static_cast<size_t>(s.seq_q * s.seq_kv); }

// Whether every head of each batch has head 0's mask: a native plan knows no heads.
bool heads_agree(const Problem& p) {
  const Shape& s = p.shape;
  const size_t plane = plane_size(s);
  for (int64_t b = 0; b < s.batch; ++b) {
    const auto first = p.mask.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(b * s.heads_q) * plane);
    for (int64_t h = 1; h < s.heads_q; ++h)
      if (!std::equal(first, first + static_cast<std::ptrdiff_t>(plane),
                      first + static_cast<std::ptrdiff_t>(static_cast<size_t>(h) * plane)))
        return false;
  }
  return true;
}

// Whether every batch has batch 0's mask (all heads).
bool batches_agree(const Problem& p) {
  const size_t per_batch = static_cast<size_t>(p.shape.heads_q) * plane_size(p.shape);
  for (int64_t b = 1; b < p.shape.batch; ++b)
    if (!std::equal(p.mask.begin(), p.mask.begin() + static_cast<std::ptrdiff_t>(per_batch),
                    p.mask.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(b) * per_batch)))
      return false;
  return true;
}

// Whether the plan reproduces head 0 of every batch (all of p.mask once the heads agree).
bool reproduces(const CudnnMaskPlan& plan, const Problem& p) {
  const Shape& s = p.shape;
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t i = 0; i < s.seq_q; ++i)
      for (int64_t j = 0; j < s.seq_kv; ++j)
        if (cudnn_mask_plan_visible(plan, p, b, 0, i, j) != p.visible(b, 0, i, j)) return false;
  return true;
}

// The shortest per-batch lengths that keep every visible element of head 0: one past the
// last row (column) holding one; 0 for a batch that sees nothing. A bottom-right band
// always sees the corner (seq_len_q - 1, seq_len_kv - 1), so these are the only lengths
// under which it can match; for the other plans longer lengths only add masked rows.
void shortest_lengths(const Problem& p, std::vector<int32_t>& len_q, std::vector<int32_t>& len_kv) {
  const Shape& s = p.shape;
  len_q.assign(static_cast<size_t>(s.batch), 0);
  len_kv.assign(static_cast<size_t>(s.batch), 0);
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t i = 0; i < s.seq_q; ++i)
      for (int64_t j = 0; j < s.seq_kv; ++j)
        if (p.visible(b, 0, i, j)) {
          len_q[static_cast<size_t>(b)] = static_cast<int32_t>(i + 1);
          len_kv[static_cast<size_t>(b)] = std::max(len_kv[static_cast<size_t>(b)], static_cast<int32_t>(j + 1));
        }
}

// The tightest bounds of j - i - shift over head 0's visible elements, or nothing when
// none is visible. Any band that reproduces the mask contains this one and they agree on
// every element of the grid, so trying the tightest bounds finds a band when one exists.
std::optional<std::pair<int64_t, int64_t>> diagonal_range(const CudnnMaskPlan& plan, const Problem& p) {
  const Shape& s = p.shape;
  std::optional<std::pair<int64_t, int64_t>> r;
  for (int64_t b = 0; b < s.batch; ++b) {
    const int64_t shift = diagonal_shift(plan, s, b);
    for (int64_t i = 0; i < s.seq_q; ++i)
      for (int64_t j = 0; j < s.seq_kv; ++j)
        if (p.visible(b, 0, i, j)) {
          const int64_t d = j - i - shift;
          r = r ? std::pair{std::min(r->first, d), std::max(r->second, d)} : std::pair{d, d};
        }
  }
  return r;
}

// The native candidates over one padding choice, in order of preference.
std::vector<CudnnMaskPlan> native_candidates(const Problem& p, const CudnnMaskPlan& base) {
  std::vector<CudnnMaskPlan> out{base};
  for (Align a : {Align::top_left, Align::bottom_right}) {
    CudnnMaskPlan causal = base;
    causal.alignment = a;
    causal.right_bound = 0;
    out.push_back(causal);
  }
  for (Align a : {Align::top_left, Align::bottom_right}) {
    CudnnMaskPlan band = base;
    band.alignment = a;
    const auto range = diagonal_range(band, p);
    if (!range) continue;
    // visible iff j - i - shift <= right and > -left: right = max, left = 1 - min.
    const int64_t right = range->second, left = 1 - range->first;
    if (right >= 0) {
      band.right_bound = right;
      out.push_back(band);
    }
    if (left >= 1) {
      band.right_bound.reset();
      band.left_bound = left;
      out.push_back(band);
      if (right >= 0) {
        band.right_bound = right;
        out.push_back(band);
      }
    }
  }
  return out;
}

std::vector<CudnnMaskPlan> find_mask_plans(const Problem& p);

}  // namespace

bool cudnn_mask_plan_visible(const CudnnMaskPlan& plan, const Problem& p, int64_t b, int64_t h, int64_t i, int64_t j) {
  if (plan.bias) return p.visible(b, h, i, j);
  if (plan.padding() && (i >= plan.seq_len_q[static_cast<size_t>(b)] || j >= plan.seq_len_kv[static_cast<size_t>(b)])) return false;
  const int64_t d = j - i - diagonal_shift(plan, p.shape, b);
  if (plan.right_bound && d > *plan.right_bound) return false;  // masked beyond column i' + right_bound
  if (plan.left_bound && d <= -*plan.left_bound) return false;  // masked at or before column i' - left_bound
  return true;
}

std::vector<CudnnMaskPlan> cudnn_mask_plans(const Problem& p) {
  // The plans depend on the shape, the dense mask and the score bias's extents alone (not its
  // values). A real-size case asks for them again and again (the support check, every forward
  // and backward, the dLSE term's extra calls), and finding them walks the mask about ten times
  // (some 50 ms at S=1088 with 8 heads); comparing the mask with the last one asked about is one
  // pass.
  struct Last {
    int64_t batch = -1, heads_q = -1, seq_q = -1, seq_kv = -1;
    std::vector<int64_t> bias_shape;  // empty: no score bias
    std::vector<uint8_t> mask;
    std::vector<CudnnMaskPlan> plans;
  };
  thread_local Last last;
  const Shape& s = p.shape;
  const std::vector<int64_t> bias_shape = p.has_bias() ? p.bias.shape : std::vector<int64_t>{};
  const bool large = p.mask.size() >= (size_t{1} << 16);
  if (large && last.batch == s.batch && last.heads_q == s.heads_q && last.seq_q == s.seq_q && last.seq_kv == s.seq_kv &&
      last.bias_shape == bias_shape && last.mask == p.mask)
    return last.plans;
  std::vector<CudnnMaskPlan> plans = find_mask_plans(p);
  if (large) last = {s.batch, s.heads_q, s.seq_q, s.seq_kv, bias_shape, p.mask, plans};
  return plans;
}

namespace {

std::vector<CudnnMaskPlan> find_mask_plans(const Problem& p) {
  std::vector<CudnnMaskPlan> plans;
  // The score bias's own broadcast: [B|1][Hq|1][Sq|1][Skv|1] (its q and kv extents are
  // expanded on upload, cuDNN's bias being [.][.][Sq][Skv]).
  const bool score_bias = p.has_bias();
  const bool bias_batch = score_bias && p.bias.shape[0] > 1, bias_heads = score_bias && p.bias.shape[1] > 1;
  const bool same_heads = heads_agree(p);
  if (same_heads) {
    CudnnMaskPlan padded;
    shortest_lengths(p, padded.seq_len_q, padded.seq_len_kv);
    for (const CudnnMaskPlan& base : {CudnnMaskPlan{}, padded})
      for (CudnnMaskPlan c : native_candidates(p, base)) {
        c.score_bias = score_bias;
        c.bias_per_batch = bias_batch;
        c.bias_per_head = bias_heads;
        if (std::find(plans.begin(), plans.end(), c) == plans.end() && reproduces(c, p)) plans.push_back(c);
      }
  }
  CudnnMaskPlan bias;
  bias.bias = true;
  bias.score_bias = score_bias;
  bias.bias_per_head = !same_heads || bias_heads;
  bias.bias_per_batch = !batches_agree(p) || bias_batch;
  plans.push_back(bias);
  return plans;
}

}  // namespace

CudnnMaskPlan plan_cudnn_mask(const Problem& p) { return cudnn_mask_plans(p).front(); }

namespace {

std::vector<CudnnMaskPlan> find_varlen_mask_plans(const Problem& p, const std::vector<int32_t>& call_q, const std::vector<int32_t>& call_kv) {
  std::vector<CudnnMaskPlan> plans;
  if (!heads_agree(p)) return plans;
  CudnnMaskPlan call_lengths, shortest;
  call_lengths.seq_len_q = call_q;
  call_lengths.seq_len_kv = call_kv;
  shortest_lengths(p, shortest.seq_len_q, shortest.seq_len_kv);
  for (const CudnnMaskPlan& base : {call_lengths, shortest})
    for (const CudnnMaskPlan& c : native_candidates(p, base))
      if (std::find(plans.begin(), plans.end(), c) == plans.end() && reproduces(c, p)) plans.push_back(c);
  return plans;
}

}  // namespace

std::vector<CudnnMaskPlan> cudnn_varlen_mask_plans(const Problem& p) {
  const Shape& s = p.shape;
  std::vector<int32_t> call_q, call_kv;
  for (int64_t b = 0; b < s.batch; ++b) {
    call_q.push_back(static_cast<int32_t>(p.call_len_q(b)));
    call_kv.push_back(static_cast<int32_t>(p.call_len_kv(b)));
  }
  // As cudnn_mask_plans: every call of a case asks again, so the last large answer is kept.
  struct Last {
    Shape shape;
    std::vector<int32_t> call_q, call_kv;
    std::vector<uint8_t> mask;
    std::vector<CudnnMaskPlan> plans;
    bool valid = false;
  };
  thread_local Last last;
  const bool large = p.mask.size() >= (size_t{1} << 16);
  if (large && last.valid && last.shape == s && last.call_q == call_q && last.call_kv == call_kv && last.mask == p.mask) return last.plans;
  std::vector<CudnnMaskPlan> plans = find_varlen_mask_plans(p, call_q, call_kv);
  if (large) last = {s, call_q, call_kv, p.mask, plans, true};
  return plans;
}

// ---- The backend ----

namespace {
using namespace cudnn_detail;

// What the bias adds where the mask hides a key: finite, so a row with no visible key
// stays a finite softmax (the harness leaves such rows out), yet far enough below any
// score that exp() of a masked score is exactly 0 next to a visible one. With headroom
// below the type's limit in case a kernel pre-multiplies by log2(e).
double masked_bias(DType d) { return d == DType::f16 ? -30000.0 : -1e30; }

uint16_t to_bits(DType d, double x) {
  const float f = static_cast<float>(x);  // exact: inputs are already rounded to d
  return d == DType::f16 ? float_to_half_bits(f) : float_to_bf16_bits(f);
}

double from_bits(DType d, uint16_t bits) { return d == DType::f16 ? half_bits_to_float(bits) : bf16_bits_to_float(bits); }

// The placement of a tensor of the call (harness/layout.h): its strides for the graph,
// its offset into its buffer, its buffer's extent.
Placement placement(const Problem& p, TensorId r) { return place(p.layouts, r, p.shape); }
Strides strides_of(const Placement& pl) { return {pl.strides[0], pl.strides[1], pl.strides[2], pl.strides[3]}; }

// Why the backend cannot hand cuDNN this call's layouts, or nothing. cuDNN's graph takes
// strides but no pointer, so its support check never sees a base address: a pointer that
// is not 16-byte aligned is declined here rather than run unchecked on the device. Stats
// stay cuDNN's packed [B, Hq, Sq, 1] (the backward reads no other layout before 9.26).
// Placement::for_each over threads at real size, row by row: every element is converted on its
// own (to or from the 16-bit type), so any split gives the same bits (harness/parallel.h).
template <class F>
void for_each_placed(const Placement& pl, F&& f) {
  const int64_t w = pl.ndim == 4 ? pl.sizes[3] : 1, heads = pl.sizes[1], seq = pl.sizes[2];
  parallel_for(static_cast<size_t>(pl.sizes[0] * heads * seq), static_cast<size_t>(w), [&](size_t row_begin, size_t row_end) {
    for (size_t row = row_begin; row < row_end; ++row) {
      const int64_t r = static_cast<int64_t>(row), s = r % seq, h = (r / seq) % heads, b = r / (seq * heads);
      for (int64_t d = 0; d < w; ++d) f(row * static_cast<size_t>(w) + static_cast<size_t>(d), static_cast<size_t>(pl.at(b, h, s, d)));
    }
  });
}

// Device memory of a call, laid out as the Problem asks: one zero-filled allocation per
// buffer, shared by the members of a packed group.
class DeviceTensors {
 public:
  explicit DeviceTensors(const Problem& p) : p_(p) {}

  // Uploads the tensors, each at its placement, every other element of the buffer holding the
  // case's surround (harness/layout.h).
  void upload(std::initializer_list<std::pair<TensorId, const Tensor*>> tensors) {
    std::map<TensorId, std::vector<uint16_t>> host;
    const uint16_t around = to_bits(p_.dtype, surround_value(p_.layouts.surround.fill, p_.dtype));
    for (auto [r, t] : tensors) {
      const Placement pl = placement(p_, r);
      std::vector<uint16_t>& h = host[pl.buffer];
      h.resize(static_cast<size_t>(pl.extent), around);
      for_each_placed(pl, [&](size_t i, size_t off) { h[off] = to_bits(p_.dtype, t->data[i]); });
    }
    for (auto& [owner, h] : host) {
      DeviceBuffer& buf = buffers_[owner];
      buf = DeviceBuffer(h.size() * sizeof(uint16_t));
      buf.upload(h.data(), h.size() * sizeof(uint16_t));
    }
  }

  // Zero-filled room for outputs.
  void allocate(std::initializer_list<TensorId> roles) {
    for (TensorId r : roles) {
      const Placement pl = placement(p_, r);
      if (!buffers_.count(pl.buffer)) buffers_[pl.buffer] = DeviceBuffer(static_cast<size_t>(pl.extent) * sizeof(uint16_t));
    }
  }

  // Element (0, 0, 0, 0) of the tensor on the device.
  void* ptr(TensorId r) const {
    const Placement pl = placement(p_, r);
    return static_cast<uint16_t*>(buffers_.at(pl.buffer).get()) + pl.offset;
  }

  Tensor download(TensorId r) const {
    const Placement pl = placement(p_, r);
    std::vector<uint16_t> h(static_cast<size_t>(pl.extent));
    buffers_.at(pl.buffer).download(h.data(), h.size() * sizeof(uint16_t));
    Tensor t(std::vector<int64_t>(pl.sizes.begin(), pl.sizes.begin() + pl.ndim));
    for_each_placed(pl, [&](size_t i, size_t off) { t.data[i] = from_bits(p_.dtype, h[off]); });
    return t;
  }

 private:
  const Problem& p_;
  std::map<TensorId, DeviceBuffer> buffers_;  // by the tensor that owns the buffer
};

// The batch and head extents of a dBias output (GraphSpec::dbias_batch, dbias_heads).
struct DbiasExtents {
  int64_t batch = 1, heads = 1;
  bool operator==(const DbiasExtents&) const = default;
};

// The dBias outputs to ask cuDNN for when the call's bias requires a gradient, nearest to the
// bias first: its own batch and head extents (cuDNN does every sum over B and Hq it can), then
// per head (dBias [1 or B][Hq][Sq][Skv]: the shape cuDNN's own tests and samples ask for,
// test/python/sdpa/fp16.py and samples/cpp/sdpa/fp16_bwd.cpp of cudnn-frontend, and the only
// one TransformerEngine lets cuDNN compute, its "1hss"), then per batch and head (no sum by
// cuDNN). Sq and Skv are always whole: cuDNN's bias is [.][.][Sq][Skv] here (its q and kv
// extents expanded on upload, upload_bias). Which of these the engines take on a given GPU
// and version is cuDNN's to say: the first whose graphs build runs. {nothing}: no dBias.
std::vector<std::optional<DbiasExtents>> dbias_candidates(const Problem& p) {
  if (!p.bias_requires_grad || !p.has_bias()) return {std::nullopt};
  const Shape& s = p.shape;
  const int64_t batch = p.bias.shape[0] > 1 ? s.batch : 1, heads = p.bias.shape[1] > 1 ? s.heads_q : 1;
  std::vector<std::optional<DbiasExtents>> out;
  for (DbiasExtents e : {DbiasExtents{batch, heads}, DbiasExtents{batch, s.heads_q}, DbiasExtents{s.batch, s.heads_q}})
    if (std::find(out.begin(), out.end(), std::optional<DbiasExtents>(e)) == out.end()) out.emplace_back(e);
  return out;
}

GraphSpec graph_spec(const Problem& p, const CudnnMaskPlan& plan, const std::optional<DbiasExtents>& dbias) {
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
  using R = TensorId;
  g.q_stride = strides_of(placement(p, R::Q));
  g.k_stride = strides_of(placement(p, R::K));
  g.v_stride = strides_of(placement(p, R::V));
  g.o_stride = strides_of(placement(p, R::O));
  g.d_o_stride = strides_of(placement(p, R::dO));
  g.d_q_stride = strides_of(placement(p, R::dQ));
  g.d_k_stride = strides_of(placement(p, R::dK));
  g.d_v_stride = strides_of(placement(p, R::dV));
  g.scale_bits = std::bit_cast<uint32_t>(static_cast<float>(p.scale));  // cuDNN takes an fp32 scale
  g.padding = plan.padding();
  g.left_bound = plan.left_bound;
  g.right_bound = plan.right_bound;
  g.bottom_right = (plan.left_bound || plan.right_bound) && plan.alignment == Align::bottom_right;
  g.bias = plan.bias_input();
  g.bias_batch = plan.bias_per_batch ? s.batch : 1;
  g.bias_heads = plan.bias_per_head ? s.heads_q : 1;
  // A dBias needs the bias input it is the gradient of (every plan of a call with a score
  // bias has one: CudnnMaskPlan::score_bias).
  if (dbias && !g.bias) throw std::logic_error("cudnn: a dBias output without a bias input");
  g.dbias = dbias.has_value();
  g.dbias_batch = dbias ? dbias->batch : 1;
  g.dbias_heads = dbias ? dbias->heads : 1;
  return g;
}

// dBias shaped like the call's bias ([B|1][Hq|1][Sq|1][Skv|1]) from cuDNN's [db][dh][Sq][Skv]
// (`raw`, io-type bits): each element the sum of the cuDNN elements that broadcast onto it.
// Accumulated in float32, in index order (b, h, i, j), and rounded once to the case dtype: what
// a caller summing cuDNN's dBias over the rest of its bias's broadcast does (LibTorch's
// at::sum_to, as for the efficient kernel's dBias in backends/torch_sdpa_cuda.cpp, accumulates
// 16-bit types in float32 and stores in their type), with the accumulation type and the single
// store of the contract baselines' sum (oracles/emulated.cpp); the summands are cuDNN's output,
// already rounded to the case dtype once. Not in float64, which would hide the accumulation
// such a caller's sum adds, nor in the 16-bit type, which no library accumulates in. Where
// nothing is left to sum (cuDNN's dBias already has the bias's shape) this is cuDNN's output.
Tensor sum_dbias(const Problem& p, const GraphSpec& g, const std::vector<uint16_t>& raw) {
  std::vector<float> acc(p.bias.numel(), 0.0f);
  size_t idx = 0;
  for (int64_t b = 0; b < g.dbias_batch; ++b)
    for (int64_t h = 0; h < g.dbias_heads; ++h)
      for (int64_t i = 0; i < g.seq_q; ++i)
        for (int64_t j = 0; j < g.seq_kv; ++j) acc[p.bias_offset(b, h, i, j)] += static_cast<float>(from_bits(p.dtype, raw[idx++]));
  Tensor out(p.bias.shape);
  for (size_t e = 0; e < acc.size(); ++e) out.data[e] = round_to(p.dtype, static_cast<double>(acc[e]));
  return out;
}

struct Selection {
  CudnnMaskPlan plan;
  GraphSpec spec;
};

// One call's device memory: inputs in the Problem's layout, the mask's inputs, and
// cuDNN's own forward results (O, Stats), which the backward consumes.
class DeviceCall {
 public:
  DeviceCall(const Problem& p, const Selection& sel)
      : p_(p), sel_(sel), io_(p), stats_(static_cast<size_t>(p.shape.batch * p.shape.heads_q * p.shape.seq_q) * sizeof(float)) {
    using R = TensorId;
    io_.upload({{R::Q, &p.q}, {R::K, &p.k}, {R::V, &p.v}});
    io_.allocate({R::O});
    const CudnnMaskPlan& plan = sel.plan;
    if (plan.padding()) {
      const size_t bytes = plan.seq_len_q.size() * sizeof(int32_t);
      seq_len_q_ = DeviceBuffer(bytes);
      seq_len_kv_ = DeviceBuffer(bytes);
      seq_len_q_.upload(plan.seq_len_q.data(), bytes);
      seq_len_kv_.upload(plan.seq_len_kv.data(), bytes);
    }
    if (plan.bias_input()) upload_bias();
  }

  // cuDNN's forward into O and Stats.
  void forward(GraphCache& graphs) {
    // With padding cuDNN writes no padded row: zeros there, not a previous call's values.
    io_.allocate({TensorId::O});
    stats_.zero();
    DevicePointers ptrs = inputs();
    ptrs.o = io_.ptr(TensorId::O);
    ptrs.stats = stats_.get();
    graphs.execute(sel_.spec, Pass::forward, ptrs);
  }

  Forward forward_result() const {
    const Shape& s = p_.shape;
    Forward f;
    f.o = io_.download(TensorId::O);
    f.lse = Tensor({s.batch, s.heads_q, s.seq_q});
    std::vector<float> stats(f.lse.numel());
    stats_.download(stats.data(), stats.size() * sizeof(float));
    std::copy(stats.begin(), stats.end(), f.lse.data.begin());
    return f;
  }

  // cuDNN's backward from the O and Stats of forward().
  Gradients backward(GraphCache& graphs, const Tensor& d_out) {
    using R = TensorId;
    const GraphSpec& g = sel_.spec;
    io_.upload({{R::dO, &d_out}});
    io_.allocate({R::dQ, R::dK, R::dV});  // zero-filled: padded rows and keys are not written
    DevicePointers ptrs = inputs();
    ptrs.o = io_.ptr(R::O);
    ptrs.stats = stats_.get();
    ptrs.d_o = io_.ptr(R::dO);
    ptrs.d_q = io_.ptr(R::dQ);
    ptrs.d_k = io_.ptr(R::dK);
    ptrs.d_v = io_.ptr(R::dV);
    const size_t dbias_elements = g.dbias ? static_cast<size_t>(g.dbias_batch * g.dbias_heads * g.seq_q * g.seq_kv) : 0;
    DeviceBuffer d_bias(dbias_elements * sizeof(uint16_t));  // zero-filled, as dQ
    ptrs.d_bias = d_bias.get();
    graphs.execute(g, Pass::backward, ptrs);
    Gradients grads{io_.download(R::dQ), io_.download(R::dK), io_.download(R::dV), {}};
    if (g.dbias) {
      std::vector<uint16_t> raw(dbias_elements);
      d_bias.download(raw.data(), raw.size() * sizeof(uint16_t));
      grads.dbias = sum_dbias(p_, g, raw);
    }
    return grads;
  }

 private:
  DevicePointers inputs() const {
    DevicePointers ptrs;
    ptrs.q = io_.ptr(TensorId::Q);
    ptrs.k = io_.ptr(TensorId::K);
    ptrs.v = io_.ptr(TensorId::V);
    ptrs.bias = bias_.get();
    ptrs.seq_len_q = seq_len_q_.get();
    ptrs.seq_len_kv = seq_len_kv_.get();
    return ptrs;
  }

  // The additive [bias_batch][bias_heads][Sq][Skv] tensor in the io type: the score bias (0
  // without one) where the key is visible; with the fallback plan, masked_bias where the mask
  // hides it (a native plan masks by itself). Over a dimension of extent 1 the mask (fallback)
  // and the score bias agree across it, so index 0 stands for all.
  void upload_bias() {
    const GraphSpec& g = sel_.spec;
    const bool carries_mask = sel_.plan.bias;
    const uint16_t zero = to_bits(p_.dtype, 0.0), masked = to_bits(p_.dtype, masked_bias(p_.dtype));
    std::vector<uint16_t> host(static_cast<size_t>(g.bias_batch * g.bias_heads * g.seq_q * g.seq_kv));
    size_t idx = 0;
    for (int64_t b = 0; b < g.bias_batch; ++b)
      for (int64_t h = 0; h < g.bias_heads; ++h)
        for (int64_t i = 0; i < g.seq_q; ++i)
          for (int64_t j = 0; j < g.seq_kv; ++j)
            host[idx++] = carries_mask && !p_.visible(b, h, i, j) ? masked
                          : p_.has_bias()                         ? to_bits(p_.dtype, p_.bias_at(b, h, i, j))
                                                                  : zero;
    bias_ = DeviceBuffer(host.size() * sizeof(uint16_t));
    bias_.upload(host.data(), host.size() * sizeof(uint16_t));
  }

  const Problem& p_;
  const Selection& sel_;
  DeviceTensors io_;
  DeviceBuffer stats_, bias_, seq_len_q_, seq_len_kv_;
};

class CudnnSdpaBackend final : public Backend {
 public:
  std::string name() const override { return "cudnn"; }
  std::string version() const override {
    return "cudnn-" + std::to_string(cudnn_runtime_version()) + " frontend-" + cudnn_frontend_version();
  }
  Device device() const override { return Device::cuda; }
  // cuDNN SDPA takes fp16/bf16 only (fp32 operands would be rounded, not computed in fp32).
  std::optional<Contract> contract(DType d) const override {
    if (d == DType::f32) return std::nullopt;
    return natural_contract(d);
  }
  // cuDNN gives a row with no visible key its own values (or a uniform softmax under the
  // bias), not O = 0 / LSE = -inf: the harness leaves those rows out.
  bool masked_rows_zero() const override { return false; }
  bool backward_takes_dlse() const override { return false; }

  // cuDNN 9 SDPA on sm90 for sure: fp16/bf16, head dims that are multiples of 8 up to 128, two
  // keys or more, any mask (natively where exact, else as a bias), a score bias, GQA. The
  // adapter enforces what it cannot hand on: the dtype, the softcap (the graph has none),
  // 16-byte aligned tensors and the LSE packed [B][H][S] (the backward reads its Stats in no
  // other layout); the graph build decides the rest (choose()).
  SupportEnvelope envelope() const override {
    SupportEnvelope e = Backend::envelope();
    e.max_head_dim = 128;
    e.head_dim_multiple = 8;
    e.min_seq_kv = 2;
    e.softcap = false;
    e.bias = true;
    // dBias through the backward graph's dBias output; a shape, dtype or version cuDNN's engines
    // do not take is refused by the graph build (choose()), with cuDNN's message.
    e.bias_grad = true;
    e.ragged = true;  // a ragged batch is its dense mask, natively planned or in the fallback's bias
    e.alignment_bytes = 16;
    e.packed_lse = true;
    e.library_decides = SupportEnvelope::library_decides_all_but(
        {EnvelopeClause::dtype, EnvelopeClause::softcap, EnvelopeClause::alignment, EnvelopeClause::lse});
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
    DeviceCall call(p, sel);
    call.forward(graphs_);
    return call.forward_result();
  }

  // The Forward handed in may have been normalized by the harness (fully masked rows), so
  // the backward runs on cuDNN's own O and Stats, recomputed here.
  Gradients backward(const Problem& p, const Forward&, const Tensor& d_out, const Tensor&) override {
    const Selection sel = select_or_throw(p);
    DeviceCall call(p, sel);
    call.forward(graphs_);
    return call.backward(graphs_, d_out);
  }

  std::optional<CudnnMaskPlan> selected_plan(const Problem& p) const {
    if (!cudnn_sdpa_available(nullptr) || p.softcap || p.dtype == DType::f32) return std::nullopt;
    const Choice c = choose(p);
    if (!c.selection) return std::nullopt;
    return c.selection->plan;
  }

 private:
  struct Choice {
    std::optional<Selection> selection;
    std::string reason;  // why none, when none
  };

  // The first plan (in cudnn_mask_plans' order) whose forward and backward graphs cuDNN
  // builds and supports; with a dBias, for each plan the first dBias output it takes
  // (dbias_candidates). A plan's refusal is its forward's, or its backward's with the nearest
  // dBias.
  Choice choose(const Problem& p) const {
    std::string first_native, bias;  // the first native plan's refusal, the bias fallback's (always last)
    const std::vector<std::optional<DbiasExtents>> dbias = dbias_candidates(p);
    for (const CudnnMaskPlan& plan : cudnn_mask_plans(p)) {
      std::optional<std::string> err;
      for (const std::optional<DbiasExtents>& d : dbias) {
        const GraphSpec spec = graph_spec(p, plan, d);
        if (auto fwd = graphs_.prepare(spec, Pass::forward)) {
          if (!err) err = *fwd;
          break;  // the forward graph reads no dBias: no other candidate builds it either
        }
        auto bwd = graphs_.prepare(spec, Pass::backward);
        if (!bwd) return {Selection{plan, spec}, {}};
        if (!err) {
          const std::string with = d ? " with dBias[" + std::string(d->batch > 1 ? "B" : "1") + "," + (d->heads > 1 ? "H" : "1") + "]" : "";
          err = "backward" + with + ": " + *bwd;
        }
      }
      if (!plan.native())
        bias = *err;
      else if (first_native.empty())
        first_native = *err;
    }
    // The bias plan takes any mask, so its refusal names what blocks the problem itself (a
    // head dim, a stride); a native plan's refusal is often only about the mask.
    const bool both = !first_native.empty() && first_native != bias;
    return {std::nullopt, "cuDNN: " + bias + (both ? "; with a native mask: " + first_native : "")};
  }

  Selection select_or_throw(const Problem& p) const {
    std::string why;
    if (!cudnn_sdpa_available(&why)) throw std::runtime_error("cuDNN: " + why);
    Choice c = choose(p);
    if (!c.selection) throw std::runtime_error(c.reason);
    return *c.selection;
  }

  // Built graphs and the cuDNN handle; mutable because unsupported_reason() builds and
  // caches graphs too (the frontend's support check is the build itself).
  mutable GraphCache graphs_;
};

}  // namespace

std::unique_ptr<Backend> make_cudnn_sdpa_backend() { return std::make_unique<CudnnSdpaBackend>(); }

bool cudnn_sdpa_available(std::string* why) {
  static const std::optional<std::string> reason = [] {
    try {
      return probe_cudnn();
    } catch (const std::exception& e) {
      return std::optional<std::string>(e.what());
    }
  }();
  if (reason && why) *why = *reason;
  return !reason;
}

std::map<std::string, std::string> cudnn_sdpa_environment() {
  std::map<std::string, std::string> env{{"cudnn_runtime", std::to_string(cudnn_runtime_version())},
                                         {"cudnn_compiled", std::to_string(cudnn_compiled_version())},
                                         {"cudnn_frontend", cudnn_frontend_version()}};
  std::string why;
  if (!cudnn_sdpa_available(&why)) env["cudnn_device"] = "unavailable: " + why;
  return env;
}

std::optional<CudnnMaskPlan> cudnn_sdpa_selected_plan(const Backend& backend, const Problem& p) {
  const auto* be = dynamic_cast<const CudnnSdpaBackend*>(&backend);
  if (!be) return std::nullopt;
  return be->selected_plan(p);
}

}  // namespace attnfuzz
