#include "backends/plugin.h"

#include <dlfcn.h>

#include <bit>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <list>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <vector>

#include "harness/case_json.h"
#include "harness/compose.h"
#include "harness/plugin_path.h"
#include "backends/attnfuzz_plugin.h"
#include "backends/plugin_cuda.h"
#include "backends/plugin_flags.h"
#include "backends/plugin_packed.h"
#include "backends/typed_buffers.h"

namespace attnfuzz {
namespace {

int32_t af_dtype_of(DType d) {
  switch (d) {
    case DType::f32:
      return AF_F32;
    case DType::f16:
      return AF_F16;
    case DType::bf16:
      return AF_BF16;
  }
  return AF_F32;
}

size_t element_size(int32_t dt) { return dt == AF_F32 ? 4 : dt == AF_F64 ? 8 : 2; }

// The plugin's dtype as the element type of backends/typed_buffers.h (which holds the poison).
ElementType element_type(int32_t dt) { return dt == AF_F32 ? ElementType::f32 : dt == AF_F16 ? ElementType::f16 : ElementType::bf16; }

// The memory of one plugin call: one allocation per buffer, shared by the members of a
// packed group, each holding the case's surround (inputs) or poisoned whole, padding included (outputs).
class Arena {
 public:
  unsigned char* buffer(TensorId role, const Placement& pl, int32_t dtype, bool poisoned, Surround::Fill fill) {
    const bool shared = pl.buffer != role;
    if (shared)
      if (auto it = shared_.find(pl.buffer); it != shared_.end()) return it->second;
    std::vector<unsigned char>& b = blocks_.emplace_back(static_cast<size_t>(pl.extent) * element_size(dtype), 0);
    if (poisoned)
      poison_elements(b.data(), static_cast<size_t>(pl.extent), element_type(dtype));
    else
      fill_surround(b.data(), static_cast<size_t>(pl.extent), element_type(dtype), fill);
    if (shared) shared_[pl.buffer] = b.data();
    return b.data();
  }

 private:
  std::list<std::vector<unsigned char>> blocks_;  // a list: addresses stay put
  std::map<TensorId, unsigned char*> shared_;
};

// A tensor in plugin memory: the case dtype, at its placement (harness/layout.h): any order,
// padded rows and heads, a base offset (16-byte aligned or not), packed views.
struct Buffer {
  TensorId role;
  Placement pl;
  unsigned char* base = nullptr;  // the buffer's start; t.data points pl.offset elements in
  af_tensor t{};

  Buffer(Arena& arena, const Problem& p, TensorId role, int32_t dtype, bool output)
      : role(role), pl(place(p.layouts, role, p.shape)), base(arena.buffer(role, pl, dtype, output, p.layouts.surround.fill)) {
    t.dtype = dtype;
    t.device = AF_CPU;
    t.ndim = pl.ndim;
    for (int32_t i = 0; i < pl.ndim; ++i) t.shape[i] = pl.sizes[static_cast<size_t>(i)], t.strides[i] = pl.strides[static_cast<size_t>(i)];
    t.data = base + static_cast<size_t>(pl.offset) * element_size(dtype);
  }

  void store(const Tensor& src) { store_placed(base, pl, element_type(t.dtype), src); }

