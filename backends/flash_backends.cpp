#include "backends/flash_backends.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/layout.h"
#include "kernels/flash/flash.h"

namespace attnfuzz {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("cuda.flash: ") + what + ": " + cudaGetErrorString(e));
}

// Bit patterns the kernels never produce (NaNs with a payload): what an output element
// still holds when no kernel wrote it.
constexpr uint16_t kPoison16 = 0x7fa5;
constexpr uint32_t kPoison32 = 0x7fa5a5a5u;

class DeviceMemory {
 public:
  DeviceMemory() = default;
  explicit DeviceMemory(size_t bytes) : bytes_(bytes) {
    if (bytes_) check(cudaMalloc(&p_, bytes_), "cudaMalloc");
  }
  ~DeviceMemory() {
    if (p_) cudaFree(p_);
  }
  DeviceMemory(DeviceMemory&& o) noexcept : p_(o.p_), bytes_(o.bytes_) { o.p_ = nullptr, o.bytes_ = 0; }
  DeviceMemory& operator=(DeviceMemory&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  void* get() const { return p_; }
  template <class T>
  void upload(const std::vector<T>& h) {
    check(cudaMemcpy(p_, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
  }
  template <class T>
  void download(std::vector<T>& h) const {
    check(cudaMemcpy(h.data(), p_, h.size() * sizeof(T), cudaMemcpyDeviceToHost), "download");
  }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

// The head dim the kernels run: the smallest instantiation that holds both dims.
int kernel_dim(const Shape& s) { return std::max(s.head_dim_qk, s.head_dim_v) <= 64 ? 64 : 128; }

uint16_t to_bits(flash::Elem e, double x) {
  const float f = static_cast<float>(x);
  return e == flash::Elem::f16 ? float_to_half_bits(f) : float_to_bf16_bits(f);
}
double from_bits(flash::Elem e, uint16_t h) { return e == flash::Elem::f16 ? half_bits_to_float(h) : bf16_bits_to_float(h); }

// Where a 16-bit [B][H][S][D] tensor lives for the kernels. With the layout the case asks for
// when the kernels can load it (its dim is the kernel dim, 16-byte aligned rows, heads and
// base); otherwise compact [B][H][S][kernel dim], zero-padded past the tensor's own dim.
struct Placed16 {
  Placement pl;
  flash::Strides strides;
  int64_t dim = 0;  // the tensor's own head dim (<= the kernel dim)
  std::vector<uint16_t> host;
  DeviceMemory dev;
  void* ptr = nullptr;  // element (0, 0, 0, 0)

  Placed16(const Problem& p, TensorId role, int kdim, bool output) {
    pl = place(p.layouts, role, p.shape);
    dim = pl.sizes[3];
    const bool native = dim == kdim && pl.offset % 8 == 0 && pl.strides[0] % 8 == 0 && pl.strides[1] % 8 == 0 && pl.strides[2] % 8 == 0;
    if (!native) {
      const int64_t rows = pl.sizes[2], heads = pl.sizes[1];
      pl.strides = {heads * rows * kdim, rows * kdim, kdim, 1};
      pl.offset = 0;
      pl.extent = pl.sizes[0] * heads * rows * kdim;
    }
    strides = {pl.strides[0], pl.strides[1], pl.strides[2]};
    // An input's buffer holds the case's surround where its elements are not (harness/layout.h);
    // a copy to the kernel's own layout (not native) has nothing around it but zero padding.
    const flash::Elem e = p.dtype == DType::f16 ? flash::Elem::f16 : flash::Elem::bf16;
    const uint16_t around = native ? to_bits(e, surround_value(p.layouts.surround.fill, p.dtype)) : uint16_t{0};
    host.assign(static_cast<size_t>(pl.extent), output ? kPoison16 : around);
    dev = DeviceMemory(host.size() * sizeof(uint16_t));
    ptr = static_cast<uint16_t*>(dev.get()) + pl.offset;
  }
  void upload(const Tensor& t, flash::Elem e) {
    pl.for_each([&](size_t i, size_t off) { host[off] = to_bits(e, t.data[i]); });
    dev.upload(host);
  }
  void upload_poison() { dev.upload(host); }
  Tensor download(flash::Elem e, size_t* unwritten) {
    dev.download(host);
    Tensor out({pl.sizes[0], pl.sizes[1], pl.sizes[2], dim});
    size_t bad = 0;
    pl.for_each([&](size_t i, size_t off) {
      bad += host[off] == kPoison16;
      out.data[i] = from_bits(e, host[off]);
    });
    *unwritten = bad;
    return out;
  }
};

// An fp32 [B][H][S] tensor (LSE, dLSE) at the LSE's placement: any strides.
struct Placed32 {
  Placement pl;
  flash::Strides strides;
  std::vector<float> host;
  DeviceMemory dev;
  float* ptr = nullptr;

  Placed32(const Problem& p, bool output) : pl(place(p.layouts, TensorId::LSE, p.shape)) {
    strides = {pl.strides[0], pl.strides[1], pl.strides[2]};
    float poison;
    std::memcpy(&poison, &kPoison32, 4);
    const float around = static_cast<float>(surround_value(p.layouts.surround.fill, DType::f32));
    host.assign(static_cast<size_t>(pl.extent), output ? poison : around);
    dev = DeviceMemory(host.size() * sizeof(float));
    ptr = static_cast<float*>(dev.get()) + pl.offset;
  }
  void upload(const Tensor& t) {
    pl.for_each([&](size_t i, size_t off) { host[off] = static_cast<float>(t.data[i]); });
    dev.upload(host);
  }
  void upload_poison() { dev.upload(host); }
  Tensor download(size_t* unwritten) {
    dev.download(host);
    Tensor out({pl.sizes[0], pl.sizes[1], pl.sizes[2]});
    size_t bad = 0;
    pl.for_each([&](size_t i, size_t off) {
      uint32_t u;
      std::memcpy(&u, &host[off], 4);
      bad += u == kPoison32;
      out.data[i] = host[off];
    });
    *unwritten = bad;
    return out;
  }
};

// The band (left, right, diagonal) that a causal or sliding-window leaf is in this call's
// coordinates, when the mask is one; checked against the dense mask before it is trusted.
bool band_of(const Problem& p, flash::Mask& m) {
  if (!p.mask_expr || !p.restrictions.empty()) return false;
  const MaskExpr& e = *p.mask_expr;
  int64_t left = -1, right = -1;
  if (e.kind == MaskExpr::Kind::causal)
    right = 0;
  else if (e.kind == MaskExpr::Kind::sliding_window)
    left = e.left, right = e.right;
  else if (e.kind != MaskExpr::Kind::all)
    return false;
  // visible iff kv' - q' in the window, kv' = j + kv_offset, q' = i + q_offset (+ Skv - Sq bottom-right).
  const int64_t shift = e.kind != MaskExpr::Kind::all && e.align == Align::bottom_right ? p.full_seq_kv - p.full_seq_q : 0;
  m.left = left, m.right = right, m.diagonal = p.q_offset + shift - p.kv_offset;
  const Shape& s = p.shape;
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads_q; ++h)
      for (int64_t i = 0; i < s.seq_q; ++i)
        for (int64_t j = 0; j < s.seq_kv; ++j)
          if (p.visible(b, h, i, j) != in_window(j - i - m.diagonal, left, right)) return false;
  return true;
}

// Tile classes of the dense mask for one tile shape: [planes][tiles_q][tiles_kv].
std::vector<uint8_t> classify(const std::vector<uint8_t>& dense, int64_t planes, int64_t sq, int64_t skv, flash::TileShape t) {
  const int64_t tq = (sq + t.q - 1) / t.q, tk = (skv + t.kv - 1) / t.kv;
  std::vector<uint8_t> out(static_cast<size_t>(planes * tq * tk));
  for (int64_t z = 0; z < planes; ++z)
    for (int64_t a = 0; a < tq; ++a)
      for (int64_t c = 0; c < tk; ++c) {
        int64_t seen = 0, vis = 0;
        for (int64_t i = a * t.q; i < std::min(sq, (a + 1) * t.q); ++i)
          for (int64_t j = c * t.kv; j < std::min(skv, (c + 1) * t.kv); ++j, ++seen)
            vis += dense[static_cast<size_t>((z * sq + i) * skv + j)];
        out[static_cast<size_t>((z * tq + a) * tk + c)] = vis == 0      ? flash::kTileEmpty
                                                          : vis == seen ? flash::kTileFull
                                                                        : flash::kTilePartial;
      }
  return out;
}

// The mask as the kernels take it: a band when the call's mask is one, otherwise the dense
// mask (one plane when every (b, h) plane is the same) and its tile classes.
struct DeviceMask {
  flash::Mask m;
  DeviceMemory dense, tiles_fwd, tiles_bwd;

  DeviceMask(const Problem& p, int kdim) {
    if (band_of(p, m)) return;
    m = flash::Mask{};
    const Shape& s = p.shape;
    const size_t plane = static_cast<size_t>(s.seq_q * s.seq_kv);
    int64_t planes = s.batch * s.heads_q;
    bool same = true;
    for (int64_t z = 1; z < planes && same; ++z) same = std::memcmp(p.mask.data(), p.mask.data() + z * plane, plane) == 0;
    if (same) planes = 1;
    std::vector<uint8_t> d(p.mask.begin(), p.mask.begin() + static_cast<std::ptrdiff_t>(planes * plane));
    const auto tf = classify(d, planes, s.seq_q, s.seq_kv, flash::forward_tile(kdim));
    const auto tb = classify(d, planes, s.seq_q, s.seq_kv, flash::backward_tile(kdim));
    dense = DeviceMemory(d.size()), tiles_fwd = DeviceMemory(tf.size()), tiles_bwd = DeviceMemory(tb.size());
    dense.upload(d), tiles_fwd.upload(tf), tiles_bwd.upload(tb);
    m.dense = static_cast<const uint8_t*>(dense.get());
    m.one_plane = same;
    m.tiles_fwd = static_cast<const uint8_t*>(tiles_fwd.get());
    m.tiles_bwd = static_cast<const uint8_t*>(tiles_bwd.get());
  }
};

flash::Elem elem_of(DType d) { return d == DType::f16 ? flash::Elem::f16 : flash::Elem::bf16; }

// The inputs every call uploads: Q, K, V and the mask.
struct DeviceInputs {
  int kdim;
  flash::Elem elem;
  Placed16 q, k, v;
  DeviceMask mask;
  flash::Problem fp;

  explicit DeviceInputs(const Problem& p)
      : kdim(kernel_dim(p.shape)),
        elem(elem_of(p.dtype)),
        q(p, TensorId::Q, kdim, false),
        k(p, TensorId::K, kdim, false),
        v(p, TensorId::V, kdim, false),
        mask(p, kdim) {
    q.upload(p.q, elem), k.upload(p.k, elem), v.upload(p.v, elem);
    const Shape& s = p.shape;
    fp.elem = elem, fp.head_dim = kdim;
    fp.batch = s.batch, fp.heads_q = s.heads_q, fp.heads_kv = s.heads_kv, fp.seq_q = s.seq_q, fp.seq_kv = s.seq_kv;
    fp.scale = static_cast<float>(p.scale);
    fp.softcap = p.softcap ? static_cast<float>(*p.softcap) : 0.f;
    fp.mask = mask.m;
    fp.q = q.ptr, fp.k = k.ptr, fp.v = v.ptr;
    fp.q_strides = q.strides, fp.k_strides = k.strides, fp.v_strides = v.strides;
  }
};

}  // namespace

std::string FlashBackend::version() const {
  int dev = 0;
  cudaDeviceProp prop{};
  std::string gpu = "cuda";
  if (cudaGetDevice(&dev) == cudaSuccess && cudaGetDeviceProperties(&prop, dev) == cudaSuccess)
    gpu = std::string(prop.name) + " sm_" + std::to_string(prop.major) + std::to_string(prop.minor);
  return "attnfuzz flash kernels, CuTe sm_90a wgmma (" + gpu + ")";
}

std::optional<Contract> FlashBackend::contract(DType d) const {
  if (d == DType::f32) return std::nullopt;
  return natural_contract(d);
}

SupportEnvelope FlashBackend::envelope() const {
  SupportEnvelope e;
  e.dtypes = {DType::f16, DType::bf16};
  e.max_head_dim = 128;
  e.max_batch_heads = 65535;
  e.ragged = true;  // a ragged batch is its dense mask, in the tile-level block mask
  return e;
}

std::optional<std::string> FlashBackend::unsupported_reason(const Problem& p) const {
  if (auto why = envelope().refusal(p)) return why;
  if (p.shape.heads_kv <= 0 || p.shape.heads_q % p.shape.heads_kv != 0) return "heads_q must be a multiple of heads_kv";
  if (p.softcap && !(*p.softcap > 0)) return "a softcap must be positive";
  if (!flash::instantiated(elem_of(p.dtype), kernel_dim(p.shape))) return "this build has no kernel for this dtype and head dim";
  return std::nullopt;
}

Forward FlashBackend::forward(const Problem& p) {
  if (auto why = unsupported_reason(p)) throw std::invalid_argument("cuda.flash: " + *why);
  DeviceInputs in(p);
  Placed16 o(p, TensorId::O, in.kdim, true);
  Placed32 lse(p, true);
  o.upload_poison(), lse.upload_poison();
  flash::ForwardArgs a;
  a.o = o.ptr, a.o_strides = o.strides, a.lse = lse.ptr, a.lse_strides = lse.strides;
  flash::forward(in.fp, a);
  check(cudaDeviceSynchronize(), "forward");
  Forward f;
  f.o = o.download(in.elem, &f.unwritten[TensorId::O]);
  f.lse = lse.download(&f.unwritten[TensorId::LSE]);
  return f;
}

Gradients FlashBackend::backward(const Problem& p, const Forward& fwd, const Tensor& d_out, const Tensor& d_lse) {
  if (auto why = unsupported_reason(p)) throw std::invalid_argument("cuda.flash: " + *why);
  DeviceInputs in(p);
  Placed16 o(p, TensorId::O, in.kdim, false), dout(p, TensorId::dO, in.kdim, false);
  Placed32 lse(p, false), dlse(p, false);
  o.upload(fwd.o, in.elem), dout.upload(d_out, in.elem), lse.upload(fwd.lse), dlse.upload(d_lse);
  Placed16 dq(p, TensorId::dQ, in.kdim, true), dk(p, TensorId::dK, in.kdim, true), dv(p, TensorId::dV, in.kdim, true);
  dq.upload_poison(), dk.upload_poison(), dv.upload_poison();
  DeviceMemory ws(flash::backward_workspace_bytes(in.fp));
  flash::BackwardArgs a;
  a.o = o.ptr, a.o_strides = o.strides, a.lse = lse.ptr, a.lse_strides = lse.strides;
  a.d_out = dout.ptr, a.d_out_strides = dout.strides, a.d_lse = dlse.ptr, a.d_lse_strides = dlse.strides;
  a.dq = dq.ptr, a.dq_strides = dq.strides, a.dk = dk.ptr, a.dk_strides = dk.strides, a.dv = dv.ptr, a.dv_strides = dv.strides;
  a.workspace = ws.get();
  flash::backward(in.fp, a);
  check(cudaDeviceSynchronize(), "backward");
  Gradients g;
  g.dq = dq.download(in.elem, &g.unwritten[TensorId::dQ]);
  g.dk = dk.download(in.elem, &g.unwritten[TensorId::dK]);
  g.dv = dv.download(in.elem, &g.unwritten[TensorId::dV]);
  return g;
}

namespace {

// Parts' tensors one after another, as fp32 ([n][rows][dim]).
std::vector<float> stacked(const std::vector<const Tensor*>& ts) {
  std::vector<float> out;
  for (const Tensor* t : ts) out.insert(out.end(), t->data.begin(), t->data.end());
  return out;
}
std::vector<float> as_f32(const Tensor& t) { return std::vector<float>(t.data.begin(), t.data.end()); }
void into(Tensor& t, const float* src) { std::copy(src, src + t.numel(), t.data.begin()); }

template <class T>
DeviceMemory on_device(const std::vector<T>& h) {
  DeviceMemory d(std::max<size_t>(1, h.size()) * sizeof(T));
  if (!h.empty()) d.upload(h);
  return d;
}

}  // namespace

Forward GpuMerger::forward(const std::vector<Forward>& parts) const {
  const int n = static_cast<int>(parts.size());
  Forward out{Tensor(parts.at(0).o.shape), Tensor(parts.at(0).lse.shape)};
  const int64_t rows = static_cast<int64_t>(out.lse.numel()), dim = rows ? static_cast<int64_t>(out.o.numel()) / rows : 0;
  std::vector<const Tensor*> os, ls;
  for (const auto& f : parts) os.push_back(&f.o), ls.push_back(&f.lse);
  DeviceMemory d_o_parts = on_device(stacked(os)), d_l_parts = on_device(stacked(ls));
  std::vector<float> o(out.o.numel()), l(out.lse.numel());
  DeviceMemory d_o = on_device(o), d_l = on_device(l);
  flash::merge_forward(n, rows, dim, static_cast<const float*>(d_o_parts.get()), static_cast<const float*>(d_l_parts.get()),
                       static_cast<float*>(d_o.get()), static_cast<float*>(d_l.get()));
  check(cudaDeviceSynchronize(), "merge forward");
  d_o.download(o), d_l.download(l);
  into(out.o, o.data()), into(out.lse, l.data());
  return out;
}

std::vector<PartGrad> GpuMerger::backward(const std::vector<Forward>& parts, const Forward& merged, const Tensor& d_out,
                                          const Tensor& d_lse) const {
  const int n = static_cast<int>(parts.size());
  const int64_t rows = static_cast<int64_t>(merged.lse.numel()), dim = rows ? static_cast<int64_t>(merged.o.numel()) / rows : 0;
  std::vector<const Tensor*> os, ls;
  for (const auto& f : parts) os.push_back(&f.o), ls.push_back(&f.lse);
  DeviceMemory d_o_parts = on_device(stacked(os)), d_l_parts = on_device(stacked(ls));
  DeviceMemory d_o = on_device(as_f32(merged.o)), d_l = on_device(as_f32(merged.lse));
  DeviceMemory d_do = on_device(as_f32(d_out)), d_dl = on_device(as_f32(d_lse));
  std::vector<float> g_o(static_cast<size_t>(n * rows * dim)), g_l(static_cast<size_t>(n * rows));
  DeviceMemory d_go = on_device(g_o), d_gl = on_device(g_l);
  flash::merge_backward(n, rows, dim, static_cast<const float*>(d_o_parts.get()), static_cast<const float*>(d_l_parts.get()),
                        static_cast<const float*>(d_o.get()), static_cast<const float*>(d_l.get()), static_cast<const float*>(d_do.get()),
                        static_cast<const float*>(d_dl.get()), static_cast<float*>(d_go.get()), static_cast<float*>(d_gl.get()));
  check(cudaDeviceSynchronize(), "merge backward");
  d_go.download(g_o), d_gl.download(g_l);
  std::vector<PartGrad> out;
  for (int k = 0; k < n; ++k) {
    PartGrad g{Tensor(d_out.shape), Tensor(d_lse.shape)};
    into(g.d_out, g_o.data() + static_cast<size_t>(k * rows * dim));
    into(g.d_lse, g_l.data() + static_cast<size_t>(k * rows));
    out.push_back(std::move(g));
  }
  return out;
}

}  // namespace attnfuzz
