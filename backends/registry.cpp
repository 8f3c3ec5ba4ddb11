#include "backends/registry.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <stdexcept>

#include <malloc.h>

#include "harness/errors.h"
#include "oracles/emulated.h"
#include "oracles/error_terms.h"
#include "backends/plugin.h"
#include "backends/plugin_cuda.h"
#include "backends/python_backend.h"
#include "oracles/reference.h"
#if ATTNFUZZ_HAVE_TORCH
#include "oracles/torch_cuda_loader.h"
#include "oracles/torch_oracle.h"
#include "backends/torch_sdpa.h"
#include "backends/torch_sdpa_cuda.h"
#include "backends/torch_varlen_cuda.h"
#include "backends/torch_nested.h"
#endif
#if ATTNFUZZ_HAVE_CUDNN
#include "backends/cudnn_sdpa.h"
#endif
#if ATTNFUZZ_HAVE_CUDA_KERNELS
#include "oracles/gpu_oracles.h"
#include "backends/flash_backends.h"
#include "backends/flash_varlen.h"
#endif

namespace attnfuzz {
namespace {

// The contracts the emulated baselines exist for, and their backend names.
constexpr Contract kEmulatedContracts[] = {Contract::fp64, Contract::fp32, Contract::tf32x3, Contract::tf32, Contract::fp16, Contract::bf16};
std::string emulated_name(const std::string& prefix, Contract c, bool reversed) {
  return prefix + std::string(to_string(c)) + (reversed ? ".reversed" : "");
}

#if ATTNFUZZ_HAVE_CUDA_KERNELS
std::unique_ptr<Backend> make_gpu_oracle(const std::string& name) {
  if (name == "cuda.reference64") return std::make_unique<CudaReference64Backend>();
  for (Contract c : kEmulatedContracts)
    for (bool reversed : {false, true})
      if (name == emulated_name("cuda.emulated.", c, reversed)) return std::make_unique<CudaEmulatedBackend>(c, reversed);
  throw std::invalid_argument("no GPU oracle named " + name);
}
#endif

// What an entry is for: a system under test, or an oracle (the references, the GPU baselines)
// that judges them and is left out of the backends run by default.
enum class EntryRole { under_test, oracle };

struct Entry {
  std::string name, description;
  std::function<std::unique_ptr<Backend>()> make;
  std::function<bool(std::string*)> available;
  EntryRole role = EntryRole::under_test;
};

std::vector<Entry> entries() {
#if ATTNFUZZ_HAVE_TORCH
  load_torch_cuda();  // before anything asks LibTorch about CUDA (see torch_cuda_loader.h)
#endif
  std::vector<Entry> e;
  auto always = [](std::string*) { return true; };
  e.push_back({"reference", "float64 reference (Eigen)", [] { return std::make_unique<ReferenceBackend>(); }, always, EntryRole::oracle});
#if ATTNFUZZ_HAVE_TORCH
  auto cpu = [](std::string* why) { return torch_device_available(Device::cpu, why); };
  auto cuda = [](std::string* why) { return torch_device_available(Device::cuda, why); };
  e.push_back({"torch.f64", "LibTorch autograd over composed ops, float64, CPU",
               [] { return make_torch_composed_backend(TorchPrecision::float64); }, cpu});
  e.push_back({"torch.math", "LibTorch composed ops in the case dtype (fp32 scores, P rounded), CPU",
               [] { return make_torch_composed_backend(TorchPrecision::case_dtype); }, cpu});
  e.push_back({"torch.sdpa.math", "at::_scaled_dot_product_attention_math, CPU (no LSE)",
               [] { return make_torch_sdpa_backend(SdpaKind::math); }, cpu});
  e.push_back({"torch.sdpa.cpu_flash", "at::_scaled_dot_product_flash_attention_for_cpu and its backward",
               [] { return make_torch_sdpa_backend(SdpaKind::cpu_flash); }, cpu});
  e.push_back({"torch.f64.cuda", "LibTorch autograd over composed ops, float64, CUDA",
               [] { return make_torch_composed_backend(TorchPrecision::float64, Device::cuda); }, cuda});
  e.push_back({"torch.math.cuda", "LibTorch composed ops in the case dtype, CUDA",
               [] { return make_torch_composed_backend(TorchPrecision::case_dtype, Device::cuda); }, cuda});
  e.push_back({"torch.sdpa.math.cuda", "at::_scaled_dot_product_attention_math, CUDA (no LSE)",
               [] { return make_torch_sdpa_backend(SdpaKind::math, Device::cuda); }, cuda});
  for (auto [kernel, kname] : {std::pair{CudaSdpaKernel::flash, "flash"}, std::pair{CudaSdpaKernel::efficient, "efficient"},
                               std::pair{CudaSdpaKernel::cudnn, "cudnn"}}) {
    const std::string k = kname;
    e.push_back({"torch." + k, "at::_scaled_dot_product_" + k + "_attention (the op under SDPA, with LSE), CUDA",
                 [kernel] { return make_torch_cuda_sdpa_backend(kernel, CudaSdpaEntry::op); }, cuda});
    e.push_back({"torch.sdpa." + k, "at::scaled_dot_product_attention with only the " + k + " kernel enabled, CUDA (no LSE)",
                 [kernel] { return make_torch_cuda_sdpa_backend(kernel, CudaSdpaEntry::public_api); }, cuda});
  }
  // The ops again with LibTorch's deterministic algorithms on for each call, declaring no output
  // nondeterministic (docs/gpu.md, "Deterministic mode"). A suffix, as cuda.emulated.*.reversed:
  // the same backend (TorchCudaSdpaBackend) in another mode, not another kernel or entry point.
  for (auto [kernel, kname] : {std::pair{CudaSdpaKernel::flash, "flash"}, std::pair{CudaSdpaKernel::efficient, "efficient"},
                               std::pair{CudaSdpaKernel::cudnn, "cudnn"}}) {
    const std::string k = kname;
    e.push_back({"torch." + k + ".deterministic",
                 "torch." + k + " under torch.use_deterministic_algorithms(True) (warn_only false) for each call, held to bitwise repeatable "
                 "outputs, CUDA",
                 [kernel] { return make_torch_cuda_sdpa_backend(kernel, CudaSdpaEntry::op, CudaSdpaDeterminism::deterministic_algorithms); },
                 cuda});
  }
  // LibTorch's native varlen entry points, which take a ragged batch as packed sequences with
  // cumulative offsets (backends/torch_varlen_cuda.h; docs/gpu.md, "Varlen backends").
  e.push_back({"torch.flash.varlen",
               "at::_flash_attention_forward/_backward on packed sequences (cum_seq_q/k, seqused_k where K has gaps), CUDA",
               [] { return make_torch_varlen_backend(TorchVarlenOp::flash); }, cuda});
  e.push_back({"torch.efficient.varlen",
               "at::_efficient_attention_forward/_backward on packed sequences (cu_seqlens_q/k, seqlen_k where K has gaps), CUDA",
               [] { return make_torch_varlen_backend(TorchVarlenOp::efficient); }, cuda});
  // SDPA on nested tensors, the ragged batch as a model's torch.nested tensors (backends/torch_nested.h).
  e.push_back({"torch.nested.math", "at::scaled_dot_product_attention on nested tensors, only the math kernel enabled, CPU (no LSE)",
               [] { return make_torch_nested_backend(NestedSdpaKernel::math, Device::cpu); }, cpu});
  e.push_back({"torch.nested.math.cuda", "at::scaled_dot_product_attention on nested tensors, only the math kernel enabled, CUDA (no LSE)",
               [] { return make_torch_nested_backend(NestedSdpaKernel::math, Device::cuda); }, cuda});
  e.push_back({"torch.nested.flash", "at::scaled_dot_product_attention on nested tensors, only the flash kernel enabled, CUDA (no LSE)",
               [] { return make_torch_nested_backend(NestedSdpaKernel::flash, Device::cuda); }, cuda});
#else
  const std::string no_torch = "this build has no LibTorch (configured with ATTNFUZZ_WITH_TORCH=OFF)";
  for (const char* n :
       {"torch.f64", "torch.math", "torch.sdpa.math", "torch.sdpa.cpu_flash", "torch.f64.cuda", "torch.math.cuda", "torch.sdpa.math.cuda",
        "torch.flash", "torch.sdpa.flash", "torch.efficient", "torch.sdpa.efficient", "torch.cudnn", "torch.sdpa.cudnn",
        "torch.flash.deterministic", "torch.efficient.deterministic", "torch.cudnn.deterministic", "torch.flash.varlen",
        "torch.efficient.varlen", "torch.nested.math", "torch.nested.math.cuda", "torch.nested.flash"})
    e.push_back({n, "LibTorch backend", nullptr, [no_torch](std::string* why) {
                   *why = no_torch;
                   return false;
                 }});
#endif
#if ATTNFUZZ_HAVE_CUDNN
  e.push_back({"cudnn", "cuDNN SDPA forward/backward graphs through the cuDNN frontend, CUDA", [] { return make_cudnn_sdpa_backend(); },
               [](std::string* why) { return cudnn_sdpa_available(why); }});
  // cuDNN's own interfaces for a ragged batch (backends/cudnn_varlen.h; docs/gpu.md, "cuDNN varlen and paged").
  e.push_back({"cudnn.varlen", "cuDNN SDPA forward/backward on packed sequences (ragged offsets, padding mask), CUDA",
               [] { return make_cudnn_varlen_backend(); }, [](std::string* why) { return cudnn_sdpa_available(why); }});
  e.push_back({"cudnn.paged", "cuDNN SDPA forward through a paged K/V cache (page tables); backward as cudnn.varlen, CUDA",
               [] { return make_cudnn_paged_backend(); }, [](std::string* why) { return cudnn_sdpa_available(why); }});
#else
  for (const char* n : {"cudnn", "cudnn.varlen", "cudnn.paged"})
    e.push_back({n, "cuDNN SDPA through the cuDNN frontend", nullptr, [](std::string* why) {
                   *why = "this build has no cuDNN backend (configure the gpu preset: ATTNFUZZ_WITH_CUDA=ON)";
                   return false;
                 }});
#endif
  // The GPU oracle set (kernels/): the float64 reference and the contract baselines.
  std::vector<std::pair<std::string, std::string>> gpu_oracles{{"cuda.reference64", "float64 reference, the project's CUDA kernels"}};
  for (Contract c : kEmulatedContracts)
    for (bool reversed : {false, true})
      gpu_oracles.push_back({emulated_name("cuda.emulated.", c, reversed), "naive computation under the " + std::string(to_string(c)) +
                                                                               " contract" + (reversed ? ", reversed order" : "") +
                                                                               ", the project's CUDA kernels"});
  for (const auto& [name, what] : gpu_oracles) {
#if ATTNFUZZ_HAVE_CUDA_KERNELS
    e.push_back({name, what, [name = name]() -> std::unique_ptr<Backend> { return make_gpu_oracle(name); },
                 [](std::string* why) { return cuda_kernels_available(why); }, EntryRole::oracle});
#else
    e.push_back({name, what, nullptr,
                 [](std::string* why) {
                   *why = "this build has no CUDA kernels (configure the gpu preset: ATTNFUZZ_WITH_CUDA=ON)";
                   return false;
                 },
                 EntryRole::oracle});
#endif
  }
  // The project's fused kernels (kernels/flash/, docs/kernels.md).
  const std::pair<std::string, std::string> fused[] = {
      {"cuda.flash", "the project's fused flash kernels (CuTe wgmma, sm_90a): forward, deterministic backward honouring dLSE, CUDA"},
      {"cuda.merge", "cuda.flash leaves with every LSE merge of a composition on the GPU merge kernel, CUDA"},
      {"cuda.flash.varlen", "cuda.flash on packed sequences (per-sequence starts and lengths, bands per sequence), CUDA"},
      {"cuda.flash.paged", "cuda.flash forward through a paged K/V cache (page table); backward as cuda.flash.varlen, CUDA"}};
  for (const auto& [name, what] : fused) {
#if ATTNFUZZ_HAVE_CUDA_KERNELS
    e.push_back({name, what,
                 [name = name]() -> std::unique_ptr<Backend> {
                   if (name == "cuda.merge") return std::make_unique<FlashMergeBackend>();
                   if (name == "cuda.flash.varlen") return make_flash_varlen_backend();
                   if (name == "cuda.flash.paged") return make_flash_paged_backend();
                   return std::make_unique<FlashBackend>();
                 },
                 [](std::string* why) { return cuda_kernels_available(why); }});
#else
    e.push_back({name, what, nullptr, [](std::string* why) {
                   *why = "this build has no CUDA kernels (configure the gpu preset: ATTNFUZZ_WITH_CUDA=ON)";
                   return false;
                 }});
#endif
  }
  return e;
}

}  // namespace

BackendInfo describe_backend(const Backend& b) {
  BackendInfo i;
  i.name = b.name();
  i.version = b.version();
  i.device = std::string(to_string(b.device()));
  for (DType d : {DType::f32, DType::f16, DType::bf16}) {
    const auto c = b.contract(d);
    i.contracts += (i.contracts.empty() ? "" : " ") + std::string(to_string(d)) + ":" + (c ? std::string(to_string(*c)) : "-");
  }
  i.conventions = std::string(b.backward_takes_dlse() ? "dLSE" : "no-dLSE") + (b.returns_lse() ? " LSE" : " no-LSE") +
                  (b.masked_rows_zero() ? " masked-rows-zero" : " masked-rows-other") + (b.accumulates_on_tensor_cores() ? " tensor-cores" : "");
  for (DType d : {DType::f16, DType::bf16})
    if (b.lse_unit_roundoff(d) > unit_roundoff(DType::f32))
      i.conventions += " lse(" + std::string(to_string(d)) + ")~2^" + std::to_string(static_cast<int>(std::log2(b.lse_unit_roundoff(d))));
  i.envelope = describe(b.envelope());
  i.available = true;
  return i;
}

std::vector<BackendInfo> list_backends() {
  std::vector<BackendInfo> out;
  for (const auto& e : entries()) {
    BackendInfo i;
    std::string why;
    if (e.available(&why)) {
      i = describe_backend(*e.make());
    } else {
      i.name = e.name;
      i.unavailable_reason = why;
    }
    i.description = e.description;
    out.push_back(i);
  }
  return out;
}

std::unique_ptr<Backend> make_backend(const std::string& name) {
  if (name.rfind("plugin:", 0) == 0) return load_plugin(name.substr(7));
  if (name.rfind("py:", 0) == 0) return make_python_backend(name.substr(3));  // docs/python-backends.md
  std::string known;
  for (const auto& e : entries()) {
    known += (known.empty() ? "" : ", ") + e.name;
    if (e.name != name) continue;
    std::string why;
    if (!e.available(&why)) throw std::runtime_error("backend '" + name + "' is not available here: " + why);
    return e.make();
  }
  throw std::invalid_argument("unknown backend '" + message_safe(name, 120) + "' (known: " + known +
                              ", or plugin:/path/lib.so, or py:MODULE:CLASS)");
}

std::vector<Backend*> BackendSet::pointers() const {
  std::vector<Backend*> out;
  for (const auto& b : owned) out.push_back(b.get());
  return out;
}

BackendSet make_backends(const std::vector<std::string>& names, WhenUnavailable when) {
  BackendSet set;
  for (const auto& name : names) {
    try {
      set.owned.push_back(make_backend(name));
    } catch (const std::invalid_argument& e) {  // an unknown name
      throw BackendLoadError(e.what());
    } catch (const std::exception& e) {
      // A name with a scheme (plugin:/x.so) points at the user's own code: never skipped.
      const bool users_own = name.find(':') != std::string::npos;
      if (when == WhenUnavailable::fail || users_own) throw BackendLoadError(e.what());
      set.skipped.push_back(e.what());
    }
  }
  return set;
}

std::optional<std::string> gpu_health() {
#if ATTNFUZZ_HAVE_TORCH
  if (auto e = torch_cuda_health()) return e;
#endif
  return cuda_plugin_health();  // a CUDA plugin's fault, where LibTorch's CUDA is not there to see it
}

void set_backend_threads(int n) {
#if ATTNFUZZ_HAVE_TORCH
  torch_set_threads(n);
#else
  (void)n;
#endif
}

OracleSet default_oracles() { return make_oracles(Device::cpu); }

namespace {
constexpr const char* kOracleDeviceEnv = "ATTNFUZZ_ORACLE_DEVICE";
}

void set_oracle_device_override(const std::string& name) {
  if (name != "auto" && !device_from_string(name))
    throw std::invalid_argument("--oracle-device takes auto, cpu or cuda, got '" + name + "'");
  ::setenv(kOracleDeviceEnv, name.c_str(), 1);
}

std::optional<Device> oracle_device_override() {
  const char* v = std::getenv(kOracleDeviceEnv);
  return v ? device_from_string(v) : std::nullopt;
}

namespace {
// Below kGpuOracleMinWork the CPU set is the faster.
bool small_for_gpu_oracles(const Shape& shape) {
  const double work = static_cast<double>(shape.batch * shape.heads_q) * static_cast<double>(shape.seq_q * shape.seq_kv) *
                      static_cast<double>(std::max(shape.head_dim_qk, shape.head_dim_v));
  return work < kGpuOracleMinWork;
}
}  // namespace

Device choose_oracle_device(const std::vector<Backend*>& backends, const Shape& shape, std::optional<Device> forced,
                                  std::string* why) {
  auto say = [why](std::string s) {
    if (why) *why = std::move(s);
  };
  if (forced) {
    say("--oracle-device " + std::string(to_string(*forced)));
    return *forced;
  }
  const auto on_gpu = std::find_if(backends.begin(), backends.end(), [](const Backend* b) { return b->on_gpu(); });
  if (on_gpu == backends.end()) {
    say("every backend runs on the CPU");
    return Device::cpu;
  }
  const std::string runs_on = (*on_gpu)->name() + " runs on " + std::string(to_string((*on_gpu)->device()));
  if (small_for_gpu_oracles(shape)) {
    say(runs_on + ", but the case is small: the CPU set judges it faster");
    return Device::cpu;
  }
#if ATTNFUZZ_HAVE_CUDA_KERNELS
  std::string unavailable;
  if (cuda_kernels_available(&unavailable)) {
    say(runs_on);
    return Device::cuda;
  }
  say(runs_on + ", but the GPU oracles cannot run here: " + unavailable);
#else
  say(runs_on + ", but this build has no CUDA kernels");
#endif
  return Device::cpu;
}

OracleSet oracles_for(const std::vector<Backend*>& backends, const Shape& shape, Device* chosen, std::string* why) {
  const Device d = choose_oracle_device(backends, shape, oracle_device_override(), why);
  if (chosen) *chosen = d;
  return make_oracles(d);
}

Device choose_oracle_device(const std::vector<Backend*>& backends, const Case& c, std::optional<Device> forced, std::string* why) {
  if (c.bias && c.bias->requires_grad) {
    if (why) *why = "the case asks dBias, which only the CPU set computes";
    return Device::cpu;
  }
  return choose_oracle_device(backends, c.shape, forced, why);
}

OracleSet oracles_for(const std::vector<Backend*>& backends, const Case& c, Device* chosen, std::string* why) {
  const Device d = choose_oracle_device(backends, c, oracle_device_override(), why);
  if (chosen) *chosen = d;
  return make_oracles(d);
}

HostWork host_work(const std::vector<Backend*>& backends, Device oracles) {
  HostWork w;
  w.oracles = oracles == Device::cpu ? HostWork::Oracles::host : HostWork::Oracles::device;
  w.backends = HostScores::none;
  for (const Backend* b : backends) w.backends = std::max(w.backends, b->host_scores());
  return w;
}

Device expected_oracle_device(bool gpu_backend, const Shape& shape) {
  if (const auto forced = oracle_device_override()) return *forced;
#if ATTNFUZZ_HAVE_CUDA_KERNELS
  if (gpu_backend && !small_for_gpu_oracles(shape)) return Device::cuda;
#else
  (void)gpu_backend;
  (void)shape;
#endif
  return Device::cpu;
}

#if ATTNFUZZ_HAVE_CUDA_KERNELS
// The GPU set moves hundreds of MB a case through float64 host tensors (inputs, outputs, the
// error terms). glibc serves blocks above its mmap threshold (32 MiB at most) with fresh
// mappings and unmaps them on free, so every such tensor page-faults again when filled
// (measured at S=4096, H=16: 765 of the error terms' 1010 ms). Served from the heap and kept
// there instead, freed tensors are reused without faults. Process-wide; the process keeps its
// peak heap.
static void keep_freed_host_memory() {
  static const bool done = [] {
    ::mallopt(M_MMAP_MAX, 0);
    ::mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
    return true;
  }();
  (void)done;
}
#endif

OracleSet make_oracles(Device device) {
  OracleSet o;
  if (device == Device::cpu) {
    static ReferenceBackend reference;
    o.reference = &reference;
    o.emulate = [](Contract c, bool reversed) -> std::unique_ptr<Backend> { return std::make_unique<EmulatedBackend>(c, reversed); };
  } else {
#if ATTNFUZZ_HAVE_CUDA_KERNELS
    std::string why;
    if (!cuda_kernels_available(&why)) throw std::runtime_error("the GPU oracles cannot run here: " + why);
    keep_freed_host_memory();
    static CudaReference64Backend reference;
    o.reference = &reference;
    o.emulate = [](Contract c, bool reversed) -> std::unique_ptr<Backend> { return std::make_unique<CudaEmulatedBackend>(c, reversed); };
    o.error_terms = [](const Problem& p, const Forward& f, const Tensor& d_out, const Tensor& d_lse) {
      return cuda_error_terms(p, f, d_out, d_lse);
    };
    // The verdict's sums on the device too; ATTNFUZZ_VERDICT_SUMS=host keeps them on the host
    // (the reference implementation, for comparing; docs/gpu.md, "The verdict on the GPU").
    const char* sums = std::getenv("ATTNFUZZ_VERDICT_SUMS");
    if (!(sums && std::string(sums) == "host")) o.verdict_reducer = make_cuda_verdict_reducer;
    // The error model's sigma and row dof from the terms on the device (the same bits) with
    // ATTNFUZZ_ERROR_MODEL=device; on the host until that has run on a GPU (docs/gpu.md).
    const char* model = std::getenv("ATTNFUZZ_ERROR_MODEL");
    if (model && std::string(model) == "device") o.output_model = cuda_output_model;
    return o;
#else
    throw std::runtime_error("the GPU oracles cannot run here: this build has no CUDA kernels (configure the gpu preset)");
#endif
  }
  o.error_terms = reference_error_terms;
  return o;
}

std::vector<std::string> default_backend_names() {
  // Where a GPU is usable, the fused GPU systems under test: at GPU sizes the CPU backends would
  // spend the campaign's time on cases the GPU ones judge in milliseconds.
  std::vector<std::string> gpu;
  for (const auto& e : entries()) {
    std::string why;
    if (std::find(std::begin(kFusedGpuBackends), std::end(kFusedGpuBackends), e.name) != std::end(kFusedGpuBackends) && e.available(&why))
      gpu.push_back(e.name);
  }
  if (!gpu.empty()) return gpu;
  std::vector<std::string> names;
  for (const auto& e : entries()) {
    std::string why;
    if (e.role == EntryRole::under_test && e.available(&why)) names.push_back(e.name);
  }
  return names;
}

}  // namespace attnfuzz
