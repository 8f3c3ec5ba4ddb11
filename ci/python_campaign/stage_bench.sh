#!/usr/bin/env bash
# Stages bench_python_bridge (cpu preset: it runs on the GPU machine's host against the
# machine's own torch libraries), the python package and the GPU test into a carry folder:
#   ci/python_campaign/stage_bench.sh <checkout> <carry folder, e.g. .carry-pyfast>
# then, on the device: bash <carry folder>/bridge_bench.sh
set -euo pipefail
W=$(cd "$1" && pwd)
mkdir -p "$2"
C=$(cd "$2" && pwd)
S=$(cd "$(dirname "$0")" && pwd)
rm -rf "$C/bin" "$C/lib" "$C/python" "$C/tests" "$C/bench"; mkdir -p "$C/bin" "$C/lib" "$C/python" "$C/tests" "$C/bench"
cp "$S/bridge_bench.sh" "$C/"
strip -o "$C/bin/bench_python_bridge" "$W/build/cpu/bench/bench_python_bridge"
cp "$W/build/cpu/bench/libattnfuzz_bench_noop_plugin.so" "$C/lib/"
cp -L "$(ldd "$C/bin/bench_python_bridge" | awk '/libbenchmark/ {print $3}')" "$C/lib/"  # not on that machine
cp -r "$W/python/attnfuzz_py" "$C/python/"
find "$C/python" -name __pycache__ -prune -exec rm -rf {} +
cp "$W/tests/python/test_triton_compile_gpu.py" "$C/tests/"
cp "$W/bench/noop_adapter.py" "$C/bench/"
(cd "$W" && git log --oneline -1) > "$C/STAGED_FROM"
du -sh "$C"
