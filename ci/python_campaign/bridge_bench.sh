#!/usr/bin/env bash
# On the GPU machine (device tool), from a carry folder staged by stage_bench.sh: TritonFlash's
# compile-time test (tests/python/test_triton_compile_gpu.py) on the GPU, then
# bench_python_bridge on the quiet host (docs/python-backends.md, "Speed"). Logs to $OUT.
#   bash <carry folder>/bridge_bench.sh
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
{ uptime; nproc; nvidia-smi --query-gpu=name --format=csv,noheader; python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'; } > "$OUT/env.log" 2>&1
timeout 45 python3 "$here/tests/test_triton_compile_gpu.py" "$here/python" > "$OUT/triton_compile_gpu.log" 2>&1; echo "rc=$?" >> "$OUT/triton_compile_gpu.log"
tail -4 "$OUT/triton_compile_gpu.log"
torch_dir=$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))')
export LD_LIBRARY_PATH="$torch_dir/lib:$(dirname "$torch_dir")/nvidia/cu13/lib:$here/lib"
export ATTNFUZZ_PYTHON=python3 ATTNFUZZ_PY_PACKAGE_DIR=$here/python ATTNFUZZ_BENCH_DIR=$here/bench ATTNFUZZ_NOOP_PLUGIN=$here/lib/libattnfuzz_bench_noop_plugin.so
uptime >> "$OUT/bench.log"
timeout 35 "$here/bin/bench_python_bridge" --benchmark_filter='large:0|Distinct|Supports' --benchmark_repetitions=3 \
  --benchmark_report_aggregates_only=true --benchmark_min_time=0.2 >> "$OUT/bench.log" 2>&1
timeout 20 "$here/bin/bench_python_bridge" --benchmark_filter='large:1' --benchmark_min_time=0.3 >> "$OUT/bench.log" 2>&1
uptime >> "$OUT/bench.log"
grep -E "median|large:1|load" "$OUT/bench.log"
