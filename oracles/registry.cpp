#include "oracles/registry.h"

#include <functional>
#include <stdexcept>

#include "oracles/reference.h"
#if ATTNFUZZ_HAVE_TORCH
#include "oracles/torch_oracle.h"
#endif

namespace attnfuzz {
namespace {

struct Entry {
  std::string name, description;
  std::function<std::unique_ptr<Backend>()> make;
  std::function<bool(std::string*)> available;
};

std::vector<Entry> entries() {
  std::vector<Entry> e;
  e.push_back({"reference", "float64 reference (Eigen)", [] { return std::make_unique<ReferenceBackend>(); },
               [](std::string*) { return true; }});
#if ATTNFUZZ_HAVE_TORCH
  e.push_back({"torch.f64", "LibTorch autograd over composed ops, float64, CPU",
               [] { return make_torch_composed_backend(TorchPrecision::float64); },
               [](std::string* why) { return torch_device_available(TorchDevice::cpu, why); }});
  e.push_back({"torch.math", "LibTorch composed ops in the case dtype (fp32 scores, P rounded), CPU",
               [] { return make_torch_composed_backend(TorchPrecision::case_dtype); },
               [](std::string* why) { return torch_device_available(TorchDevice::cpu, why); }});
  e.push_back({"torch.f64.cuda", "LibTorch autograd over composed ops, float64, CUDA",
               [] { return make_torch_composed_backend(TorchPrecision::float64, TorchDevice::cuda); },
               [](std::string* why) { return torch_device_available(TorchDevice::cuda, why); }});
  e.push_back({"torch.math.cuda", "LibTorch composed ops in the case dtype, CUDA",
               [] { return make_torch_composed_backend(TorchPrecision::case_dtype, TorchDevice::cuda); },
               [](std::string* why) { return torch_device_available(TorchDevice::cuda, why); }});
#else
  const char* no_torch = "this build has no LibTorch (configured with ATTNFUZZ_WITH_TORCH=OFF)";
  for (const char* n : {"torch.f64", "torch.math", "torch.f64.cuda", "torch.math.cuda"})
    e.push_back({n, "LibTorch oracle", nullptr, [no_torch](std::string* why) { *why = no_torch; return false; }});
#endif
  return e;
}

}  // namespace

std::vector<BackendInfo> list_backends() {
  std::vector<BackendInfo> out;
  for (const auto& e : entries()) {
    BackendInfo i{e.name, e.description, false, {}};
    i.available = e.available(&i.unavailable_reason);
    out.push_back(i);
  }
  return out;
}

std::unique_ptr<Backend> make_backend(const std::string& name) {
  std::string known;
  for (const auto& e : entries()) {
    known += (known.empty() ? "" : ", ") + e.name;
    if (e.name != name) continue;
    std::string why;
    if (!e.available(&why)) throw std::runtime_error("backend '" + name + "' is not available here: " + why);
    return e.make();
  }
  throw std::invalid_argument("unknown backend '" + name + "' (known: " + known + ")");
}

}  // namespace attnfuzz
