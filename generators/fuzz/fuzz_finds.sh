#!/usr/bin/env bash
# Runs the differential fuzz target over some backends from an empty corpus and passes when it
# reports a finding (libFuzzer exits non-zero on the abort) within the time limit.
#   fuzz_finds.sh TARGET BACKENDS SECONDS [libFuzzer flags...]
# BACKENDS is ATTNFUZZ_FUZZ_BACKENDS (e.g. plugin:/path/lib.so or torch.math,plugin:/path/lib.so).
set -u
target=$1 backends=$2 limit=$3
shift 3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus"
start=$(date +%s)
ATTNFUZZ_FUZZ_BACKENDS="$backends" ATTNFUZZ_FUZZ_OUT="$work/findings" \
  "$target" -max_total_time="$limit" -seed=1 -artifact_prefix="$work/" "$@" "$work/corpus" >"$work/log" 2>&1
rc=$?
elapsed=$(( $(date +%s) - start ))
tail -3 "$work/log"
n=$(ls "$work/findings" 2>/dev/null | wc -l)
echo "exit $rc after ${elapsed}s, $n reproducer(s): $(ls "$work/findings" 2>/dev/null | tr '\n' ' ')"
[ "$rc" -ne 0 ] && [ "$n" -gt 0 ]