  // Back to float64; counts elements still holding the poison.
  Tensor load(size_t* unwritten) const { return load_placed(base, pl, element_type(t.dtype), unwritten); }
};

// The versions this loader speaks: 2 added af_problem.mask_device at the end of the struct,
// 3 the lengths, the varlen interface and the page table after it, so a version 1 or 2 plugin
// reads the same layout (with the later fields zero) and gets ragged batches padded, as before.
constexpr uint32_t kOldestAbi = 1;
constexpr uint32_t kVersion3Flags = AF_TAKES_PACKED | AF_TAKES_PAGED_KV;
bool abi_supported(uint32_t v) { return v >= kOldestAbi && v <= ATTNFUZZ_PLUGIN_ABI_VERSION; }
std::string abi_spoken() { return std::to_string(kOldestAbi) + " to " + std::to_string(ATTNFUZZ_PLUGIN_ABI_VERSION); }

// A CUDA plugin's view of a host buffer: the device copy of its whole byte extent, with the
// same strides and offsets (so any layout the host side chooses carries over unchanged). The
// members of a packed group share one host buffer, so they share its one device copy too.
size_t extent_bytes(const Buffer& b) { return static_cast<size_t>(b.pl.extent) * element_size(b.t.dtype); }

void to_device(DeviceArena& arena, Buffer& b) {
  auto* dev = static_cast<unsigned char*>(arena.upload(b.base, extent_bytes(b)));
  b.t.data = dev + (static_cast<unsigned char*>(b.t.data) - b.base);
  b.t.device = AF_CUDA;
  b.t.device_index = arena.device();
}
void to_host(DeviceArena& arena, Buffer& b) { arena.download(b.base, extent_bytes(b)); }

// A buffer of a varlen call (backends/plugin_packed.h) and the tensor the plugin is handed for it.
struct PackedArg {
  TensorId role;
  PieceBuffer buf;
  af_tensor t;
  PackedArg(TensorId role, PieceBuffer b) : role(role), buf(std::move(b)), t(buf.tensor()) {}
  PackedArg(const PackedArg&) = delete;
  PackedArg& operator=(const PackedArg&) = delete;
};

void to_device(DeviceArena& arena, PackedArg& a) {
  auto* dev = static_cast<unsigned char*>(arena.upload(a.buf.base(), a.buf.bytes()));
  a.t.data = dev + static_cast<size_t>(a.buf.lead()) * element_type_size(a.buf.type());
  a.t.device = AF_CUDA;
  a.t.device_index = arena.device();
}
void to_host(DeviceArena& arena, PackedArg& a) { arena.download(a.buf.base(), a.buf.bytes()); }

// The inputs are the harness's: a backend that writes into them (overwrites Q and K after
// computing correct outputs, say) corrupts what the next call is given and passes its own
// check. Their bytes are kept before the call and compared after it; a change is a
// out_of_bounds finding naming the input.
class InputGuard {
 public:
  // One input's host memory, whole (padding, gaps and tail included).
  struct Input {
    TensorId role;
    unsigned char* base;
    size_t bytes;
  };
  explicit InputGuard(std::initializer_list<Buffer*> inputs) {
    for (const Buffer* b : inputs) add({b->role, b->base, extent_bytes(*b)});
  }
  explicit InputGuard(std::initializer_list<PackedArg*> inputs) {
    for (PackedArg* a : inputs) add({a->role, a->buf.base(), a->buf.bytes()});
  }
  // `gpu`: a CUDA plugin's inputs are its device copies, fetched back first.
  void check(const std::string& who, DeviceArena* gpu) {
    for (const Input& in : inputs_) {
      if (gpu) gpu->download(in.base, in.bytes);
      const std::vector<unsigned char>& before = saved_.at(in.base);
      if (std::memcmp(before.data(), in.base, before.size()) != 0)
        throw OutOfBoundsWrite(who + " wrote into its input " + case_key(in.role) + " (the harness's memory, read-only to a backend)");
    }
  }

