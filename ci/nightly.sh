#!/usr/bin/env bash
# Nightly campaign on one machine: one worker per GPU (or per core without GPUs), a time
# budget, minimized findings, an HTML report; then replay of the regression corpus.
#   SECONDS_BUDGET=14400 SHARD=0/1 ci/nightly.sh [--backends ...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
stamp=$(date -u +%Y%m%d)
out=${OUT:-nightly-$stamp-${SHARD:-0/1}}
out=${out//\//of}
devices=""
if command -v nvidia-smi >/dev/null 2>&1; then
  devices=$(nvidia-smi --query-gpu=index --format=csv,noheader | paste -sd, -)
fi
args=(campaign --seed "${SEED:-$stamp}" --seconds "${SECONDS_BUDGET:-3600}" --shard "${SHARD:-0/1}" --out "$out")
[ -n "$devices" ] && args+=(--devices "$devices")
set +e
"$root/attnfuzz" "${args[@]}" "$@"
rc=$?
"$root/attnfuzz" replay "$root/corpus/repro" --junit "$out/replay.xml"
exit $(( rc > 1 ? rc : 0 ))  # findings are the product, not a failure of the job
