#!/usr/bin/env bash
# The Python campaign of issue 13 on the H200: FlexEager, FlexCompiled (bucketed shapes) and
# TritonFlash on CUDA, at the toy tier and a medium tier (--tier real --max-seq 1024), the two
# campaigns at once. Everything it needs is in this folder (bin/attnfuzz, lib/, python/).
#   OUT=/tmp/out SECONDS_TOTAL=540 bash .carry-pyflex/campaign.sh
# env: OUT (results), SECONDS_TOTAL (wall time of the whole script, default 540), SEED (61),
#      JOBS_TOY (1), JOBS_MEDIUM (2), CAMPS (campaign dirs, default /tmp/pyflex-camps: pass a
#      kept folder to resume), SIDE (1: side_checks.sh beside the campaigns, 0: not).
#      CPU use: JOBS_TOY + JOBS_MEDIUM campaign workers, each with three Python workers (one busy
#      at a time), Inductor compiling in-process (TORCHINDUCTOR_COMPILE_THREADS=1), and up to
#      2 side checks in their first minutes: about 6 cores.
# Results (two files): $OUT/py-campaign.tgz (the campaign folders without report.html, and the
# logs) and $OUT/py-summary.txt (the end of each log: cases, findings, coverage, compile stats).
set -uo pipefail
C=$(cd "$(dirname "$0")" && pwd)
R=$(cd "$C/.." && pwd)
OUT=${OUT:-/tmp/out}
TOTAL=${SECONDS_TOTAL:-540}
CAMPS=${CAMPS:-/tmp/pyflex-camps}
LOGS=$CAMPS/logs
mkdir -p "$LOGS"
torch_dir=$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))')
site=$(dirname "$torch_dir")
export LD_LIBRARY_PATH="$torch_dir/lib:$site/nvidia/cudnn/lib:$site/nvidia/cu13/lib:$C/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export ATTNFUZZ_PYTHON=python3 ATTNFUZZ_PY_PACKAGE_DIR=$C/python ATTNFUZZ_PY_TIMEOUT_S=300 ATTNFUZZ_COMPILE_LIMIT_S=600
export TORCHINDUCTOR_COMPILE_THREADS=1 TORCHINDUCTOR_CACHE_DIR=$CAMPS/inductor-cache OMP_NUM_THREADS=1
KNOWN=$R/docs/findings/repro
[ -d "$C/repro" ] && KNOWN=$KNOWN,$C/repro   # known deviations staged with this folder
PY="py:attnfuzz_py.adapters.flex:FlexEager?device=cuda,py:attnfuzz_py.adapters.flex:FlexCompiled?device=cuda,py:attnfuzz_py.adapters.triton_flash:TritonFlash"
# The campaign stops taking cases at S; its cases in flight (a new kernel compiles in tens of
# seconds), the summary and the report follow: 150 s kept for them.
S=$(( TOTAL > 300 ? TOTAL - 150 : TOTAL / 2 ))
camp() {  # camp NAME JOBS TIER-FLAGS...
  local name=$1 jobs=$2; shift 2
  local resume=(); [ -f "$CAMPS/$name/state.json" ] && resume=(--resume)
  ( timeout $(( TOTAL - 5 )) "$C/bin/attnfuzz" campaign --seconds "$S" --seed "${SEED:-61}" --jobs "$jobs" --devices 0 --timeout 90 \
      --no-minimize --quiet "$@" --backends "$PY" --known "$KNOWN" --out "$CAMPS/$name" "${resume[@]}" > "$LOGS/$name.log" 2>&1
    echo "campaign $name exit $?" >> "$LOGS/$name.log" ) &
}
camp pytoy "${JOBS_TOY:-1}" --tier toy
camp pymedium "${JOBS_MEDIUM:-2}" --tier real --max-seq 1024
[ "${SIDE:-1}" = 1 ] && bash "$C/side_checks.sh" "$LOGS" $(( TOTAL / 2 )) &
wait
{ for f in "$LOGS"/*.log; do
    echo "=== $(basename "$f")"
    grep -vE "elapsed|UserWarning|^$|SOLUTION|_FLEX_ATTENTION|This will allow|_warn_once|torch.compile\(flex|^  py\..* ran " "$f" | cut -c1-400 | tail -40
  done
  echo "=== FlexCompiled's compile counts (the last lines of the campaign workers)"
  grep -h "flex_compiled.*so far compile_s\|FELL BACK" "$LOGS"/py*.log | tail -6
  ls "$CAMPS"/*/findings 2>/dev/null; } > "$OUT/py-summary.txt"
cat "$OUT/py-summary.txt"
(cd "$CAMPS" && tar czf "$OUT/py-campaign.tgz" --exclude='*.html' --exclude='inductor-*' --exclude=lock .)
