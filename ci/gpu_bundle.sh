#!/usr/bin/env bash
# Stages what the GPU machine needs to run this build into .carry/ (git-ignored), for the
# device tool's `carry`: stripped binaries and the one shared library it lacks (libfmt).
# LibTorch, cuDNN and CUDA come from the machine's own torch package (ci/gpu_run.sh).
#   ci/gpu_bundle.sh [build-dir]      (default build/gpu)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build/gpu}
out=$root/.carry
rm -rf "$out" && mkdir -p "$out/bin" "$out/lib" "$out/mutants" "$out/plugins"
for b in attnfuzz tests/test_gpu_backends tests/test_gpu_varlen tests/test_gpu_nested tests/test_torch_nested tests/test_gpu_cudnn_varlen tests/test_gpu_flash_varlen tests/test_cudnn_backend tests/test_gpu_oracles tests/test_gpu_error_terms tests/test_gpu_verdict tests/test_flash_kernels \
         bench/bench_gpu_oracles bench/bench_flash bench/bench_gpu_run bench/bench_case_rate bench/bench_sensitivity generators/fuzz/fuzz_differential; do
  [ -f "$build/$b" ] && strip -o "$out/bin/$(basename "$b")" "$build/$b"
done
# The mutant zoo, so the GPU machine can show the harness finding planted bugs there too.
for m in "$build"/mutants/*.so; do [ -f "$m" ] && strip -o "$out/mutants/$(basename "$m")" "$m"; done
# The test plugins, CUDA ones included (tests/plugins/cuda_plugin_test.sh runs them there).
for m in "$build"/plugins/*.so; do [ -f "$m" ] && strip -o "$out/plugins/$(basename "$m")" "$m"; done
cp -L "$(ldd "$out/bin/attnfuzz" | awk '/libfmt/ {print $3}')" "$out/lib/"
# The standalone cuDNN probe of the open varlen rows (docs/findings/standalone; no attnfuzz code):
# built here, where the frontend headers are, for `ci/gpu_run.sh varlen`.
fe=$root/.deps/cudnn_frontend/include
if [ -d "$fe" ] && [ -f /usr/local/cuda/include/cudnn.h ]; then
  g++ -std=c++20 -O2 -isystem "$fe" -isystem /usr/local/cuda/include "$root/docs/findings/standalone/cudnn_paged_ragged_probe.cpp" \
    -o "$out/bin/cudnn_paged_ragged_probe" -L/usr/local/cuda/lib64 -lcudnn -lcudart -lnvrtc -s
fi
git -C "$root" rev-parse --short=12 HEAD > "$out/commit"
du -sh "$out"
