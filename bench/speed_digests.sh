#!/usr/bin/env bash
# The digests of every verdict over four fixed case streams (bench_case_rate): a speed change
# must print the same four lines before and after (docs/gpu.md, "Harness speed").
#   bench/speed_digests.sh [build dir, default build/cpu] [bench_case_rate options...]
# (--breaking-share P: a share P of the cases with values that break kernels; the default, 0,
# is the streams as they were before those values existed.)
# The streams are toy and small cases, below the size from which host loops run over threads
# (harness/parallel.h); ATTNFUZZ_PARALLEL_MIN_ELEMENTS=1 bench/speed_digests.sh sends them
# through the threaded paths, and must print the same four lines too.
set -euo pipefail
b=${1:-build/cpu}; shift || true
extra=("$@")
m=$b/mutants
run() { "$b/bench/bench_case_rate" "$@" "${extra[@]}" | head -1 | sed -E "s/: [0-9.]* cases\/s, [0-9.]* ms a case( \(CPU [0-9.]*\))?//"; }
run --tier toy --cases 1000 --seed 7 --backends torch.math
run --tier toy --cases 400 --seed 3 --backends plugin:$m/libattnfuzz_mutant_tf32_backward.so,plugin:$m/libattnfuzz_mutant_last_tile_unmasked.so,plugin:$m/libattnfuzz_mutant_ok.so
run --tier toy --cases 300 --seed 5 --backends plugin:$m/libattnfuzz_mutant_ignores_dlse.so,plugin:$m/libattnfuzz_mutant_gqa_backward_map.so,plugin:$m/libattnfuzz_mutant_masked_rows_nan.so,plugin:$m/libattnfuzz_mutant_causal_align.so
run --tier small --cases 60 --seed 11 --backends torch.sdpa.cpu_flash,plugin:$m/libattnfuzz_mutant_ok.so
