#pragma once
// Test-only helpers for plugins: a tiny dlopen loader and the conversion between the
// harness's float64 Tensors and the strided, case-dtype buffers of the C ABI. The real
// loader is backends/plugin.cpp; these tests deliberately do not depend on it, so the
// plugins are checked against the ABI header alone.
#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "harness/case_json.h"
#include "harness/dtype.h"
#include "harness/inputs.h"
#include "backends/attnfuzz_plugin.h"
#include "oracles/reference.h"

namespace attnfuzz::plugin_test {

// An opened plugin; closes the library when destroyed.
struct Library {
  void* handle = nullptr;
  uint32_t abi_version = 0;
  const af_plugin* plugin = nullptr;
  std::string error;  // dlopen/dlsym failure
  Library() = default;
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;
  ~Library() {
    if (handle) dlclose(handle);
  }
};

inline std::unique_ptr<Library> open_plugin(const std::string& path) {
  auto lib = std::make_unique<Library>();
  // RTLD_LOCAL: two plugins with the same internal symbol names must not interpose.
  lib->handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib->handle) {
    lib->error = dlerror();
    return lib;
  }
  auto version = reinterpret_cast<af_abi_version_fn>(dlsym(lib->handle, "attnfuzz_plugin_abi_version"));
  auto get = reinterpret_cast<af_plugin_get_fn>(dlsym(lib->handle, "attnfuzz_plugin_get"));
  if (!version || !get) {
    lib->error = "missing attnfuzz_plugin_abi_version or attnfuzz_plugin_get";
    return lib;
  }
  lib->abi_version = version();
  // Only a plugin of our version may be asked for its table: the layout could differ.
  if (lib->abi_version == ATTNFUZZ_PLUGIN_ABI_VERSION) lib->plugin = get();
  return lib;
}

inline int32_t af_dtype_of(DType d) {
  switch (d) {
    case DType::f16: return AF_F16;
    case DType::bf16: return AF_BF16;
    case DType::f32: break;
  }
  return AF_F32;
}

// Bit patterns the harness-to-be uses to spot unwritten outputs: quiet NaNs with a
// payload no arithmetic produces.
inline constexpr uint32_t kPoison32 = 0x7fa5a5a5u;
inline constexpr uint16_t kPoisonF16 = 0x7d5au;
inline constexpr uint16_t kPoisonBF16 = 0x7fa5u;

// A tensor in plugin memory: logical [B][H][S][D] (or [B][H][S]) laid out as asked.
struct HostTensor {
  std::vector<uint64_t> storage;  // 8-byte aligned backing store
  std::vector<int64_t> shape;
  int64_t base = 0;  // elements from the storage's start to element (0, 0, 0, 0): t.data
  af_tensor t{};

  size_t elem_bytes() const { return t.dtype == AF_F32 ? 4 : 2; }
  size_t capacity() const { return storage.size() * 8 / elem_bytes(); }
  int64_t offset(const int64_t* idx) const {
    int64_t o = base;
    for (int d = 0; d < t.ndim; ++d) o += idx[d] * t.strides[d];
    return o;
  }
  uint32_t bits(size_t i) const {
    uint32_t x = 0;
    std::memcpy(&x, reinterpret_cast<const char*>(storage.data()) + i * elem_bytes(), elem_bytes());
    return x;
  }
  void set_bits(size_t i, uint32_t x) {
    std::memcpy(reinterpret_cast<char*>(storage.data()) + i * elem_bytes(), &x, elem_bytes());
  }
  uint32_t poison() const { return t.dtype == AF_F16 ? kPoisonF16 : t.dtype == AF_BF16 ? kPoisonBF16 : kPoison32; }

  // Calls f(flat logical index, storage offset) for every logical element, in row-major order.
  template <class F>
  void for_each(F f) const {
    int64_t idx[4] = {0, 0, 0, 0};
    const size_t n = Tensor::numel_of(shape);
    for (size_t i = 0; i < n; ++i) {
      f(i, static_cast<size_t>(offset(idx)));
      for (int d = t.ndim - 1; d >= 0 && ++idx[d] == shape[d]; --d) idx[d] = 0;
    }
  }
};

