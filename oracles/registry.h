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
  std::string contracts;        // "fp32:fp32 fp16:fp16 bf16:bf16"
  std::string conventions;      // dLSE in backward, LSE returned, masked-row convention
  bool available = false;
  std::string unavailable_reason;
};

std::vector<BackendInfo> list_backends();
// A name from list_backends(), or "plugin:/path/to/lib.so". Throws std::invalid_argument
// for an unknown name, std::runtime_error (with the reason) for one that cannot run here.
std::unique_ptr<Backend> make_backend(const std::string& name);
BackendInfo describe_backend(const Backend& b);
// The float64 reference and the emulated baselines the verdicts need, on the CPU.
OracleSet default_oracles();
// Where the float64 reference and the contract baselines run: the CPU (Eigen and
// oracles/emulated.cpp) or the GPU (kernels/: cuda.reference64, cuda.emulated.*). The
// tolerance magnitudes are computed on the CPU either way. Throws std::runtime_error,
// with the reason, when the GPU set cannot run here.
enum class OracleDevice { cpu, cuda };
std::optional<OracleDevice> oracle_device_from_string(std::string_view s);
OracleSet make_oracles(OracleDevice device);
// Intra-op threads of the backends that have their own pool (LibTorch). Campaign workers
// use 1: the parallelism is one worker process per core.
void set_backend_threads(int n);
// Whether the GPU this process uses still works, or the error it gives (DiffOptions::gpu_health).
std::optional<std::string> gpu_health();
// Backends used when none are named: every built-in CPU backend available here.
std::vector<std::string> default_backend_names();

}  // namespace attnfuzz