 private:
  void add(const Input& in) {
    if (!saved_.try_emplace(in.base, in.base, in.base + in.bytes).second) return;  // a packed group's next member
    inputs_.push_back(in);
  }
  std::vector<Input> inputs_;
  std::map<const unsigned char*, std::vector<unsigned char>> saved_;
};

// An output buffer is poisoned whole before the call: the elements outside its tensors (row
// and head padding, the gaps of a layout, the slack before the base offset) must still hold
// the poison after it. A write there would land in a neighbour's memory in a real caller; it
// is an out_of_bounds finding naming the output.
void check_written_outside(const std::string& who, std::initializer_list<const Buffer*> outputs) {
  std::map<const unsigned char*, std::vector<const Buffer*>> by_buffer;  // a packed group shares one
  for (const Buffer* b : outputs) by_buffer[b->base].push_back(b);
  for (const auto& [base, group] : by_buffer) {
    std::vector<Placement> placements;
    std::string names;
    for (const Buffer* b : group) {
      placements.push_back(b->pl);
      names += (names.empty() ? "" : "/") + std::string(case_key(b->role));
    }
    const size_t n = written_outside(base, group[0]->pl.extent, placements, element_type(group[0]->t.dtype));
    if (n)
      throw OutOfBoundsWrite(who + " wrote " + std::to_string(n) + " element(s) of its output " + names +
                               " out of bounds: into the padding, the gaps or the slack before the base offset of the buffer");
  }
}

// The same for a varlen call's outputs: everything outside the sequences' rows is poisoned.
void check_written_outside(const std::string& who, std::initializer_list<const PackedArg*> outputs) {
  for (const PackedArg* a : outputs)
    if (const size_t n = a->buf.written_outside())
      throw OutOfBoundsWrite(who + " wrote " + std::to_string(n) + " element(s) of its packed output " + case_key(a->role) +
                             " out of bounds: into the gaps between sequences, the tail after the last one or the element before a "
                             "misaligned buffer's start");
}

std::string restrictions_json(const Problem& p) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& r : p.restrictions)
    a.push_back({{"left", r.left},
                 {"right", r.right},
                 {"align", r.align == Align::bottom_right ? "bottom_right" : "top_left"},
                 {"inside", r.inside}});
  return a.dump();
}

class PluginBackend final : public Backend {
 public:
  PluginBackend(std::string path, void* handle, uint32_t abi, const af_plugin* plugin, const char* envelope_json, std::string api)
      : path_(std::move(path)), source_(plugin_source(path_)), handle_(handle), abi_(abi), pl_(plugin), api_(std::move(api)) {
    try {
      const auto j = nlohmann::json::parse(pl_->contract_json ? pl_->contract_json : "{}");
      for (auto it = j.begin(); it != j.end(); ++it) {
        const DType d = dtype_from_string(it.key());
        const auto c = contract_from_string(it.value().get<std::string>());
        if (!c) throw std::invalid_argument("unknown contract '" + it.value().get<std::string>() + "'");
        contracts_[d] = *c;
      }
    } catch (const std::exception& e) {
      throw std::runtime_error("plugin " + path_ + ": malformed contract_json: " + e.what());
    }
    envelope_ = declared_envelope(envelope_json);
    envelope_.dlse = (pl_->flags & AF_BACKWARD_TAKES_DLSE) != 0;
  }
  ~PluginBackend() override { dlclose(handle_); }

  std::string name() const override { return std::string("plugin.") + (pl_->name ? pl_->name : "unnamed"); }
  std::string version() const override { return pl_->version ? pl_->version : ""; }
  std::map<std::string, std::string> provenance() const override { return source_; }
  Device device() const override { return (pl_->flags & (AF_DEVICE_IS_CUDA | AF_COMPUTES_ON_GPU)) ? Device::cuda : Device::cpu; }
  std::optional<Contract> contract(DType d) const override {
    auto it = contracts_.find(d);
    return it == contracts_.end() ? std::nullopt : std::optional<Contract>(it->second);
  }
  bool masked_rows_zero() const override { return pl_->flags & AF_MASKED_ROWS_ZERO; }
  bool backward_takes_dlse() const override { return pl_->flags & AF_BACKWARD_TAKES_DLSE; }
  std::vector<TensorId> nondeterministic_outputs() const override { return nondeterministic_outputs_of(pl_->flags); }
  std::string why_nondeterministic() const override { return "the plugin's AF_NONDETERMINISTIC_* flags"; }
  bool batch_invariant() const override { return pl_->flags & AF_BATCH_INVARIANT; }
  bool cuda() const { return pl_->flags & AF_DEVICE_IS_CUDA; }
  bool packed() const { return pl_->flags & AF_TAKES_PACKED; }

  SupportEnvelope envelope() const override { return envelope_; }
  std::string api() const override { return api_; }

