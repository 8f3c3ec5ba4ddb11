#!/usr/bin/env bash
# Two small checks beside the campaign (helper pyflex's triage, one core each, a few compiles):
# which (Dqk, Dv = 256) head dims compiled flex lowers in fp32 and fp16 (bf16 was measured), and
# the NoValidChoicesError case (GQA 8/2, strided K) through FlexCompiled's bucketed
# shapes (static shapes reproduced the error on 2026-11-30).
#   side_checks.sh LOGDIR SECONDS
set -uo pipefail
C=$(cd "$(dirname "$0")" && pwd)
L=$1 T=$2
export TORCHINDUCTOR_CACHE_DIR=$L/../inductor-side
( timeout "$T" python3 "$C/flex_compiled_head_dims.py" > "$L/side-head-dims.log" 2>&1; echo "exit $?" >> "$L/side-head-dims.log" ) &
( timeout "$T" "$C/bin/attnfuzz" run "$C/cases/novalidchoices-d256-dv137-bf16.json" --reference cuda --no-determinism-check \
    --backends "py:attnfuzz_py.adapters.flex:FlexCompiled?device=cuda" > "$L/side-novalidchoices.log" 2>&1
  echo "bucketed exit $?" >> "$L/side-novalidchoices.log" ) &
wait
