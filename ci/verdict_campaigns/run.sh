#!/usr/bin/env bash
# Kept in the repository as ci/verdict_campaigns/; on the device it runs from a carried copy
# (.carry-v6: stage.sh <gpu build dir> puts bin/ and lib/ beside it, plus copies of
# docs/findings/{repro,open,fixed} as repro/, open/, fixed/ and the findings to replay).
# Session 6, the final device call: the verdict's false-alarm counts (issue 10, item 3: CPU
# backends at the toy tier and at S <= 512, D <= 128 with GPU oracles; the LibTorch CUDA
# backends and cudnn), the Python adapters' campaign (issue 13, .carry-pyflex/campaign.sh) and
# cuda.flash/cuda.merge at the real tier (issue 12), all at once on the one H200 and 16 cores.
#   TOTAL=<seconds> bash .carry-v6/run.sh
set -uo pipefail
C=$(cd "$(dirname "$0")" && pwd)
R=$(cd "$C/.." && pwd)
OUT=${OUT:-/tmp/out}
TOTAL=${TOTAL:-540}        # the whole script's wall time
S=$(( TOTAL - 120 ))        # campaigns stop taking cases here; summaries and the tarballs follow
CAMPS=$OUT/camps
mkdir -p "$OUT/logs" "$CAMPS"
. "$C/device_env.sh"
SEED=61 KNOWN="$C/repro" GRACE=100
nproc; nvidia-smi --query-gpu=name,memory.used --format=csv,noheader
camp cpu-toy "${CPU_JOBS:-6}" 60 --tier toy --backends "$CPU5" --oracle-device cpu
camp cpu-512 4 300 --tier real --max-seq 512 --max-dim 128 --backends "$CPU5" --oracle-device cuda
camp gpu-toy 3 60 --devices 0 --tier toy --backends "$LIBTORCH"
camp flash-real 1 120 --devices 0 --tier real --backends cuda.flash,cuda.merge
( for t in test_gpu_error_terms test_gpu_oracles test_flash_kernels; do
    timeout 300 "$C/bin/$t" > "$OUT/logs/$t.log" 2>&1; echo "$t exit $?" >> "$OUT/logs/$t.log"
  done
  timeout 300 "$A" replay "$C/open" "$C/fixed" > "$OUT/logs/replay.log" 2>&1; echo "replay exit $?" >> "$OUT/logs/replay.log"
  # flash3's dLSE-dropped mutant campaign: dV rows on cases with dLSE = 0, through the real kernel.
  [ -d "$C/flashdv" ] && timeout 120 "$A" replay "$C/flashdv" --backends cuda.flash > "$OUT/logs/replay-flashdv.log" 2>&1; echo "replay flashdv exit $?" >> "$OUT/logs/replay-flashdv.log" ) &
if [ -f "$R/.carry-pyflex/campaign.sh" ]; then
  ( mkdir -p "$OUT/py"; OUT=$OUT/py SECONDS_TOTAL=$(( TOTAL - 15 )) bash "$R/.carry-pyflex/campaign.sh" > "$OUT/logs/pyflex.log" 2>&1; echo "pyflex exit $?" >> "$OUT/logs/pyflex.log" ) &
fi
wait
pack_outputs "$CAMPS"