  std::optional<std::string> unsupported_reason(const Problem& p) const override {
    if (!contract(p.dtype)) return "dtype " + std::string(to_string(p.dtype)) + " not in the plugin's contract";
    if (cuda() || (pl_->flags & AF_COMPUTES_ON_GPU)) {
      if (auto why = cuda_plugins_unavailable()) return *why;
    }
    Call call(p, abi_, pl_->flags);
    if (call.geometry)
      if (auto why = packed_geometry_refusal(*call.geometry)) return name() + ": " + *why;
    if (!pl_->supports) return std::nullopt;
    char msg[1024] = {0};
    if (pl_->supports(&call.problem, msg, sizeof msg) != 0) return std::string(msg[0] ? msg : "unsupported (no reason given)");
    return std::nullopt;
  }

  Forward forward(const Problem& p) override {
    Call call(p, abi_, pl_->flags);
    if (call.geometry) return forward_packed(p, call);
    const int32_t dt = af_dtype_of(p.dtype);
    using R = TensorId;
    Arena mem;
    Buffer q(mem, p, R::Q, dt, false), k(mem, p, R::K, dt, false), v(mem, p, R::V, dt, false);
    q.store(p.q), k.store(p.k), v.store(p.v);
    Buffer o(mem, p, R::O, dt, true), lse(mem, p, R::LSE, AF_F32, true);
    char msg[1024] = {0};
    std::optional<DeviceArena> gpu;
    if (cuda()) {
      gpu.emplace();
      for (Buffer* b : {&q, &k, &v, &o, &lse}) to_device(*gpu, *b);
      call.problem.mask_device = static_cast<const uint8_t*>(gpu->upload(p.mask.data(), p.mask.size()));
    }
    InputGuard inputs{&q, &k, &v};
    const int rc = pl_->forward(&call.problem, &q.t, &k.t, &v.t, &o.t, &lse.t, msg, sizeof msg);
    if (gpu) gpu->synchronize(name() + " forward");
    if (rc != 0) throw std::runtime_error(name() + ": forward failed: " + (msg[0] ? msg : "no message"));
    if (gpu) to_host(*gpu, o), to_host(*gpu, lse);
    inputs.check(name() + " forward", gpu ? &*gpu : nullptr);
    check_written_outside(name() + " forward", {&o, &lse});
    Forward f;
    f.o = o.load(&f.unwritten[TensorId::O]);
    f.lse = lse.load(&f.unwritten[TensorId::LSE]);
    return f;
  }

  Gradients backward(const Problem& p, const Forward& fwd, const Tensor& d_out, const Tensor& d_lse) override {
    Call call(p, abi_, pl_->flags);
    if (call.geometry) return backward_packed(p, call, fwd, d_out, d_lse);
    const int32_t dt = af_dtype_of(p.dtype);
    using R = TensorId;
    Arena mem;
    Buffer q(mem, p, R::Q, dt, false), k(mem, p, R::K, dt, false), v(mem, p, R::V, dt, false);
    Buffer o(mem, p, R::O, dt, false), lse(mem, p, R::LSE, AF_F32, false), d_o(mem, p, R::dO, dt, false);
    Buffer g(mem, p, R::LSE, AF_F32, false);  // dLSE is laid out as LSE
    q.store(p.q), k.store(p.k), v.store(p.v), o.store(fwd.o), lse.store(fwd.lse), d_o.store(d_out), g.store(d_lse);
    Buffer dq(mem, p, R::dQ, dt, true), dk(mem, p, R::dK, dt, true), dv(mem, p, R::dV, dt, true);
    char msg[1024] = {0};
    std::optional<DeviceArena> gpu;
    if (cuda()) {
      gpu.emplace();
      for (Buffer* b : {&q, &k, &v, &o, &lse, &d_o, &g, &dq, &dk, &dv}) to_device(*gpu, *b);
      call.problem.mask_device = static_cast<const uint8_t*>(gpu->upload(p.mask.data(), p.mask.size()));
    }
    InputGuard inputs{&q, &k, &v, &o, &lse, &d_o, &g};
    const int rc = pl_->backward(&call.problem, &q.t, &k.t, &v.t, &o.t, &lse.t, &d_o.t, backward_takes_dlse() ? &g.t : nullptr, &dq.t,
                                 &dk.t, &dv.t, msg, sizeof msg);
    if (gpu) gpu->synchronize(name() + " backward");
    if (rc != 0) throw std::runtime_error(name() + ": backward failed: " + (msg[0] ? msg : "no message"));
    if (gpu) to_host(*gpu, dq), to_host(*gpu, dk), to_host(*gpu, dv);
    inputs.check(name() + " backward", gpu ? &*gpu : nullptr);
    check_written_outside(name() + " backward", {&dq, &dk, &dv});
    Gradients out;
    out.dq = dq.load(&out.unwritten[TensorId::dQ]);
    out.dk = dk.load(&out.unwritten[TensorId::dK]);
    out.dv = dv.load(&out.unwritten[TensorId::dV]);
    return out;
  }

