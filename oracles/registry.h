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
