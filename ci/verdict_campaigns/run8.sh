#!/usr/bin/env bash
# Session 8 (issue 10): after the dLSE-adapter baseline fix, the sensitivity of the backends
# without dLSE (LibTorch CUDA, cuDNN) and the false-alarm counts of every correct backend, with
# the known and fixed findings replayed.   TOTAL=<seconds> SEED=<seed> bash .carry-v8/run8.sh
# Staging: copy this folder's device_env.sh and run8.sh into the carry folder (.carry-v8), run
# stage.sh there on a gpu build, and strip bench_sensitivity into its bin/; reproducers to replay
# besides docs/findings/fixed go in its replay/ folder.
set -uo pipefail
C=$(cd "$(dirname "$0")" && pwd)
R=$(cd "$C/.." && pwd)
OUT=${OUT:-/tmp/out}
TOTAL=${TOTAL:-420}
S=$(( TOTAL - 80 ))
CAMPS=$OUT/camps
mkdir -p "$OUT/logs" "$CAMPS" "$OUT/logs/sens"
. "$C/device_env.sh"
SEED=${SEED:-121} KNOWN="$R/docs/findings/repro" GRACE=60
export OMP_NUM_THREADS=1
nproc; nvidia-smi --query-gpu=name,memory.used --format=csv,noheader
if [ -z "${NO_SENS:-}" ]; then
  for b in cudnn torch.flash torch.efficient torch.cudnn; do sens "$b-bf16-1024-128--$b" --backend $b --dtype bf16 --seq 1024 --dim 128; done
  sens "torch.efficient-fp32-256-64--torch.efficient" --backend torch.efficient --dtype fp32 --seq 256 --dim 64
  sens "cudnn-fp16-2048-64--cudnn" --backend cudnn --dtype fp16 --seq 2048 --dim 64
  sleep 90  # the sensitivity processes first: they are short
fi
camp cpu-toy 6 60 --tier toy --backends "$CPU5" --oracle-device cpu
camp cpu-512 3 300 --tier real --max-seq 512 --max-dim 128 --backends "$CPU5" --oracle-device cuda
camp gpu-toy 3 60 --devices 0 --tier toy --backends "$LIBTORCH"
camp gpu-real 2 300 --devices 0 --tier real --backends "$LIBTORCH" --oracle-device cuda
( "$A" replay --known "$KNOWN" > "$OUT/logs/replay-known.log" 2>&1; echo "exit $?" >> "$OUT/logs/replay-known.log"
  for f in "$R"/docs/findings/fixed/*.json "$C"/replay/*.json; do
    timeout 120 "$A" replay "$f" > /tmp/one.log 2>&1; echo "$(basename "$f"): exit $? $(tail -1 /tmp/one.log | cut -c1-160)"
  done > "$OUT/logs/replay-fixed.log" 2>&1 ) &
wait
pack_outputs "$CAMPS"
