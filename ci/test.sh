#!/usr/bin/env bash
# The test command: set up, build the fuzz, cpu and gpu presets, run the `fuzz` and `cpu`
# ctest labels, and the `gpu` label (which reports itself skipped, with the reason, on a
# machine without a GPU: CI compiles every GPU source so a backend that does not build never
# lands; the GPU machine runs it for real, see docs/gpu.md).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
jobs=$(nproc)
ci/setup.sh
cmake --preset fuzz
cmake --build --preset fuzz -j "$jobs"
ctest --preset fuzz
cmake --preset cpu
cmake --build --preset cpu -j "$jobs"
ctest --preset cpu -j "$jobs"
# The gpu preset: only what the cpu preset does not already build and test.
cmake --preset gpu
# Every GPU test, benchmark and plugin, so none that does not build can land (the flash mutant
# plugins are kernels/flash/ again under a compile definition each: left to the full gpu build).
cmake --build --preset gpu -j "$jobs" --target attnfuzz test_gpu_backends test_cudnn_backend test_gpu_oracles \
  test_gpu_error_terms test_flash_kernels bench_gpu_oracles bench_gpu_run bench_flash \
  attnfuzz_plugin_minimal_cuda attnfuzz_plugin_minimal_cuda_ignores_dlse attnfuzz_plugin_minimal_cuda_faults
ctest --preset gpu
