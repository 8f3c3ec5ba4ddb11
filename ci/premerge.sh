#!/usr/bin/env bash
# Pre-merge differential check: replay every recorded reproducer in corpus/repro/ (a regression
# must stay fixed), then a fixed-seed, fixed-budget check. JUnit XML and a JSON summary
# land in $OUT (default premerge-out/); the exit code is non-zero on any divergence.
#   ci/premerge.sh [extra attnfuzz check flags, e.g. --backends a,b --cases 500]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-premerge-out}
mkdir -p "$out"
"$root/attnfuzz" list >/dev/null  # builds on first use
status=0
"$root/attnfuzz" replay "$root/corpus/repro" --junit "$out/replay.xml" || status=1
"$root/attnfuzz" check --seed 20261129 --cases "${CASES:-300}" --out "$out/check" \
  --junit "$out/check.xml" --json "$out/check.json" "$@" || status=1
exit $status
