#!/usr/bin/env bash
# The documented minimal CUDA plugin through the harness on a GPU (label gpu), in `run`,
# `campaign` and `check`; its planted dLSE bug found; a planted device fault pinned on its
# plugin while the campaign goes on. Then the CUDA twin of varlen_plugin.c (varlen_cuda_plugin.cu)
# over ragged batches, its two planted bugs found. Exit 77 (ctest: skipped) with the reason where
# no GPU is usable.   cuda_plugin_test.sh ATTNFUZZ PLUGIN_DIR SOURCE_DIR [devices]
# CUDA_PLUGIN_TEST_ONLY=varlen runs the varlen section alone (about 90 s).
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
# Exit 77 where a run's log says that no GPU (or no gpu build) is there for CUDA plugins.
skip_without_gpu() {
  if grep -q "skipped: .*\(CUDA device\|gpu build\)" "$1"; then
    echo "SKIPPED: $(grep -o 'skipped: .*' "$1" | head -1)"
    exit 77
  fi
}
# On the device machine: every log, summary, report and JUnit file in one archive.
finish() {
  [ -n "${OUT:-}" ] && tar czf "$OUT/cuda-plugin-test.tgz" -C "$tmp" .
  exit $fail
}

# The varlen interface on the GPU (ABI 3: AF_DEVICE_IS_CUDA | AF_TAKES_PACKED | AF_TAKES_PAGED_KV):
# varlen_cuda_plugin.cu, clean and with varlen_plugin.c's planted bugs (every row reads one key
# past what it sees; the forward zeroes O's tail rows). Four hand-written ragged cases through
# `run` (gaps, tails, pages of 1, 4 and 16 rows, slack, misaligned buffers, GQA and MQA,
# Dqk != Dv, softcap, dLSE, empty sequences, causal bottom-right rows that see no key, a key and a
# query split), then campaigns of ragged cases only: the clean plugin with no finding, the read
# past the sequence found. About 90 s.
varlen_section() {
  local vclean="plugin:$plugins/libattnfuzz_plugin_varlen_cuda.so"
  local vread="plugin:$plugins/libattnfuzz_plugin_varlen_cuda_off_by_one.so"
  local vtail="plugin:$plugins/libattnfuzz_plugin_varlen_cuda_writes_tail.so"
  local cases=$tmp/varlen-cases c name log rc
  mkdir -p "$cases"
  cat >"$cases/none-gaps-tail-kv-split-fp32.json" <<'CASE'
{"format": "attnfuzz-case/1", "seed": 7, "dtype": "fp32", "mask": {"kind": "none"},
 "shape": {"batch": 3, "heads_q": 4, "heads_kv": 2, "seq_q": 20, "seq_kv": 24, "head_dim_qk": 16, "head_dim_v": 8},
 "grads": {"d_lse": {"dist": "normal", "sigma": 1.0}},
 "ragged": {"lens_q": [5, 0, 20], "lens_kv": [24, 3, 9], "gap_q": 2, "gap_kv": 3, "tail": 4, "max_slack": 5, "misaligned": true},
 "composition": {"kind": "kv_split", "bounds": [10]}}
CASE
  cat >"$cases/causal-paged-softcap-no-tail-bf16.json" <<'CASE'
{"format": "attnfuzz-case/1", "seed": 11, "dtype": "bf16", "mask": {"kind": "causal", "align": "bottom_right"}, "softcap": 5.0,
 "shape": {"batch": 2, "heads_q": 2, "heads_kv": 2, "seq_q": 33, "seq_kv": 17, "head_dim_qk": 64, "head_dim_v": 64},
 "grads": {"d_lse": {"dist": "normal", "sigma": 1.0}},
 "ragged": {"lens_q": [33, 7], "lens_kv": [17, 10], "gap_q": 3, "page_size": 4, "max_slack": 2}}
CASE
  cat >"$cases/mqa-paged-q-split-fp16.json" <<'CASE'
{"format": "attnfuzz-case/1", "seed": 13, "dtype": "fp16", "mask": {"kind": "none"},
 "shape": {"batch": 4, "heads_q": 3, "heads_kv": 1, "seq_q": 9, "seq_kv": 40, "head_dim_qk": 32, "head_dim_v": 32},
 "grads": {"d_lse": {"dist": "normal", "sigma": 1.0}},
 "ragged": {"lens_q": [9, 1, 4, 0], "lens_kv": [40, 0, 33, 7], "page_size": 16, "tail": 8, "misaligned": true},
 "composition": {"kind": "q_split", "bounds": [4]}}
CASE
  cat >"$cases/causal-pages-of-one-fp32.json" <<'CASE'
{"format": "attnfuzz-case/1", "seed": 17, "dtype": "fp32", "mask": {"kind": "causal", "align": "bottom_right"},
 "shape": {"batch": 2, "heads_q": 4, "heads_kv": 1, "seq_q": 12, "seq_kv": 30, "head_dim_qk": 8, "head_dim_v": 24},
 "grads": {"d_lse": {"dist": "normal", "sigma": 1.0}},
 "ragged": {"lens_q": [12, 3], "lens_kv": [30, 2], "gap_kv": 5, "page_size": 1, "tail": 2}}
CASE
  for c in "$cases"/*.json; do
    name=$(basename "$c" .json)
    log=$tmp/varlen-$name.log
    "$bin" run "$c" --backends "$vclean,$vread,$vtail" >"$log" 2>&1
    rc=$?
    skip_without_gpu "$log"
    grep -E '^plugin\.varlen_cuda |finding|^  plugin\.' "$log" | cut -c1-200
    check "varlen run, $name: exit 1, with the planted bugs' findings (got $rc)" "[ $rc -eq 1 ]"
    check "varlen run, $name: the clean plugin ran, every tensor ok" \
      "[ \$(grep -cE '^plugin\.varlen_cuda +[a-z_]+ +[a-z0-9]+ +(O|LSE|dQ|dK|dV) .* ok ' $log) -ge 5 ] && ! grep -qE '^plugin\.varlen_cuda +.*skipped' $log"
    check "varlen run, $name: no finding of the clean plugin" "! grep -q '^  plugin\.varlen_cuda/' $log"
    check "varlen run, $name: the read past the sequence found" \
      "grep -qE '^  plugin\.varlen_cuda_off_by_one/[a-z_]+/[A-Za-z]+/(nan_inf|mismatch|semantic|contract_violation)/' $log"
    case $name in
      *no-tail*) check "varlen run, $name: no tail, so the tail writer passes" "! grep -q '^  plugin\.varlen_cuda_writes_tail/' $log" ;;
      *) check "varlen run, $name: the write into the tail is out_of_bounds" "grep -q '^  plugin\.varlen_cuda_writes_tail/[a-z_]*/-/out_of_bounds/' $log" ;;
    esac
  done

  # Ragged batches only (--ragged-share 1; a GPU campaign draws none unless asked), small tier.
  "$bin" campaign --ragged-share 1 --tier small --seconds 35 --seed 31 --jobs 4 --devices "$devices" --no-minimize \
    --backends "$vclean" --out "$tmp/vcamp" >"$tmp/vcamp.log" 2>&1
  rc=$?
  grep -v ' elapsed, ' "$tmp/vcamp.log"
  check "varlen campaign, clean plugin: exit 0 (got $rc)" "[ $rc -eq 0 ]"
  check "varlen campaign: the plugin ran cases and none errored" \
    "grep -qE '^coverage  plugin\.varlen_cuda: [1-9][0-9]* ran, [0-9]+ skipped, 0 errored' $tmp/vcamp.log"
  "$bin" campaign --ragged-share 1 --tier small --seconds 15 --seed 31 --jobs 4 --devices "$devices" --no-minimize \
    --backends "$vread" --out "$tmp/vcamp-bug" >"$tmp/vcamp-bug.log" 2>&1
  rc=$?
  grep -v ' elapsed, ' "$tmp/vcamp-bug.log" | head -40
  check "varlen campaign, planted read past the sequence: exit 1 (got $rc)" "[ $rc -eq 1 ]"
  check "varlen campaign: findings of the planted bug, each of a class it causes" \
    "grep -q '^  plugin\.varlen_cuda_off_by_one/' $tmp/vcamp-bug.log && ! grep -E '^  plugin\.' $tmp/vcamp-bug.log | grep -qvE '/(nan_inf|mismatch|semantic|contract_violation)/'"
}

if [ "${CUDA_PLUGIN_TEST_ONLY:-}" = varlen ]; then
  varlen_section
  finish
fi

"$bin" run "$seed" --backends "$cuda" >"$tmp/run" 2>&1
rc=$?
skip_without_gpu "$tmp/run"
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

varlen_section
finish
