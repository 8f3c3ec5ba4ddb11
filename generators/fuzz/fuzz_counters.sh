#!/usr/bin/env bash
# The error-guided counters change what libFuzzer keeps: the same number of runs with the
# same seed, with and without them, must leave corpora of different sizes (with counters,
# inputs that move an error ratio into a new bucket are kept too).
set -u
target=$1 plugin=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
run() {  # name, extra env
  mkdir -p "$work/$1"
  env ATTNFUZZ_FUZZ_BACKENDS="plugin:$plugin" ATTNFUZZ_FUZZ_OUT="$work/f" ATTNFUZZ_FUZZ_KEEP_GOING=1 $2 \
    "$target" -runs=3000 -seed=7 "$work/$1" >"$work/$1.log" 2>&1
  ls "$work/$1" | wc -l
}
with=$(run with "")
without=$(run without "ATTNFUZZ_FUZZ_NO_COUNTERS=1")
echo "corpus units kept after 3000 runs: with counters $with, without $without"
[ "$with" -gt "$without" ]
