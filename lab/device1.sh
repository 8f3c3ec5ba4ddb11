#!/usr/bin/env bash
# Lab: device call 1 (not product). Tests, replays of every docs/findings reproducer, the
# standalone scripts and the F-1 probe, side by side; logs under $OUT.
set -u
cd "$(dirname "$0")/.."
mkdir -p "$OUT"
for f in .carry/bin/*; do :; done
bash ci/gpu_run.sh env > /dev/null 2>&1
( bash ci/gpu_run.sh tests > "$OUT/tests.summary" 2>&1 ) &
( for s in cudnn_unaligned_rows flash_unaligned_rows efficient_unaligned_rows sdpa_backward_determinism cudnn_fully_masked_rows; do
    timeout 240 python3 docs/findings/standalone/$s.py > "$OUT/standalone-$s.log" 2>&1; echo "$s exit $?" >> "$OUT/standalone.exit"
  done ) &
( timeout 300 python3 lab/f1_probe.py > "$OUT/f1_probe.log" 2>&1 ) &
wait
# Replays after the rest (each reproducer alone, its blamed backend only)
timeout 200 bash ci/gpu_run.sh replay $(find docs/findings -name '*.json' | sort) > "$OUT/replay.summary" 2>&1
echo done
