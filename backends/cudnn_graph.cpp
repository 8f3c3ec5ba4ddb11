// cuDNN frontend SDPA graphs for the `cudnn` backend, and the CUDA plumbing under them.
// This is the only file that sees the frontend's (header-only, heavy) headers.
#include "backends/cudnn_graph.h"

#include <cuda_runtime.h>
#include <cudnn.h>
#include <cudnn_frontend.h>
#include <cudnn_frontend_version.h>
#include <dlfcn.h>
#include <nvrtc.h>

#include <algorithm>
#include <bit>
#include <map>
#include <stdexcept>
#include <unordered_map>
#include <utility>
#include <vector>

#include "harness/worker.h"

namespace attnfuzz::cudnn_detail {
namespace {

namespace fe = cudnn_frontend;
using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;

// Variant-pack ids of the graphs' non-virtual tensors.
enum Uid : int64_t {
  kQ = 1, kK, kV, kO, kStats, kBias, kSeqLenQ, kSeqLenKv, kDO, kDQ, kDK, kDV, kDBias,
  kRaggedQ, kRaggedK, kRaggedV, kRaggedO, kPageTableK, kPageTableV  // GraphSpec::ragged, page_size
};

// Graphs hold device-side plans; a campaign meets many shapes, so the cache is bounded.
constexpr size_t kMaxCachedGraphs = 256;

std::string cuda_error(const char* call, cudaError_t e) {
  return std::string(call) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
}

void check_cuda(cudaError_t e, const char* call) {
  if (e != cudaSuccess) throw std::runtime_error("CUDA: " + cuda_error(call, e));
}

// Findings and skip reasons are one line; some frontend messages span several.
std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

fe::DataType_t io_type(DType d) { return d == DType::bf16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF; }

std::vector<int64_t> as_vector(const Strides& s) { return {s.begin(), s.end()}; }

TensorPtr input(fe::graph::Graph& g, const char* name, Uid uid, std::vector<int64_t> dim, std::vector<int64_t> stride) {
  return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(std::move(dim)).set_stride(std::move(stride)));
}

// Stats (the natural-log LSE) are fp32 [B, Hq, Sq, 1], packed: the backward reads only
// that layout before cuDNN 9.26.
std::vector<int64_t> stats_dim(const GraphSpec& s) { return {s.batch, s.heads_q, s.seq_q, 1}; }
std::vector<int64_t> stats_stride(const GraphSpec& s) { return {s.heads_q * s.seq_q, s.seq_q, 1, 1}; }

// The mask options both passes share (the backward must mask exactly as the forward did).
template <class Attributes>
void set_mask(fe::graph::Graph& g, const GraphSpec& s, Attributes& a) {
  if (s.padding) {
    auto length = [&](const char* name, Uid uid) {
      return g.tensor(fe::graph::Tensor_attributes()
                          .set_name(name)
                          .set_uid(uid)
                          .set_dim({s.batch, 1, 1, 1})
                          .set_stride({1, 1, 1, 1})
                          .set_data_type(fe::DataType_t::INT32));
    };
    a.set_padding_mask(true).set_seq_len_q(length("seq_len_q", kSeqLenQ)).set_seq_len_kv(length("seq_len_kv", kSeqLenKv));
  }
  if (s.left_bound || s.right_bound)
    a.set_diagonal_alignment(s.bottom_right ? fe::DiagonalAlignment_t::BOTTOM_RIGHT : fe::DiagonalAlignment_t::TOP_LEFT);
  if (s.left_bound) a.set_diagonal_band_left_bound(static_cast<int>(*s.left_bound));
  if (s.right_bound) a.set_diagonal_band_right_bound(static_cast<int>(*s.right_bound));
  if (s.bias) {
    const int64_t plane = s.seq_q * s.seq_kv;
    a.set_bias(g.tensor(fe::graph::Tensor_attributes()
                            .set_name("bias")
                            .set_uid(kBias)
                            .set_dim({s.bias_batch, s.bias_heads, s.seq_q, s.seq_kv})
                            .set_stride({s.bias_heads * plane, plane, s.seq_kv, 1})
                            .set_data_type(io_type(s.dtype))));
  }
}

std::shared_ptr<fe::graph::Graph> new_graph(const GraphSpec& s) {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(io_type(s.dtype)).set_intermediate_data_type(fe::DataType_t::FLOAT).set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}

// The ragged offset tensors of a packed (THD) graph (GraphSpec::ragged): [B + 1, 1, 1, 1], in
// elements, one per token geometry (Q and dQ; O and dO; K and dK; V and dV). All null otherwise.
struct Offsets {
  TensorPtr q, k, v, o;
};

Offsets ragged_offsets(fe::graph::Graph& g, const GraphSpec& s) {
  if (!s.ragged) return {};
  auto offset = [&](const char* name, Uid uid) {
    return g.tensor(fe::graph::Tensor_attributes()
                        .set_name(name)
                        .set_uid(uid)
                        .set_dim({s.batch + 1, 1, 1, 1})
                        .set_stride({1, 1, 1, 1})
                        .set_data_type(s.offsets_int32 ? fe::DataType_t::INT32 : fe::DataType_t::INT64));
  };
  return {offset("Q_ragged_offset", kRaggedQ), offset("K_ragged_offset", kRaggedK), offset("V_ragged_offset", kRaggedV),
          offset("O_ragged_offset", kRaggedO)};
}

void set_offset(const TensorPtr& t, const TensorPtr& offset) {
  if (offset) t->set_ragged_offset(offset);
}

struct Qkv {
  TensorPtr q, k, v;
};

// Q, K, V at their strides; packed sequences with their offsets; or, paged, K and V as page pools
// of dims [pages][Hkv][page_size][D], laid out [pages][page_size][Hkv][D], that the page tables index.
Qkv qkv_inputs(fe::graph::Graph& g, const GraphSpec& s, const Offsets& off) {
  Qkv in{input(g, "Q", kQ, {s.batch, s.heads_q, s.seq_q, s.dim_qk}, as_vector(s.q_stride)), nullptr, nullptr};
  if (s.page_size > 0) {
    const int64_t p = s.page_size;
    in.k = input(g, "K_pages", kK, {s.pages, s.heads_kv, p, s.dim_qk}, {p * s.heads_kv * s.dim_qk, s.dim_qk, s.heads_kv * s.dim_qk, 1});
    in.v = input(g, "V_pages", kV, {s.pages, s.heads_kv, p, s.dim_v}, {p * s.heads_kv * s.dim_v, s.dim_v, s.heads_kv * s.dim_v, 1});
  } else {
    in.k = input(g, "K", kK, {s.batch, s.heads_kv, s.seq_kv, s.dim_qk}, as_vector(s.k_stride));
    in.v = input(g, "V", kV, {s.batch, s.heads_kv, s.seq_kv, s.dim_v}, as_vector(s.v_stride));
  }
  set_offset(in.q, off.q);
  set_offset(in.k, off.k);
  set_offset(in.v, off.v);
  return in;
}

// The page tables of a paged graph: one [B, 1, table_size, 1] int32 tensor each for K and V (the
// caller hands both the same table).
void set_pages(fe::graph::Graph& g, const GraphSpec& s, fe::graph::SDPA_attributes& a) {
  if (s.page_size <= 0) return;
  auto table = [&](const char* name, Uid uid) {
    return g.tensor(fe::graph::Tensor_attributes()
                        .set_name(name)
                        .set_uid(uid)
                        .set_dim({s.batch, 1, s.table_size, 1})
                        .set_stride({s.table_size, s.table_size, 1, 1})
                        .set_data_type(fe::DataType_t::INT32));
  };
  a.set_paged_attention_k_table(table("page_table_k", kPageTableK))
      .set_paged_attention_v_table(table("page_table_v", kPageTableV))
      .set_paged_attention_max_seq_len_kv(static_cast<int>(s.seq_kv));
}

std::shared_ptr<fe::graph::Graph> forward_graph(const GraphSpec& s) {
  auto g = new_graph(s);
  const Offsets off = ragged_offsets(*g, s);
  const Qkv in = qkv_inputs(*g, s, off);
  auto attrs = fe::graph::SDPA_attributes().set_name("sdpa").set_generate_stats(true).set_attn_scale(s.scale());
  set_mask(*g, s, attrs);
  set_pages(*g, s, attrs);
  auto [o, stats] = g->sdpa(in.q, in.k, in.v, std::move(attrs));
  o->set_output(true).set_uid(kO).set_dim({s.batch, s.heads_q, s.seq_q, s.dim_v}).set_stride(as_vector(s.o_stride));
  set_offset(o, off.o);
  stats->set_output(true).set_uid(kStats).set_data_type(fe::DataType_t::FLOAT).set_dim(stats_dim(s)).set_stride(stats_stride(s));
  return g;
}

std::shared_ptr<fe::graph::Graph> backward_graph(const GraphSpec& s) {
  auto g = new_graph(s);
  const Offsets off = ragged_offsets(*g, s);
  const Qkv in = qkv_inputs(*g, s, off);
  const std::vector<int64_t> o_dim{s.batch, s.heads_q, s.seq_q, s.dim_v};
  auto o = input(*g, "O", kO, o_dim, as_vector(s.o_stride));
  auto d_o = input(*g, "dO", kDO, o_dim, as_vector(s.d_o_stride));
  set_offset(o, off.o);
  set_offset(d_o, off.o);
  auto stats = g->tensor(fe::graph::Tensor_attributes()
                             .set_name("Stats")
                             .set_uid(kStats)
                             .set_dim(stats_dim(s))
                             .set_stride(stats_stride(s))
                             .set_data_type(fe::DataType_t::FLOAT));
  // Deterministic: the harness runs every backend twice and compares bitwise, and cuDNN's
  // default backward accumulates dQ with atomics.
  auto attrs = fe::graph::SDPA_backward_attributes().set_name("sdpa_backward").set_attn_scale(s.scale()).set_deterministic_algorithm(true);
  set_mask(*g, s, attrs);
  if (s.dbias) {
    // The frontend lowers dBias to a reduction (ADD) of dS onto this tensor's dims
    // (scaled_dot_product_flash_attention.h, "red_dP_dBias"), taken before the scale's product,
    // as the semantics' dBias is; which dims the engines support is cuDNN's to say (the build).
    const int64_t plane = s.seq_q * s.seq_kv;
    attrs.set_dbias(g->tensor(fe::graph::Tensor_attributes()
                                  .set_name("dBias")
                                  .set_uid(kDBias)
                                  .set_dim({s.dbias_batch, s.dbias_heads, s.seq_q, s.seq_kv})
                                  .set_stride({s.dbias_heads * plane, plane, s.seq_kv, 1})
                                  .set_data_type(io_type(s.dtype))));
  }
  auto [d_q, d_k, d_v] = g->sdpa_backward(in.q, in.k, in.v, o, d_o, stats, std::move(attrs));
  d_q->set_output(true).set_uid(kDQ).set_dim({s.batch, s.heads_q, s.seq_q, s.dim_qk}).set_stride(as_vector(s.d_q_stride));
  d_k->set_output(true).set_uid(kDK).set_dim({s.batch, s.heads_kv, s.seq_kv, s.dim_qk}).set_stride(as_vector(s.d_k_stride));
  d_v->set_output(true).set_uid(kDV).set_dim({s.batch, s.heads_kv, s.seq_kv, s.dim_v}).set_stride(as_vector(s.d_v_stride));
  set_offset(d_q, off.q);
  set_offset(d_k, off.k);
  set_offset(d_v, off.v);
  return g;
}

// The frontend's build sequence; the first failing step's message, or nothing.
std::optional<std::string> build(fe::graph::Graph& g, cudnnHandle_t handle) {
  // cuDNN compiles the engines of a new graph at run time (NVRTC): seconds each, not the kernel's run.
  const WorkHeartbeat compiling(kCompilingProgress, "cudnn graph");
  auto failed = [](fe::error_t e, const char* step) -> std::optional<std::string> {
    if (e.is_good()) return std::nullopt;
    return std::string(step) + ": " + one_line(e.get_message());
  };
  if (auto e = failed(g.validate(), "validate")) return e;
  if (auto e = failed(g.build_operation_graph(handle), "build_operation_graph")) return e;
  if (auto e = failed(g.create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}), "create_execution_plans")) return e;
  if (auto e = failed(g.check_support(handle), "check_support")) return e;
  if (auto e = failed(g.build_plans(handle, fe::BuildPlanPolicy_t::HEURISTICS_CHOICE), "build_plans")) return e;
  return std::nullopt;
}

}  // namespace