 private:
  // The af_problem of one call, with the memory it points to (it points into itself: never
  // copied or moved).
  struct Call {
    std::string mask_json, restrictions;
    std::vector<int64_t> lens_q, lens_kv;
    std::optional<PackedGeometry> geometry;  // AF_TAKES_PACKED
    std::vector<int32_t> cu_q, cu_kv, used_q, used_kv, table;
    af_problem problem{};

    Call(const Problem& p, uint32_t abi, uint32_t flags) {
      mask_json = p.mask_expr ? to_json(*p.mask_expr).dump() : R"({"kind":"none"})";
      restrictions = restrictions_json(p);
      const Shape& s = p.shape;
      af_problem& a = problem;
      a.batch = s.batch, a.heads_q = s.heads_q, a.heads_kv = s.heads_kv, a.seq_q = s.seq_q, a.seq_kv = s.seq_kv;
      a.head_dim_qk = s.head_dim_qk, a.head_dim_v = s.head_dim_v;
      a.dtype = af_dtype_of(p.dtype);
      a.has_softcap = p.softcap ? 1 : 0;
      a.scale = p.scale;
      a.softcap = p.softcap.value_or(0.0);
      a.mask_json = mask_json.c_str();
      a.restrictions_json = restrictions.c_str();
      a.q_offset = p.q_offset, a.kv_offset = p.kv_offset, a.full_seq_q = p.full_seq_q, a.full_seq_kv = p.full_seq_kv;
      a.mask = p.mask.data();
      if (abi < 3) return;  // the fields below are version 3's: an older plugin's struct ends before them
      if (p.ragged()) {
        lens_q = p.lens_q;
        lens_kv = p.lens_kv;
        a.lens_q = lens_q.data();
        a.lens_kv = lens_kv.data();
      }
      if (!(flags & AF_TAKES_PACKED)) return;
      const PackedGeometry& g = geometry.emplace(packed_geometry(p, (flags & AF_TAKES_PAGED_KV) != 0));
      // Narrowed unchecked: a call whose rows do not fit is declined (packed_geometry_refusal) before it runs.
      auto narrow = [](const std::vector<int64_t>& v) { return std::vector<int32_t>(v.begin(), v.end()); };
      cu_q = narrow(g.q.starts), cu_kv = narrow(g.kv.starts), used_q = narrow(g.q.lens), used_kv = narrow(g.kv.lens);
      a.cu_seqlens_q = cu_q.data(), a.cu_seqlens_kv = cu_kv.data(), a.seqused_q = used_q.data(), a.seqused_kv = used_kv.data();
      a.total_q = g.q.total, a.total_kv = g.kv.total;
      a.max_seqlen_q = g.max_q, a.max_seqlen_kv = g.max_kv;
      a.misaligned = g.lead > 0 ? 1 : 0;
      if (g.page_size > 0) {
        table = narrow(g.table);
        a.page_size = g.page_size, a.num_pages = g.pages, a.pages_per_seq = g.pages_per_seq;
        a.page_table = table.data();
      }
    }
    Call(const Call&) = delete;
    Call& operator=(const Call&) = delete;

