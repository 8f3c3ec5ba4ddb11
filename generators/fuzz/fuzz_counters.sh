#!/usr/bin/env bash
# The extra counters (error buckets and feature-map cells) change what libFuzzer keeps: the same
# number of runs with the same seeds, with and without them, must leave larger corpora with them
# (inputs that move an error ratio into a new bucket, or that a backend is judged on in a new cell,
# are kept too). Summed over three seeds: one seed's corpus sizes move by a few units either way
# with any change to the counters' layout (seed 7 alone kept 36 with and 43 without once the map
# grew a side feature; seeds 8 and 9 kept 48/37 and 42/33).
#   fuzz_counters.sh TARGET BACKENDS [RUNS]      (BACKENDS: ATTNFUZZ_FUZZ_BACKENDS; RUNS: 3000)
set -u
target=$1 backends=$2 runs=${3:-3000}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
run() {  # name, extra env: the units kept over seeds 7, 8 and 9
  local total=0 seed
  for seed in 7 8 9; do
    mkdir -p "$work/$1-$seed"
    env ATTNFUZZ_FUZZ_BACKENDS="$backends" ATTNFUZZ_FUZZ_OUT="$work/f" ATTNFUZZ_FUZZ_KEEP_GOING=1 $2 \
      "$target" -runs="$runs" -seed=$seed "$work/$1-$seed" >"$work/$1-$seed.log" 2>&1
    total=$((total + $(ls "$work/$1-$seed" | wc -l)))
  done
  echo "$total"
}
with=$(run with "")
without=$(run without "ATTNFUZZ_FUZZ_NO_COUNTERS=1")
echo "corpus units kept after $runs runs of seeds 7, 8, 9: with counters $with, without $without"
[ "$with" -gt "$without" ]