float GraphSpec::scale() const { return std::bit_cast<float>(scale_bits); }

// ---- DeviceBuffer ----

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  check_cuda(cudaMalloc(&ptr_, bytes), "cudaMalloc");
  zero();
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) (void)cudaFree(ptr_);  // nothing to do about a failure while unwinding
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) (void)cudaFree(ptr_);
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::upload(const void* host, size_t bytes) {
  if (bytes > bytes_) throw std::logic_error("DeviceBuffer::upload past the end");
  if (bytes) check_cuda(cudaMemcpy(ptr_, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy (to device)");
}

void DeviceBuffer::download(void* host, size_t bytes) const {
  if (bytes > bytes_) throw std::logic_error("DeviceBuffer::download past the end");
  if (bytes) check_cuda(cudaMemcpy(host, ptr_, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy (to host)");
}

void DeviceBuffer::zero() {
  if (bytes_) check_cuda(cudaMemset(ptr_, 0, bytes_), "cudaMemset");
}

// ---- GraphCache ----

struct GraphCache::Impl {
  struct Entry {
    std::shared_ptr<fe::graph::Graph> graph;  // null when cuDNN refused it
    std::optional<std::string> error;
    int64_t workspace_bytes = 0;
  };
  using Key = std::pair<GraphSpec, Pass>;

  cudnnHandle_t handle = nullptr;
  std::map<Key, Entry> graphs;
  DeviceBuffer workspace;

  ~Impl() {
    graphs.clear();  // the plans before the handle they were built with
    if (handle) (void)cudnnDestroy(handle);
  }

  cudnnHandle_t get_handle() {
    if (!handle) {
      const cudnnStatus_t st = cudnnCreate(&handle);
      if (st != CUDNN_STATUS_SUCCESS) {
        handle = nullptr;
        throw std::runtime_error(std::string("cudnnCreate: ") + cudnnGetErrorString(st));
      }
    }
    return handle;
  }

  const Entry& find_or_build(const GraphSpec& spec, Pass pass) {
    const Key key{spec, pass};
    if (auto it = graphs.find(key); it != graphs.end()) return it->second;
    cudnnHandle_t h = get_handle();  // its failure is not the graph's: not cached
    Entry e;
    if (pass == Pass::backward && spec.page_size > 0) {
      // SDPA_backward_attributes has no page table: the frontend has no paged backward.
      e.error = "cuDNN's SDPA backward takes no paged K/V cache (the frontend's SDPA_backward_attributes has no page table)";
      return graphs.emplace(key, std::move(e)).first->second;
    }
    try {
      auto g = pass == Pass::forward ? forward_graph(spec) : backward_graph(spec);
      e.error = build(*g, h);
      if (!e.error) {
        if (auto r = g->get_workspace_size(e.workspace_bytes); r.is_bad())
          e.error = "get_workspace_size: " + one_line(r.get_message());
        else
          e.graph = std::move(g);
      }
    } catch (const std::exception& ex) {  // parts of the frontend report by exception
      e.error = one_line(ex.what());
    }
    if (graphs.size() >= kMaxCachedGraphs) graphs.clear();
    return graphs.emplace(key, std::move(e)).first->second;
  }
};

GraphCache::GraphCache() : impl_(std::make_unique<Impl>()) {}
GraphCache::~GraphCache() = default;

std::optional<std::string> GraphCache::prepare(const GraphSpec& spec, Pass pass) {
  try {
    return impl_->find_or_build(spec, pass).error;
  } catch (const std::exception& e) {
    return one_line(e.what());
  }
}

void GraphCache::execute(const GraphSpec& spec, Pass pass, const DevicePointers& ptrs, bool wait) {
  const Impl::Entry& e = impl_->find_or_build(spec, pass);
  if (e.error) throw std::runtime_error("cuDNN: " + *e.error);

  auto mut = [](const void* p) { return const_cast<void*>(p); };
  std::unordered_map<int64_t, void*> pack{{kQ, mut(ptrs.q)}, {kK, mut(ptrs.k)}, {kV, mut(ptrs.v)}, {kO, ptrs.o}, {kStats, ptrs.stats}};
  if (pass == Pass::backward) {
    pack[kDO] = mut(ptrs.d_o);
    pack[kDQ] = ptrs.d_q;
    pack[kDK] = ptrs.d_k;
    pack[kDV] = ptrs.d_v;
    if (spec.dbias) pack[kDBias] = ptrs.d_bias;
  }
  if (spec.bias) pack[kBias] = mut(ptrs.bias);
  if (spec.padding) {
    pack[kSeqLenQ] = mut(ptrs.seq_len_q);
    pack[kSeqLenKv] = mut(ptrs.seq_len_kv);
  }
  if (spec.ragged) {
    pack[kRaggedQ] = mut(ptrs.ragged_q);
    pack[kRaggedK] = mut(ptrs.ragged_k);
    pack[kRaggedV] = mut(ptrs.ragged_v);
    pack[kRaggedO] = mut(ptrs.ragged_o);
  }
  if (spec.page_size > 0) {
    pack[kPageTableK] = mut(ptrs.page_table);
    pack[kPageTableV] = mut(ptrs.page_table);
  }
  for (const auto& [uid, p] : pack)
    if (!p) throw std::logic_error("cuDNN SDPA: no device buffer for tensor uid " + std::to_string(uid));

  if (impl_->workspace.bytes() < static_cast<size_t>(e.workspace_bytes))
    impl_->workspace = DeviceBuffer(static_cast<size_t>(e.workspace_bytes));
  if (auto r = e.graph->execute(impl_->get_handle(), pack, impl_->workspace.get()); r.is_bad())
    throw std::runtime_error("cuDNN: execute: " + one_line(r.get_message()));
  // Copies back go through the (synchronous) legacy stream anyway; waiting here puts an
  // asynchronous kernel fault on this call, with its name.
  if (wait) check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize after the SDPA graph");
  check_cuda(cudaGetLastError(), "the SDPA graph's kernels");
}

// ---- Versions and the availability probe ----

size_t cudnn_runtime_version() { return cudnnGetVersion(); }
size_t cudnn_compiled_version() { return CUDNN_VERSION; }

std::string cudnn_frontend_version() {
  return std::to_string(CUDNN_FRONTEND_MAJOR_VERSION) + "." + std::to_string(CUDNN_FRONTEND_MINOR_VERSION) + "." +
         std::to_string(CUDNN_FRONTEND_PATCH_VERSION);
}

std::optional<std::string> probe_cudnn() {
  int count = 0;
  if (const cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) {
    (void)cudaGetLastError();  // leave no sticky error behind for the next caller
    return "no CUDA device: " + cuda_error("cudaGetDeviceCount", e);
  }
  if (count == 0) return std::string("no CUDA device: cudaGetDeviceCount found none");
  int major = 0, minor = 0;
  for (auto [attr, out] : {std::pair{cudaDevAttrComputeCapabilityMajor, &major}, std::pair{cudaDevAttrComputeCapabilityMinor, &minor}})
    if (const cudaError_t e = cudaDeviceGetAttribute(out, attr, 0); e != cudaSuccess) {
      (void)cudaGetLastError();
      return "CUDA device 0 unusable: " + cuda_error("cudaDeviceGetAttribute", e);
    }
  if (major < 8)
    return "cuDNN SDPA needs compute capability 8.0 or newer; device 0 is " + std::to_string(major) + "." + std::to_string(minor);
  // The frontend's graph API is built against cuDNN 9 (these headers); cuDNN 8's library has another ABI.
  if (const size_t v = cudnnGetVersion(); v < 90000)
    return "cuDNN runtime " + std::to_string(v) + " is older than 9.0 (built against " + std::to_string(CUDNN_VERSION) + ")";
  cudnnHandle_t h = nullptr;
  if (const cudnnStatus_t st = cudnnCreate(&h); st != CUDNN_STATUS_SUCCESS)
    return std::string("cudnnCreate failed: ") + cudnnGetErrorString(st);
  (void)cudnnDestroy(h);
  return std::nullopt;
}

}  // namespace attnfuzz::cudnn_detail

// NVRTC, opened on first use. The frontend links its experimental runtime-compiled engines
// (an RMSNorm+SiLU engine for SM100, never selected for an SDPA graph) against NVRTC;
// linking libnvrtc would make every binary need one particular libnvrtc.so.<major> at load
// time, which linking cudart statically avoids for the runtime. These definitions satisfy
// the frontend's references and forward to whichever NVRTC the loader finds, if any.
namespace {

void* nvrtc_symbol(const char* name) {
  static void* const lib = [] {
    for (const char* so : {"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"})
      if (void* h = dlopen(so, RTLD_NOW | RTLD_LOCAL)) return h;
    return static_cast<void*>(nullptr);
  }();
  return lib ? dlsym(lib, name) : nullptr;
}

template <class Fn, class... Args>
nvrtcResult call_nvrtc(const char* name, Args... args) {
  auto* fn = reinterpret_cast<Fn*>(nvrtc_symbol(name));
  return fn ? fn(args...) : NVRTC_ERROR_INTERNAL_ERROR;
}

}  // namespace

extern "C" {
nvrtcResult nvrtcCreateProgram(nvrtcProgram* prog, const char* src, const char* name, int num_headers, const char* const* headers,
                               const char* const* include_names) {
  return call_nvrtc<decltype(nvrtcCreateProgram)>("nvrtcCreateProgram", prog, src, name, num_headers, headers, include_names);
}
nvrtcResult nvrtcDestroyProgram(nvrtcProgram* prog) { return call_nvrtc<decltype(nvrtcDestroyProgram)>("nvrtcDestroyProgram", prog); }
nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int num_options, const char* const* options) {
  return call_nvrtc<decltype(nvrtcCompileProgram)>("nvrtcCompileProgram", prog, num_options, options);
}
nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram prog, size_t* size) {
  return call_nvrtc<decltype(nvrtcGetProgramLogSize)>("nvrtcGetProgramLogSize", prog, size);
}
nvrtcResult nvrtcGetProgramLog(nvrtcProgram prog, char* log) {
  return call_nvrtc<decltype(nvrtcGetProgramLog)>("nvrtcGetProgramLog", prog, log);
}
nvrtcResult nvrtcGetCUBINSize(nvrtcProgram prog, size_t* size) {
  return call_nvrtc<decltype(nvrtcGetCUBINSize)>("nvrtcGetCUBINSize", prog, size);
}
nvrtcResult nvrtcGetCUBIN(nvrtcProgram prog, char* cubin) { return call_nvrtc<decltype(nvrtcGetCUBIN)>("nvrtcGetCUBIN", prog, cubin); }
}
