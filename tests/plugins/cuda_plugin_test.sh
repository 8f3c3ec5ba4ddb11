#!/usr/bin/env bash
# The documented minimal CUDA plugin through the harness on a GPU (label gpu), in `run`,
# `campaign` and `check`; its planted dLSE bug found; a planted device fault pinned on its
# plugin while the campaign goes on. Exit 77 (ctest: skipped) with the reason where no GPU
# is usable.   cuda_plugin_test.sh ATTNFUZZ PLUGIN_DIR SOURCE_DIR [devices]
set -u
bin=$1 plugins=$2 src=$3 devices=${4:-0}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() { if ! eval "$2"; then echo "FAIL: $1"; fail=1; else echo "ok: $1"; fi; }
cuda="plugin:$plugins/libattnfuzz_plugin_minimal_cuda.so"
bug="plugin:$plugins/libattnfuzz_plugin_minimal_cuda_ignores_dlse.so"
faults="plugin:$plugins/libattnfuzz_plugin_minimal_cuda_faults.so"
seed=$src/corpus/seed-flex-lse-merge.json gqa=$src/corpus/gqa-bf16-kv-split.json

"$bin" run "$seed" --backends "$cuda" >"$tmp/run" 2>&1
rc=$?
if grep -q "skipped: .*\(CUDA device\|gpu build\)" "$tmp/run"; then
  echo "SKIPPED: $(grep -o 'skipped: .*' "$tmp/run" | head -1)"
  exit 77
fi
cat "$tmp/run"
check "run, seed case: exit 0 (got $rc)" "[ $rc -eq 0 ]"
for t in O LSE dQ dK dV; do
  check "run, seed case: $t ok single and through the merge" \
    "[ \$(grep -cE '^plugin.minimal_cuda +.* $t .* ok( |\$)' $tmp/run) -eq 2 ]"
done
"$bin" run "$gqa" --backends "$cuda" >"$tmp/run2" 2>&1
check "run, GQA bf16 key split: exit 0 (got $?)" "[ $? -eq 0 ]"
"$bin" run "$seed" --backends "$bug" >"$tmp/run3" 2>&1
rc=$?
grep -A20 '^[0-9]* finding' "$tmp/run3"
check "run, planted dLSE bug: exit 1 (got $rc)" "[ $rc -eq 1 ]"
check "run, planted dLSE bug: dQ mismatch through the merge" "grep -q 'plugin.minimal_cuda_ignores_dlse/merged/dQ/mismatch' $tmp/run3"

# The small tier: a GPU campaign's default, the real tier, judges about one case a second.
"$bin" campaign --cases 300 --seconds 600 --tier small --jobs 4 --devices "$devices" --backends "$cuda" --out "$tmp/camp" >"$tmp/camp.log" 2>&1
rc=$?
grep -v ' elapsed, ' "$tmp/camp.log"
check "campaign, minimal CUDA plugin: exit 0 (got $rc)" "[ $rc -eq 0 ]"
check "campaign: the plugin ran cases and none was skipped or errored" "grep -q '^coverage  plugin.minimal_cuda: 300 ran, 0 skipped, 0 errored' $tmp/camp.log"

"$bin" check --seed 11 --cases 150 --tier small --devices "$devices" --backends "$bug" --out "$tmp/chk" --junit "$tmp/chk.xml" >"$tmp/chk.log" 2>&1
rc=$?
grep -v ' elapsed, ' "$tmp/chk.log"
check "check, planted dLSE bug: exit 1 (got $rc)" "[ $rc -eq 1 ]"
check "check JUnit: a dQ or dK divergence of the mutant" "grep -q 'failure message=\"divergence: plugin.minimal_cuda_ignores_dlse/[a-z_]*/d[QK]/' $tmp/chk.xml"
"$bin" check --seed 11 --cases 150 --tier small --devices "$devices" --backends "$cuda" --out "$tmp/chk2" --junit "$tmp/chk2.xml" >"$tmp/chk2.log" 2>&1
rc=$?
check "check, minimal CUDA plugin: exit 0 (got $rc)" "[ $rc -eq 0 ]"

"$bin" campaign --cases 100 --tier small --jobs 2 --devices "$devices" --no-minimize --backends "$faults" --out "$tmp/fault" >"$tmp/fault.log" 2>&1
rc=$?
grep -v ' elapsed, ' "$tmp/fault.log"
check "campaign, planted device fault: exit 1 (got $rc)" "[ $rc -eq 1 ]"
check "the fault is a finding of the faulting plugin" "grep -qE '^  plugin.minimal_cuda_faults/single/-/(backend_error|crash)/' $tmp/fault.log"
check "and the campaign went on: cases ran after it" "grep -qE '^coverage  plugin.minimal_cuda_faults: [1-9][0-9]* ran, 0 skipped, [1-9][0-9]* errored' $tmp/fault.log"
# On the device machine: every log, summary, report and JUnit file in one archive.
[ -n "${OUT:-}" ] && tar czf "$OUT/cuda-plugin-test.tgz" -C "$tmp" .
exit $fail
