#!/usr/bin/env bash
# Session 9 (issue 10): the tf32x3 contract of torch.efficient's fp32. The GPU oracles' tf32x3
# baselines against the CPU emulation, the seed-131 reproducers and every fixed one replayed,
# torch.efficient's fp32 sensitivity, the standalone 3xTF32 triage script, and the false-alarm
# counts of the LibTorch CUDA backends and cudnn (toy and real tiers).
#   TOTAL=<seconds> SEED=<seed> bash .carry-v9/run9.sh
# Staging as run8.sh (stage.sh on a gpu build, bench_sensitivity stripped into bin/, the
# standalone script into py/).
set -uo pipefail
C=$(cd "$(dirname "$0")" && pwd)
R=$(cd "$C/.." && pwd)
OUT=${OUT:-/tmp/out}
TOTAL=${TOTAL:-360}
S=$(( TOTAL - 70 ))
CAMPS=$OUT/camps
mkdir -p "$OUT/logs" "$CAMPS" "$OUT/logs/sens"
. "$C/device_env.sh"
SEED=${SEED:-141} KNOWN="$R/docs/findings/repro" GRACE=50
export OMP_NUM_THREADS=1
nproc; nvidia-smi --query-gpu=name,memory.used --format=csv,noheader
( timeout 200 "$C/bin/test_gpu_oracles" --gtest_filter='GpuEmulated.*' > "$OUT/logs/test_gpu_oracles.log" 2>&1; echo "exit $?" >> "$OUT/logs/test_gpu_oracles.log" ) &
( timeout 60 python3 "$C/py/efficient_fp32_cancellation.py" > "$OUT/logs/standalone.log" 2>&1; echo "exit $?" >> "$OUT/logs/standalone.log" ) &
sens "torch.efficient-fp32-256-64--torch.efficient" --backend torch.efficient --dtype fp32 --seq 256 --dim 64
sens "torch.efficient-fp32-64-64--torch.efficient" --backend torch.efficient --dtype fp32 --seq 64 --dim 64,128
sens "torch.efficient-fp32-1024-128--torch.efficient" --backend torch.efficient --dtype fp32 --seq 1024 --dim 128
sleep 60
camp gpu-toy 4 60 --devices 0 --tier toy --backends "$LIBTORCH"
camp gpu-real 2 300 --devices 0 --tier real --backends "$LIBTORCH" --oracle-device cuda
( "$A" replay --known "$KNOWN" > "$OUT/logs/replay-known.log" 2>&1; echo "exit $?" >> "$OUT/logs/replay-known.log"
  for f in "$R"/docs/findings/fixed/*.json "$C"/replay/*.json; do
    [ -f "$f" ] || continue
    timeout 120 "$A" replay "$f" > /tmp/one.log 2>&1; echo "$(basename "$f"): exit $? $(tail -1 /tmp/one.log | cut -c1-160)"
  done > "$OUT/logs/replay-fixed.log" 2>&1
  # Before: the same reproducers with the previous build (old/attnfuzz, where carried).
  for f in "$C"/replay/*.json; do
    [ -x "$C/old/attnfuzz" ] || break
    timeout 120 "$C/old/attnfuzz" replay "$f" > /tmp/one.log 2>&1; echo "$(basename "$f"): exit $? $(tail -1 /tmp/one.log | cut -c1-160)"
  done > "$OUT/logs/replay-before.log" 2>&1 ) &
wait
pack_outputs "$CAMPS"