    bool paged() const { return problem.page_table != nullptr; }
    // backward() takes K and V packed: no page table.
    void without_pages() { problem.page_size = problem.num_pages = problem.pages_per_seq = 0, problem.page_table = nullptr; }
    // A CUDA plugin's twins of the index arrays, and the mask.
    void to_device(DeviceArena& gpu, const Problem& p) {
      problem.mask_device = static_cast<const uint8_t*>(gpu.upload(p.mask.data(), p.mask.size()));
      auto up = [&](const std::vector<int32_t>& v) {
        return static_cast<const int32_t*>(gpu.upload(v.data(), v.size() * sizeof(int32_t)));
      };
      problem.cu_seqlens_q_device = up(cu_q), problem.cu_seqlens_kv_device = up(cu_kv);
      problem.seqused_q_device = up(used_q), problem.seqused_kv_device = up(used_kv);
      if (paged()) problem.page_table_device = up(table);
    }
  };

  // The varlen interface (AF_TAKES_PACKED): Q, K, V packed (K and V in pages where the call has
  // them), O and LSE packed and poisoned, unpacked with O = 0 and LSE = -inf on the rows past each
  // sequence's length (fully masked rows), as the LibTorch and cuDNN varlen adapters do.
  Forward forward_packed(const Problem& p, Call& call) {
    const PackedGeometry& g = *call.geometry;
    if (auto why = packed_geometry_refusal(g)) throw UnsupportedError(name() + ": " + *why);
    const Shape& s = p.shape;
    const ElementType et = element_type(af_dtype_of(p.dtype));
    using R = TensorId;
    auto kv = [&](int64_t width) {
      return call.paged() ? PieceBuffer::pool(g, s.heads_kv, width, et) : PieceBuffer::packed(g.kv, s.heads_kv, width, et, g.lead, false);
    };
    PackedArg q(R::Q, PieceBuffer::packed(g.q, s.heads_q, s.head_dim_qk, et, g.lead, false));
    PackedArg k(R::K, kv(s.head_dim_qk)), v(R::V, kv(s.head_dim_v));
    q.buf.store(p.q), k.buf.store(p.k), v.buf.store(p.v);
    PackedArg o(R::O, PieceBuffer::packed(g.q, s.heads_q, s.head_dim_v, et, g.lead, true));
    PackedArg lse(R::LSE, PieceBuffer::packed(g.q, s.heads_q, 0, ElementType::f32, g.lead, true));
    char msg[1024] = {0};
    std::optional<DeviceArena> gpu;
    if (cuda()) {
      gpu.emplace();
      for (PackedArg* a : {&q, &k, &v, &o, &lse}) to_device(*gpu, *a);
      call.to_device(*gpu, p);
    }
    InputGuard inputs{&q, &k, &v};
    const int rc = pl_->forward(&call.problem, &q.t, &k.t, &v.t, &o.t, &lse.t, msg, sizeof msg);
    if (gpu) gpu->synchronize(name() + " forward");
    if (rc != 0) throw std::runtime_error(name() + ": forward failed: " + (msg[0] ? msg : "no message"));
    if (gpu) to_host(*gpu, o), to_host(*gpu, lse);
    inputs.check(name() + " forward", gpu ? &*gpu : nullptr);
    check_written_outside(name() + " forward", {&o, &lse});
    Forward f;
    f.o = o.buf.load({s.batch, s.heads_q, s.seq_q, s.head_dim_v}, 0.0, &f.unwritten[TensorId::O]);
    f.lse = lse.buf.load({s.batch, s.heads_q, s.seq_q}, -std::numeric_limits<double>::infinity(), &f.unwritten[TensorId::LSE]);
    return f;
  }

