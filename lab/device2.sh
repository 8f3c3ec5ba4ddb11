#!/usr/bin/env bash
# Lab: device call 3 (not product). New build: GPU tests, replay of the ledger, triage of the
# default campaign's findings, F-1 with a surround, the cuDNN frontend script, rates.
set -u
cd "$(dirname "$0")/.."
R=$OUT/r; mkdir -p "$R"
bin=.carry/bin/attnfuzz
torch_dir=$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))')
site=$(dirname "$torch_dir")
export LD_LIBRARY_PATH="$torch_dir/lib:$site/nvidia/cudnn/lib:$site/nvidia/cu13/lib:$PWD/.carry/lib"
pip install --no-deps --target /tmp/cudnnfe lab/wheels/nvidia_cudnn_frontend-*.whl > "$R/pip.log" 2>&1
( OUT=$R bash ci/gpu_run.sh tests > "$R/tests.summary" 2>&1 ) &
( PYTHONPATH=/tmp/cudnnfe timeout 200 python3 docs/findings/standalone/cudnn_frontend_dqk_gt_dv.py > "$R/cudnn_frontend_dqk_gt_dv.log" 2>&1 ) &
# Triage: each finding of the default campaign alone, with a long watchdog, its blamed backend only.
blamed() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["finding"]["signature"]["backend"])' "$1"; }
( for f in $(ls lab/triage/*-*.json | grep -v timeout); do
    timeout 130 "$bin" replay --timeout 120 --backends "$(blamed $f)" "$f" 2>&1 | grep -E "^(FAILING|fixed|UNTESTED|ERROR)" ; done > "$R/triage-replay.log" 2>&1 ) &
for f in lab/triage/*timeout*.json; do
  ( /usr/bin/time -f "%e s wall" timeout 230 "$bin" replay --timeout 220 --backends "$(blamed $f)" "$f" > "$R/triage-$(basename $f .json).log" 2>&1 ) &
done
( timeout 240 bash ci/gpu_run.sh replay $(find docs/findings -name '*.json' | sort) > "$R/replay.summary" 2>&1 ) &
( for f in lab/triage/cudnn-dK-mismatch-9036b483.json lab/triage/torch_efficient-dK-mismatch-e607b092.json docs/findings/fixed/torch-efficient-dK-row-outliers.json; do
    b=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["finding"]["signature"]["backend"])' "$f")
    echo "== $f"; timeout 300 "$bin" run --backends "$b" "$f" 2>&1 | tail -40; done > "$R/triage-run.log" 2>&1 ) &
# F-1: the campaign's case with a NaN surround and without; reproducers recorded and replayed.
( for c in f1-zero f1-surround-nan; do echo "== $c"; timeout 200 "$bin" run --backends torch.cudnn,torch.sdpa.cudnn --record "$R/rec-$c" lab/triage/$c.case.json 2>&1 | tail -30; done > "$R/f1-run.log" 2>&1
  for f in docs/findings/repro/F-1-*.json; do n=$(basename "$f" .json); timeout 100 "$bin" run --backends torch.cudnn --record "$R/rec-$n" "$f" > "$R/run-$n.log" 2>&1; done
  timeout 300 "$bin" replay "$R"/rec-*/*.json > "$R/f1-replay.log" 2>&1 ) &
( for s in flash_unaligned_rows sdpa_backward_determinism; do timeout 150 python3 docs/findings/standalone/$s.py > "$R/standalone-$s.log" 2>&1; done ) &
wait
fused=cuda.flash,cudnn,torch.flash,torch.efficient,torch.cudnn
for tier in toy real; do
  n=$([ "$tier" = toy ] && echo 600 || echo 30)
  timeout 80 .carry/bin/bench_case_rate --tier $tier --cases $n --seed 7 --backends $fused --aimed --edge-share 0 > "$R/rate-$tier.log" 2>&1
  timeout 30 python3 bench/plain_loop.py --tier $tier --seconds 10 --kernels flash > "$R/plain-$tier-flash.log" 2>/dev/null
  timeout 30 python3 bench/plain_loop.py --tier $tier --seconds 10 --kernels flash,efficient,cudnn > "$R/plain-$tier-all.log" 2>/dev/null
done
tar czf "$OUT/r.tgz" -C "$OUT" r && rm -rf "$R"
echo done
