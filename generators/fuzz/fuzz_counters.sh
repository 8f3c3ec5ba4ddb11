#!/usr/bin/env bash
# The extra counters (error buckets and feature-map cells) change what libFuzzer keeps: the same
# number of runs with the same seed, with and without them, must leave corpora of different sizes
# (with counters, inputs that move an error ratio into a new bucket, or that a backend is judged on
# in a new cell, are kept too).
#   fuzz_counters.sh TARGET BACKENDS [RUNS]      (BACKENDS: ATTNFUZZ_FUZZ_BACKENDS; RUNS: 3000)
set -u
target=$1 backends=$2 runs=${3:-3000}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
run() {  # name, extra env
  mkdir -p "$work/$1"
  env ATTNFUZZ_FUZZ_BACKENDS="$backends" ATTNFUZZ_FUZZ_OUT="$work/f" ATTNFUZZ_FUZZ_KEEP_GOING=1 $2 \
    "$target" -runs="$runs" -seed=7 "$work/$1" >"$work/$1.log" 2>&1
  ls "$work/$1" | wc -l
}
with=$(run with "")
without=$(run without "ATTNFUZZ_FUZZ_NO_COUNTERS=1")
echo "corpus units kept after $runs runs: with counters $with, without $without"
[ "$with" -gt "$without" ]