  // Every tensor packed (K and V too, paged or not: the backward takes no page table), dQ, dK and
  // dV unpacked with zeros past each sequence's rows and keys.
  Gradients backward_packed(const Problem& p, Call& call, const Forward& fwd, const Tensor& d_out, const Tensor& d_lse) {
    call.without_pages();
    const PackedGeometry& g = *call.geometry;
    if (auto why = packed_geometry_refusal(g)) throw UnsupportedError(name() + ": " + *why);
    const Shape& s = p.shape;
    const ElementType et = element_type(af_dtype_of(p.dtype));
    using R = TensorId;
    auto input = [&](const PackedSide& side, int64_t heads, int64_t width, ElementType type, const Tensor& dense) {
      PieceBuffer b = PieceBuffer::packed(side, heads, width, type, g.lead, false);
      b.store(dense);
      return b;
    };
    PackedArg q(R::Q, input(g.q, s.heads_q, s.head_dim_qk, et, p.q)), k(R::K, input(g.kv, s.heads_kv, s.head_dim_qk, et, p.k));
    PackedArg v(R::V, input(g.kv, s.heads_kv, s.head_dim_v, et, p.v)), o(R::O, input(g.q, s.heads_q, s.head_dim_v, et, fwd.o));
    PackedArg lse(R::LSE, input(g.q, s.heads_q, 0, ElementType::f32, fwd.lse)), d_o(R::dO, input(g.q, s.heads_q, s.head_dim_v, et, d_out));
    PackedArg dl(R::dLSE, input(g.q, s.heads_q, 0, ElementType::f32, d_lse));
    PackedArg dq(R::dQ, PieceBuffer::packed(g.q, s.heads_q, s.head_dim_qk, et, g.lead, true));
    PackedArg dk(R::dK, PieceBuffer::packed(g.kv, s.heads_kv, s.head_dim_qk, et, g.lead, true));
    PackedArg dv(R::dV, PieceBuffer::packed(g.kv, s.heads_kv, s.head_dim_v, et, g.lead, true));
    char msg[1024] = {0};
    std::optional<DeviceArena> gpu;
    if (cuda()) {
      gpu.emplace();
      for (PackedArg* a : {&q, &k, &v, &o, &lse, &d_o, &dl, &dq, &dk, &dv}) to_device(*gpu, *a);
      call.to_device(*gpu, p);
    }
    InputGuard inputs{&q, &k, &v, &o, &lse, &d_o, &dl};
    const int rc = pl_->backward(&call.problem, &q.t, &k.t, &v.t, &o.t, &lse.t, &d_o.t, backward_takes_dlse() ? &dl.t : nullptr, &dq.t,
                                 &dk.t, &dv.t, msg, sizeof msg);
    if (gpu) gpu->synchronize(name() + " backward");
    if (rc != 0) throw std::runtime_error(name() + ": backward failed: " + (msg[0] ? msg : "no message"));
    if (gpu) to_host(*gpu, dq), to_host(*gpu, dk), to_host(*gpu, dv);
    inputs.check(name() + " backward", gpu ? &*gpu : nullptr);
    check_written_outside(name() + " backward", {&dq, &dk, &dv});
    Gradients out;
    out.dq = dq.buf.load({s.batch, s.heads_q, s.seq_q, s.head_dim_qk}, 0.0, &out.unwritten[TensorId::dQ]);
    out.dk = dk.buf.load({s.batch, s.heads_kv, s.seq_kv, s.head_dim_qk}, 0.0, &out.unwritten[TensorId::dK]);
    out.dv = dv.buf.load({s.batch, s.heads_kv, s.seq_kv, s.head_dim_v}, 0.0, &out.unwritten[TensorId::dV]);
    return out;
  }

  // What campaigns aim at (attnfuzz_plugin.h): the plugin's declared envelope, or none, narrowed
  // to the dtypes of its contract (the one clause enforced here); supports() decides the rest.
  // AF_TAKES_PACKED implies ragged batches, and the plugin never sees the case's layouts.
  SupportEnvelope declared_envelope(const char* envelope_json) const {
    std::vector<DType> contract_dtypes;
    for (const auto& [d, c] : contracts_) contract_dtypes.push_back(d);
    try {
      if (!envelope_json) {
        SupportEnvelope e = attnfuzz::declared_envelope(nullptr, contract_dtypes);
        e.ragged = packed();
        return e;
      }
      const nlohmann::json j = nlohmann::json::parse(envelope_json);
      SupportEnvelope e = attnfuzz::declared_envelope(&j, contract_dtypes);
      // The ABI hands a plugin no bias: one that says it takes one would compute without it.
      if (e.bias) throw std::invalid_argument("declares \"bias\": true, but the plugin ABI hands over no score bias");
      if (packed()) {
        if (j.contains("ragged") && !e.ragged)
          throw std::invalid_argument("declares \"ragged\": false, but sets AF_TAKES_PACKED, which takes ragged batches");
        if (e.alignment_bytes > 1 || e.packed_lse)
          throw std::invalid_argument(std::string("declares \"") + (e.packed_lse ? "packed_lse" : "alignment_bytes") +
                                      "\", but sets AF_TAKES_PACKED: its tensors are packed by the loader, never laid out as the case "
                                      "says (decline af_problem.misaligned in supports())");
        e.ragged = true;
      }
      return e;
    } catch (const std::exception& ex) {
      throw std::runtime_error("plugin " + path_ + ": " + (envelope_json ? "malformed attnfuzz_plugin_envelope(): " : "contract_json: ") +
                               ex.what());
    }
  }