// A poisoned buffer at the tensor's placement (harness/layout.h: strides, base offset,
// extent). Members of a packed group each get a buffer of the group's extent (no aliasing
// here: the test checks that a plugin writes only its own elements).
inline HostTensor make_host(const Placement& pl, int32_t dtype) {
  HostTensor h;
  h.shape.assign(pl.sizes.begin(), pl.sizes.begin() + pl.ndim);
  h.t.dtype = dtype;
  h.t.device = AF_CPU;
  h.t.ndim = pl.ndim;
  for (int32_t d = 0; d < pl.ndim; ++d) h.t.shape[d] = pl.sizes[static_cast<size_t>(d)], h.t.strides[d] = pl.strides[static_cast<size_t>(d)];
  h.base = pl.offset;
  h.storage.assign(static_cast<size_t>(pl.extent * (dtype == AF_F32 ? 4 : 2) + 7) / 8, 0);
  for (size_t i = 0; i < h.capacity(); ++i) h.set_bits(i, h.poison());
  h.t.data = reinterpret_cast<char*>(h.storage.data()) + pl.offset * (dtype == AF_F32 ? 4 : 2);
  return h;
}

inline uint32_t to_bits(int32_t dtype, double x) {
  const float f = static_cast<float>(x);
  if (dtype == AF_F16) return float_to_half_bits(f);
  if (dtype == AF_BF16) return float_to_bf16_bits(f);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline double from_bits(int32_t dtype, uint32_t b) {
  if (dtype == AF_F16) return half_bits_to_float(static_cast<uint16_t>(b));
  if (dtype == AF_BF16) return bf16_bits_to_float(static_cast<uint16_t>(b));
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

inline HostTensor to_host(const Tensor& src, int32_t dtype, const Placement& pl) {
  HostTensor h = make_host(pl, dtype);
  h.for_each([&](size_t i, size_t o) { h.set_bits(o, to_bits(dtype, src.data[i])); });
  return h;
}

// The logical tensor; counts elements still holding the poison and padding that lost it.
inline Tensor from_host(const HostTensor& h, size_t* unwritten, size_t* padding_touched) {
  Tensor out(h.shape);
  std::vector<bool> logical(h.capacity(), false);
  h.for_each([&](size_t i, size_t o) {
    logical[o] = true;
    if (h.bits(o) == h.poison()) ++*unwritten;
    out.data[i] = from_bits(h.t.dtype, h.bits(o));
  });
  for (size_t o = 0; o < logical.size(); ++o)
    if (!logical[o] && h.bits(o) != h.poison()) ++*padding_touched;
  return out;
}

struct PluginRun {
  Forward fwd;
  Gradients grads;
  size_t unwritten = 0;        // output elements left holding the poison
  size_t padding_touched = 0;  // writes into row padding
  std::string error;           // supports/forward/backward refused or failed
};

// One single call of the whole problem: forward, then backward on the plugin's own O and LSE
// (as the harness does). dLSE goes in only when the plugin says its backward takes it.
inline PluginRun run_plugin(const af_plugin& pl, const Problem& p, const Inputs& in) {
  PluginRun r;
  auto at = [&](TensorId role) { return place(p.layouts, role, p.shape); };
  using R = TensorId;
  const Shape& s = p.shape;
  const int32_t dt = af_dtype_of(p.dtype);
  const std::string mask_json = p.mask_expr ? to_json(*p.mask_expr).dump() : std::string(R"({"kind":"none"})");
  nlohmann::json restr = nlohmann::json::array();
  for (const auto& b : p.restrictions)
    restr.push_back({{"left", b.left}, {"right", b.right}, {"align", b.align == Align::bottom_right ? "bottom_right" : "top_left"},
                     {"inside", b.inside}});
  const std::string restr_json = restr.dump();

  af_problem ap{};
  ap.batch = s.batch;
  ap.heads_q = s.heads_q;
  ap.heads_kv = s.heads_kv;
  ap.seq_q = s.seq_q;
  ap.seq_kv = s.seq_kv;
  ap.head_dim_qk = s.head_dim_qk;
  ap.head_dim_v = s.head_dim_v;
  ap.dtype = dt;
  ap.has_softcap = p.softcap.has_value();
  ap.scale = p.scale;
  ap.softcap = p.softcap.value_or(0.0);
  ap.mask_json = mask_json.c_str();
  ap.restrictions_json = restr_json.c_str();
  ap.q_offset = p.q_offset;
  ap.kv_offset = p.kv_offset;
  ap.full_seq_q = p.full_seq_q;
  ap.full_seq_kv = p.full_seq_kv;
  ap.mask = p.mask.data();

  char msg[512] = "";
  if (pl.supports && pl.supports(&ap, msg, sizeof msg) != 0) {
    r.error = std::string("supports: ") + msg;
    return r;
  }
  HostTensor q = to_host(p.q, dt, at(R::Q)), k = to_host(p.k, dt, at(R::K)), v = to_host(p.v, dt, at(R::V));
  HostTensor o = make_host(at(R::O), dt);
  HostTensor lse = make_host(at(R::LSE), AF_F32);
  if (pl.forward(&ap, &q.t, &k.t, &v.t, &o.t, &lse.t, msg, sizeof msg) != 0) {
    r.error = std::string("forward: ") + msg;
    return r;
  }
  r.fwd.o = from_host(o, &r.unwritten, &r.padding_touched);
  r.fwd.lse = from_host(lse, &r.unwritten, &r.padding_touched);

  HostTensor d_o = to_host(in.d_out, dt, at(R::dO)), d_lse = to_host(in.d_lse, AF_F32, at(R::LSE));
  HostTensor dq = make_host(at(R::dQ), dt), dk = make_host(at(R::dK), dt), dv = make_host(at(R::dV), dt);
  const af_tensor* g = (pl.flags & AF_BACKWARD_TAKES_DLSE) ? &d_lse.t : nullptr;
  if (pl.backward(&ap, &q.t, &k.t, &v.t, &o.t, &lse.t, &d_o.t, g, &dq.t, &dk.t, &dv.t, msg, sizeof msg) != 0) {
    r.error = std::string("backward: ") + msg;
    return r;
  }
  r.grads.dq = from_host(dq, &r.unwritten, &r.padding_touched);
  r.grads.dk = from_host(dk, &r.unwritten, &r.padding_touched);
  r.grads.dv = from_host(dv, &r.unwritten, &r.padding_touched);
  return r;
}

// Relative Frobenius error of `got` against `ref`. Equal infinities (LSE = -inf on fully
// masked rows) count as exact; NaN, or an infinity on one side only, gives +infinity.
inline double rel_error(const Tensor& got, const Tensor& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.numel(); ++i) {
    const double a = got.data[i], b = ref.data[i];
    if (!std::isfinite(a) || !std::isfinite(b)) {
      if (a == b) continue;
      return std::numeric_limits<double>::infinity();
    }
    num += (a - b) * (a - b);
    den += b * b;
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-3);
}

inline size_t count_nan(const Tensor& t) {
  return static_cast<size_t>(std::count_if(t.data.begin(), t.data.end(), [](double x) { return std::isnan(x); }));
}

// Errors of every output and gradient against the float64 reference.
struct Errors {
  double o = 0, lse = 0, dq = 0, dk = 0, dv = 0;
  double max() const { return std::max({o, lse, dq, dk, dv}); }
  std::string str() const {
    char b[160];
    std::snprintf(b, sizeof b, "O %.3g  LSE %.3g  dQ %.3g  dK %.3g  dV %.3g", o, lse, dq, dk, dv);
    return b;
  }
};

struct Compared {
  PluginRun run;
  Errors err;
};

// Runs the plugin and the reference on the case; the reference's backward uses its own forward.
inline Compared compare_with_reference(const af_plugin& pl, const Case& c) {
  const Inputs in = generate_inputs(c);
  const Problem p = full_problem(c, in);
  Compared out;
  out.run = run_plugin(pl, p, in);
  if (!out.run.error.empty()) return out;
  const Forward ref = reference_forward(p);
  const Gradients g = reference_backward(p, ref, in.d_out, in.d_lse);
  out.err = {rel_error(out.run.fwd.o, ref.o), rel_error(out.run.fwd.lse, ref.lse), rel_error(out.run.grads.dq, g.dq),
             rel_error(out.run.grads.dk, g.dk), rel_error(out.run.grads.dv, g.dv)};
  return out;
}

// Every tensor its own layout: all six orders, padded rows and heads, odd base offsets
// (so no tensor starts 16-byte aligned), and the given packings.
inline Layouts exotic_layouts(Packing inputs = Packing::none, Packing grads = Packing::none) {
  Layouts l;
  int64_t i = 0;
  for (TensorId r : kLaidOutTensors) {
    l[r] = TensorLayout{kAllOrders[static_cast<size_t>(i) % kAllOrders.size()], i % 3, (i * 5) % 7, 2 * i + 1};
    ++i;
  }
  l.inputs = inputs;
  l.grads = grads;
  return l;
}

// A case from its parts, validated like a parsed file.
inline Case make_case(uint64_t seed, Shape shape, DType dtype, MaskExpr mask = {}, bool dlse = false,
                      std::optional<double> softcap = std::nullopt, Layouts layouts = {}) {
  Case c;
  c.seed = seed;
  c.shape = shape;
  c.dtype = dtype;
  c.mask = std::move(mask);
  if (dlse) c.d_lse = ValueDist{ValueDist::Kind::normal, 0.0, 1.0, 0.0, 0.0};
  c.softcap = softcap;
  c.layouts = layouts;
  validate(c);
  return c;
}

}  // namespace attnfuzz::plugin_test
