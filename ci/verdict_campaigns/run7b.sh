#!/usr/bin/env bash
# Session 7, the final call (issue 10): the false-alarm counts under the final rule (the
# projection along each row included), the GPU tests touched this session, and the Python
# medium tier's four marginal rows of session 6 replayed through their adapters.
#   TOTAL=<seconds> SEED=<seed> bash .carry-v7/run2.sh
# Staging: copy this folder's *.sh into the carry folder (.carry-v7), run its stage.sh on a gpu
# build, and put the cases to replay in pymedium/ and replay/ there. Seeds 71 and 81 ran the
# same campaigns before the replays were added (CPU_JOBS=8).
set -uo pipefail
C=$(cd "$(dirname "$0")" && pwd)
R=$(cd "$C/.." && pwd)
OUT=${OUT:-/tmp/out}
TOTAL=${TOTAL:-330}
S=$(( TOTAL - 75 ))
CAMPS=$OUT/camps
mkdir -p "$OUT/logs" "$CAMPS"
. "$C/device_env.sh"
SEED=${SEED:-101} KNOWN="$R/docs/findings/repro" GRACE=60
nproc; nvidia-smi --query-gpu=name,memory.used --format=csv,noheader
camp cpu-toy "${CPU_JOBS:-8}" 60 --tier toy --backends "$CPU5" --oracle-device cpu
camp cpu-512 4 300 --tier real --max-seq 512 --max-dim 128 --backends "$CPU5" --oracle-device cuda
camp gpu-toy 3 60 --devices 0 --tier toy --backends "$LIBTORCH"
( for t in test_gpu_error_terms test_gpu_health_calls; do
    [ -x "$C/bin/$t" ] || continue
    timeout 200 "$C/bin/$t" > "$OUT/logs/$t.log" 2>&1; echo "exit $?" >> "$OUT/logs/$t.log"
  done
  export ATTNFUZZ_PYTHON=python3 ATTNFUZZ_PY_PACKAGE_DIR=$C/python ATTNFUZZ_PY_TIMEOUT_S=300 ATTNFUZZ_COMPILE_LIMIT_S=600 OMP_NUM_THREADS=1
  for f in "$C"/pymedium/*.json "$C"/replay/*.json; do
    [ -f "$f" ] || continue
    b=$(basename "$f")
    case $b in py_flex_eager_cuda*) be="py:attnfuzz_py.adapters.flex:FlexEager?device=cuda";;
      py_flex_compiled_cuda*) be="py:attnfuzz_py.adapters.flex:FlexCompiled?device=cuda";;
      *torch_efficient*) be=torch.efficient;; *plugin_mutant_ok*) be=$OK;; *torch_sdpa_cpu_flash*) be=torch.sdpa.cpu_flash;;
      *torch_math*) be=torch.math;; *) continue;; esac
    timeout 200 "$A" run --oracle-device cuda --backends "$be" "$f" > /tmp/one.log 2>&1
    echo "$b: exit $? $(grep -E -o "worst [a-z ]+ [^;]*sigma' \(limit [0-9.e+-]*" /tmp/one.log | head -1)"
  done > "$OUT/logs/replay-open.log" 2>&1 ) &
wait
pack_outputs "$CAMPS"
