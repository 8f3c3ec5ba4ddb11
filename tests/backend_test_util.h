#pragma once
// What the gpu-labelled backend tests share (tests/test_gpu_backends.cpp, test_gpu_varlen.cpp,
// test_gpu_cudnn_varlen.cpp): making a registered backend or skipping, visibly and with the
// registry's reason, where it cannot run here; and a backend name as a gtest parameter name.
#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "backends/registry.h"

// Makes the named backend into `var`, or skips the test with the registry's reason where it
// cannot run here (no GPU, no CUDA LibTorch, no cuDNN); a name the registry does not know fails
// (make_backends throws), so a misspelt backend is never a silent skip. Inside namespace
// attnfuzz (BackendSet, make_backends and WhenUnavailable are named unqualified).
#define MAKE_BACKEND_OR_SKIP(var, name)                              \
  do {                                                               \
    BackendSet made_ = make_backends({name}, WhenUnavailable::skip); \
    if (made_.owned.empty()) GTEST_SKIP() << made_.skipped.front();  \
    var = std::move(made_.owned.front());                            \
  } while (0)

namespace attnfuzz::test {

// A backend name as a gtest parameter name (no dots): "torch.flash.varlen" -> "torch_flash_varlen".
inline std::string backend_param_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string n = info.param;
  for (char& ch : n)
    if (ch == '.') ch = '_';
  return n;
}

}  // namespace attnfuzz::test