  std::string path_;
  std::map<std::string, std::string> source_;  // what a reproducer records of it (harness/plugin_path.h)
  void* handle_;
  uint32_t abi_;  // the version the plugin speaks: its af_problem ends with that version's fields
  const af_plugin* pl_;
  std::map<DType, Contract> contracts_;
  SupportEnvelope envelope_;
  std::string api_;  // attnfuzz_plugin_api(), or empty
};

}  // namespace

std::unique_ptr<Backend> load_plugin(const std::string& spec) {
  const std::string path = resolve_plugin(spec);
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) throw std::runtime_error("plugin " + path + ": cannot load: " + dlerror());
  auto fail = [&](const std::string& why) {
    dlclose(h);
    throw std::runtime_error("plugin " + path + ": " + why);
  };
  auto abi = reinterpret_cast<af_abi_version_fn>(dlsym(h, "attnfuzz_plugin_abi_version"));
  if (!abi) fail("exports no attnfuzz_plugin_abi_version(): not an attnfuzz plugin");
  const uint32_t version = abi();
  if (!abi_supported(version)) fail("ABI version " + std::to_string(version) + ", this attnfuzz speaks " + abi_spoken());
  auto get = reinterpret_cast<af_plugin_get_fn>(dlsym(h, "attnfuzz_plugin_get"));
  if (!get) fail("exports no attnfuzz_plugin_get()");
  const af_plugin* pl = get();
  if (!pl) fail("attnfuzz_plugin_get() returned NULL");
  if (pl->abi_version != version)
    fail("af_plugin.abi_version is " + std::to_string(pl->abi_version) + " but attnfuzz_plugin_abi_version() returned " +
         std::to_string(version));
  if (!pl->forward || !pl->backward) fail("af_plugin has no forward or backward entry point");
  // Its af_problem would end before the fields these flags hand over.
  if (version < 3 && (pl->flags & kVersion3Flags))
    fail(std::string("sets ") + ((pl->flags & AF_TAKES_PACKED) ? "AF_TAKES_PACKED" : "AF_TAKES_PAGED_KV") +
         ", a flag of ABI version 3, but speaks version " + std::to_string(version) + " (build it with ATTNFUZZ_PLUGIN_ABI_VERSION 3)");
  if ((pl->flags & AF_TAKES_PAGED_KV) && !(pl->flags & AF_TAKES_PACKED))
    fail("sets AF_TAKES_PAGED_KV without AF_TAKES_PACKED: paged K and V come only with the varlen interface");
  // Optional (any ABI version): what the plugin accepts for sure, for the campaigns' aim.
  auto envelope = reinterpret_cast<af_plugin_envelope_fn>(dlsym(h, "attnfuzz_plugin_envelope"));
  const char* envelope_json = envelope ? envelope() : nullptr;
  if (envelope && !envelope_json) fail("attnfuzz_plugin_envelope() returned NULL");
  auto api = reinterpret_cast<af_plugin_api_fn>(dlsym(h, "attnfuzz_plugin_api"));
  const char* api_name = api ? api() : nullptr;
  if (api && (!api_name || !*api_name)) fail("attnfuzz_plugin_api() returned NULL or an empty name");
  try {
    return std::make_unique<PluginBackend>(path, h, version, pl, envelope_json, api_name ? api_name : "");
  } catch (...) {
    dlclose(h);
    throw;
  }
}

}  // namespace attnfuzz
