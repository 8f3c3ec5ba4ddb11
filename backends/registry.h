#pragma once
// Every backend this build knows, by name, and why one is not available here.
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "harness/backend.h"
#include "harness/oracle_set.h"

namespace attnfuzz {

struct BackendInfo {
  std::string name, description, version, device;
  std::string contracts;    // "fp32:fp32 fp16:fp16 bf16:bf16"
  std::string conventions;  // dLSE in backward, LSE returned, masked-row convention
  std::string envelope;     // what it accepts (harness/envelope.h describe)
  bool available = false;
  std::string unavailable_reason;
};

std::vector<BackendInfo> list_backends();
// A name from list_backends(), or "plugin:/path/to/lib.so". Throws std::invalid_argument
// for an unknown name, std::runtime_error (with the reason) for one that cannot run here.
std::unique_ptr<Backend> make_backend(const std::string& name);
BackendInfo describe_backend(const Backend& b);

// Backends built from names: the one way every command, the worker and the fuzz target do it.
struct BackendSet {
  std::vector<std::unique_ptr<Backend>> owned;
  std::vector<std::string> skipped;  // "name: why", under WhenUnavailable::skip
  std::vector<Backend*> pointers() const;
};
// A named backend that cannot run here fails the whole set, or (skip) is left out with its
// reason; the user's own code (plugin:, any name with a scheme) and an unknown name always fail. Throws BackendLoadError
// naming the backend.
enum class WhenUnavailable { fail, skip };
BackendSet make_backends(const std::vector<std::string>& names, WhenUnavailable when = WhenUnavailable::fail);
// The float64 reference and the emulated baselines the verdicts need, on the CPU.
OracleSet default_oracles();
// Where the float64 reference, the contract baselines and the error model's magnitudes run:
// the CPU (Eigen, oracles/emulated.cpp, oracles/error_terms.cpp) or the GPU (kernels/:
// cuda.reference64, cuda.emulated.*, oracles/gpu_error_terms.cu). Throws std::runtime_error,
// with the reason, when the GPU set cannot run here.
OracleSet make_oracles(Device device);

// Which set judges a case of `shape` for `backends`. `forced` (--oracle-device cpu|cuda)
// wins; otherwise (auto) the GPU set when some backend runs on a GPU (Backend::on_gpu()), the case is large enough for the GPU set to be the faster (kGpuOracleMinWork) and
// the GPU set can run here, else the CPU set. *why (optional) gets the reason, for `run`.
Device choose_oracle_device(const std::vector<Backend*>& backends, const Shape& shape, std::optional<Device> forced,
                                  std::string* why = nullptr);
// B * Hq * Sq * Skv * max(Dqk, Dv) below which auto keeps the CPU set: a case costs the GPU set
// about 20 calls of a millisecond or more each (launches, copies, syncs; more with a dozen
// campaign workers sharing the GPU), the CPU set about 20 ns per unit of this product
// (docs/gpu.md, "Choosing it": the toy mix ran 3x faster on the CPU set).
inline constexpr double kGpuOracleMinWork = 1 << 22;
// --oracle-device for every command: "auto", "cpu" or "cuda" (std::invalid_argument
// otherwise). Kept in the environment (ATTNFUZZ_ORACLE_DEVICE) so the worker processes of
// campaign, check, replay and minimize inherit it.
void set_oracle_device_override(const std::string& name);
std::optional<Device> oracle_device_override();
// choose_oracle_device with the override, then make_oracles: what every command judges with.
OracleSet oracles_for(const std::vector<Backend*>& backends, const Shape& shape, Device* chosen = nullptr,
                      std::string* why = nullptr);
// The same for a case: one that asks dBias (ScoreBias::requires_grad) gets the CPU set whatever
// else holds, --oracle-device cuda included: the GPU set's kernels compute dQ, dK and dV only.
Device choose_oracle_device(const std::vector<Backend*>& backends, const Case& c, std::optional<Device> forced,
                            std::string* why = nullptr);
OracleSet oracles_for(const std::vector<Backend*>& backends, const Case& c, Device* chosen = nullptr, std::string* why = nullptr);
// What a run of `backends` judged by the oracle set on `oracles` keeps in host memory, for
// estimate_host_bytes (harness/case.h): the CPU set keeps one head's matrices there, and the
// backends what they declare (Backend::host_scores).
HostWork host_work(const std::vector<Backend*>& backends, Device oracles);
// The set choose_oracle_device picks for a case of `shape` in a worker, from what a campaign's
// parent knows of its backends: whether one runs on a GPU. The GPU set counts as able to run
// wherever this build has it (a GPU backend that loaded means a usable GPU), so the parent never
// touches the device itself.
Device expected_oracle_device(bool gpu_backend, const Shape& shape);
// Intra-op threads of the backends that have their own pool (LibTorch). Campaign workers
// use 1: the parallelism is one worker process per core.
void set_backend_threads(int n);
// Whether the GPU this process uses still works, or the error it gives (DiffOptions::gpu_health).
std::optional<std::string> gpu_health();
// The fused GPU backends: the default where a GPU is usable.
inline constexpr std::string_view kFusedGpuBackends[] = {"cuda.flash", "cudnn", "torch.flash", "torch.efficient", "torch.cudnn"};
// Backends used when none are named: the fused GPU backends available here, or, where none is
// (no GPU, or the cpu build), every built-in CPU backend available here.
std::vector<std::string> default_backend_names();

}  // namespace attnfuzz
