#pragma once
// What the gpu-labelled tests share: they skip, visibly and with the reason, where the
// project's CUDA kernels cannot run.
#include <gtest/gtest.h>

#include <string>

#include "oracles/gpu_oracles.h"

#define REQUIRE_GPU()                                                                 \
  do {                                                                                \
    std::string why_;                                                                 \
    if (!attnfuzz::cuda_kernels_available(&why_)) GTEST_SKIP() << "no GPU: " << why_; \
  } while (0)
