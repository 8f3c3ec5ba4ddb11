#!/usr/bin/env bash
# Session 7 (issue 10): the false-alarm counts under the rule with the row normalizer part, on
# the H200's 16 cores and GPU: CPU backends at the toy tier (CPU oracles) and at S <= 512,
# D <= 128 (GPU oracles), the LibTorch CUDA backends and cudnn at the toy tier; the GPU error
# terms test (the CUDA side of the change); replays of session 6's open false alarms.
#   TOTAL=<seconds> bash .carry-v7/run.sh
set -uo pipefail
C=$(cd "$(dirname "$0")" && pwd)
R=$(cd "$C/.." && pwd)
OUT=${OUT:-/tmp/out}
TOTAL=${TOTAL:-360}
S=$(( TOTAL - 75 ))
CAMPS=$OUT/camps
mkdir -p "$OUT/logs" "$CAMPS"
torch_dir=$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))')
site=$(dirname "$torch_dir")
export LD_LIBRARY_PATH="$torch_dir/lib:$site/nvidia/cudnn/lib:$site/nvidia/cu13/lib:$C/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
A="$C/bin/attnfuzz"
OK="plugin:$C/lib/libattnfuzz_mutant_ok.so"
CPU5="torch.math,torch.sdpa.math,torch.sdpa.cpu_flash,$OK,plugin:$C/lib/libattnfuzz_plugin_minimal.so"
LIBTORCH="torch.flash,torch.efficient,torch.cudnn,cudnn"
camp() {  # camp NAME JOBS TIMEOUT ARGS...
  local name=$1 jobs=$2 to=$3; shift 3
  ( timeout $(( S + 60 )) "$A" campaign --seconds "$S" --seed "${SEED:-81}" --jobs "$jobs" --timeout "$to" --no-minimize --quiet \
      --known "$R/docs/findings/repro" --out "$CAMPS/$name" "$@" > "$OUT/logs/camp-$name.log" 2>&1
    echo "campaign $name exit $?" >> "$OUT/logs/camp-$name.log" ) &
}
nproc; nvidia-smi --query-gpu=name,memory.used --format=csv,noheader
camp cpu-toy "${CPU_JOBS:-8}" 60 --tier toy --backends "$CPU5" --oracle-device cpu
camp cpu-512 4 300 --tier real --max-seq 512 --max-dim 128 --backends "$CPU5" --oracle-device cuda
camp gpu-toy 3 60 --devices 0 --tier toy --backends "$LIBTORCH"
( timeout 200 "$C/bin/test_gpu_error_terms" > "$OUT/logs/test_gpu_error_terms.log" 2>&1; echo "exit $?" >> "$OUT/logs/test_gpu_error_terms.log"
  timeout 200 "$A" replay $(ls "$C"/fixed/*.json | grep -v /H-5-) > "$OUT/logs/replay-fixed.log" 2>&1; echo "replay exit $?" >> "$OUT/logs/replay-fixed.log"
  timeout 100 "$A" replay --backends "$OK" "$C"/fixed/H-5-mutant-ok-*.json >> "$OUT/logs/replay-fixed.log" 2>&1
  timeout 100 "$A" replay --backends torch.math "$C"/fixed/H-5-torch-math-*.json >> "$OUT/logs/replay-fixed.log" 2>&1
  for f in "$C"/replay512/*.json; do
    b=$(basename "$f"); b=${b#s*-*-}
    case $b in plugin_mutant_ok*) be=$OK;; torch_math*) be=torch.math;; torch_sdpa_math*) be=torch.sdpa.math;; torch_sdpa_cpu_flash*) be=torch.sdpa.cpu_flash;;
      torch_efficient*) be=torch.efficient;; *) continue;; esac
    timeout 120 "$A" run --oracle-device cuda --backends "$be" "$f" > /tmp/one.log 2>&1; echo "$(basename "$f"): exit $? $(grep -E -o "worst [a-z]+ [^;]*sigma' \(limit [0-9.e+-]*" /tmp/one.log | head -1)"
  done > "$OUT/logs/replay-open.log" 2>&1 ) &
wait
for f in "$OUT"/logs/*.log; do echo "=== $(basename "$f")"; grep -vE "elapsed|^\[ RUN|^\[       OK" "$f" | tail -16 | cut -c1-300; done
for n in "$CAMPS"/*; do [ -f "$n/summary.json" ] && cp "$n/summary.json" "$OUT/logs/summary-$(basename "$n").json"; done
(cd "$CAMPS" && tar czf "$OUT/camps.tgz" --exclude='*.html' . 2>/dev/null && cd .. && rm -rf "$CAMPS")
(cd "$OUT" && tar czf logs.tgz logs && rm -rf logs)
