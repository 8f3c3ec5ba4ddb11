#pragma once
// LibTorch oracles built from composed operations (matmul, masked_fill,
// logsumexp, exp) and differentiated by autograd. Independent of the Eigen
// reference: different code, different library, derivative by autograd rather
// than by the hand-written formulas.
//   torch.f64   float64 throughout: the second float64 oracle.
//   torch.math  the same graph in the case dtype: operands in fp16/bf16/fp32,
//               scores and softmax accumulated in fp32, P rounded to the case
//               dtype before P V (the contract of a fused FlashAttention kernel).
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "harness/backend.h"

namespace attnfuzz {

enum class TorchPrecision { float64, case_dtype };

std::unique_ptr<Backend> make_torch_composed_backend(TorchPrecision precision, Device device = Device::cpu);
// Whether LibTorch can run on this device here (CUDA: built with CUDA and a GPU present).
bool torch_device_available(Device device, std::string* why = nullptr);
std::string torch_version();
void torch_set_threads(int n);
// "cuda" and "cudnn" versions LibTorch was built with and can use here, or why not.
std::map<std::string, std::string> torch_cuda_environment();
// Whether the CUDA context still works (a sticky error, a kernel fault, makes every later
// call fail), or the error it gives. Nothing to say where LibTorch has no CUDA.
std::optional<std::string> torch_cuda_health();

}  // namespace attnfuzz
