#!/usr/bin/env bash
# Pre-merge differential check: replay every recorded reproducer in corpus/repro/ (a regression
# must stay fixed) and the ledger's open ones this machine can run (docs/findings/), then a
# fixed-seed, fixed-budget check. JUnit XML and a JSON summary land in $OUT (default
# premerge-out/); the exit code is non-zero on any divergence.
#   ci/premerge.sh [extra attnfuzz check flags, e.g. --backends a,b --cases 500]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-premerge-out}
mkdir -p "$out"
"$root/attnfuzz" list >/dev/null  # builds on first use
status=0
"$root/attnfuzz" replay "$root/corpus/repro" --junit "$out/replay.xml" || status=1
# The ledger's known and open reproducers (docs/findings/LEDGER.md) that this machine can run:
# still failing is what they are expected to do (--known); the others are listed, not run.
"$root/attnfuzz" replay --known --runnable-only "$root/docs/findings/repro" "$root/docs/findings/open" \
  --junit "$out/ledger.xml" || status=1
"$root/attnfuzz" check --seed 20261129 --cases "${CASES:-300}" --out "$out/check" \
  --junit "$out/check.xml" --json "$out/check.json" "$@" || status=1
exit $status
