#pragma once
// LibTorch's CUDA half (libtorch_cuda.so) is loaded at run time, not linked: the same
// attnfuzz binary then runs on a machine without CUDA libraries (CI) and, where the
// library is found, registers LibTorch's CUDA kernels and hooks so the torch.*.cuda
// backends work. It must happen before anything asks LibTorch about CUDA (the hooks
// are looked up once), which is why the registry calls it before building any entry.
#include <string>

namespace attnfuzz {

// Idempotent. Looks for libtorch_cuda.so in $ATTNFUZZ_LIBTORCH_CUDA (a file), next to the
// libtorch_cpu.so this process loaded, then on the library search path. False, with the
// reason, when none loads.
bool load_torch_cuda(std::string* why = nullptr);

}  // namespace attnfuzz
