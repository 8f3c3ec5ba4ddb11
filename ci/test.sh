#!/usr/bin/env bash
# The test command: set up, build the fuzz, cpu and gpu presets, run the `fuzz` and `cpu`
# ctest labels, and the `gpu` label (which reports itself skipped, with the reason, on a
# machine without a GPU: CI compiles every GPU source so a backend that does not build never
# lands; the GPU machine runs it for real, see docs/gpu.md). Each stage prints its time.
# The long shards of the no-false-alarm tests are left to `ci/nightly-tests.sh`
# (CMakePresets.json's `nightly` test preset; docs/verdicts.md, "Nightly tests").
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
jobs=$(nproc)
# The cpu and gpu build folders share ccache entries (the same sources, the same flags): the
# hash leaves the working directory out (it only names the debug info's compilation folder).
export CCACHE_NOHASHDIR=1
t0=$SECONDS
stage_start=$SECONDS
stage() {  # stage NAME COMMAND...: runs it, then prints how long it took
  local name=$1
  shift
  stage_start=$SECONDS
  # A full disk shows up as a link or write failure deep in a stage's log: say so beside it.
  "$@" || { local rc=$?; echo "ci: stage $name failed (exit $rc); free space:"; df -h "$root" /tmp 2>/dev/null || true; exit $rc; }
  printf 'ci: %-14s %4d s (total %d s)\n' "$name" $((SECONDS - stage_start)) $((SECONDS - t0))
}
# The whole run needs about 12 GB (the Python env 5 GB, the three build folders 4-5 GB, ccache).
echo "ci: free space at the start: $(df -h --output=avail "$root" | tail -1 | tr -d ' ')"
stage setup ci/setup.sh
# The Slurm test (tests/slurm_array_test.sh, ctest slurm_array) starts a private single-node Slurm,
# which needs root (passwordless sudo is not enough: slurmd must run as root); ci/setup.sh has just
# installed its packages. As root with them, a skip of that test is a failure (CI_REQUIRE_SLURM=1),
# so CI shows it ran; elsewhere it may skip, visibly.
# CI_REQUIRE_SLURM=0 ci/test.sh opts out.
if [ "$(id -u)" = 0 ] && command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null; then
  export CI_REQUIRE_SLURM=${CI_REQUIRE_SLURM:-1}
fi
echo "ci: CI_REQUIRE_SLURM=${CI_REQUIRE_SLURM:-0} (the slurm_array test $([ "${CI_REQUIRE_SLURM:-0}" = 1 ] && echo must run || echo may skip))"
# The fuzz preset: the libFuzzer targets and what their `fuzz` tests load (the mutant plugins),
# under clang with -Werror; the rest of the tree is the cpu preset's to build and test.
stage fuzz-build bash -c 'cmake --preset fuzz && cmake --build --preset fuzz -j "$0" --target fuzz_case_parser fuzz_differential' "$jobs"
stage fuzz-test ctest --preset fuzz -j "$jobs"
stage cpu-build bash -c 'cmake --preset cpu && cmake --build --preset cpu -j "$0"' "$jobs"
stage cpu-test ctest --preset cpu -j "$jobs"
# The gpu preset: only what the cpu preset does not already build and test.
# Every GPU test, benchmark and plugin, so none that does not build can land (the flash mutant
# plugins are kernels/flash/ again under a compile definition each: left to the full gpu build).
stage gpu-build bash -c 'cmake --preset gpu && cmake --build --preset gpu -j "$0" --target attnfuzz test_gpu_backends test_cudnn_backend \
  test_gpu_oracles test_gpu_error_terms test_gpu_verdict test_flash_kernels test_gpu_cudnn_varlen test_gpu_flash_varlen bench_gpu_oracles bench_gpu_run bench_flash \
  attnfuzz_plugin_minimal_cuda attnfuzz_plugin_minimal_cuda_ignores_dlse attnfuzz_plugin_minimal_cuda_faults fuzz_differential' "$jobs"
stage gpu-test ctest --preset gpu
if command -v ccache >/dev/null 2>&1; then ccache --show-stats 2>/dev/null | grep -iE "hits|misses" | head -4 || true; fi
