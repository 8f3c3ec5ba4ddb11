#!/usr/bin/env bash
# End-to-end checks of the CLI: the bundled cases print the table; bad input exits
# with 2 and one line naming the problem, without allocating anything large.
set -u
bin=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() { if ! eval "$2"; then echo "FAIL: $1"; fail=1; else echo "ok: $1"; fi; }

"$bin" run "$src/corpus/seed-flex-lse-merge.json" >"$tmp/out" 2>"$tmp/err"
check "seed case exits 0" "[ $? -eq 0 ]"
for t in O LSE dQ dK dV; do
  check "seed table has $t rows for the merge" "grep -Eq '^torch.math +q_split.* $t ' $tmp/out"
done

bad() {  # name, file content, expected text in the message
  printf '%s' "$2" >"$tmp/case.json"
  /usr/bin/time -f '%M' -o "$tmp/rss" "$bin" run "$tmp/case.json" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  check "$1: exit code 2 (got $rc)" "[ $rc -eq 2 ]"
  check "$1: one line on stderr" "[ \$(wc -l <$tmp/err) -eq 1 ]"
  check "$1: names '$3'" "grep -q -- '$3' $tmp/err"
  check "$1: peak RSS under 400 MB (got $(cat $tmp/rss) kB)" "[ \$(tail -1 $tmp/rss) -lt 400000 ]"
  cat "$tmp/err"
}
bad "malformed JSON" '{"format": "attnfuzz-case/1", "seed": 1, "shape": {' 'malformed JSON'
bad "Hq % Hkv != 0" '{"format":"attnfuzz-case/1","seed":1,"shape":{"heads_q":4,"heads_kv":3,"seq_q":8,"head_dim_qk":8}}' 'shape.heads_kv'
bad "10^12 elements" '{"format":"attnfuzz-case/1","seed":1,"shape":{"batch":1000,"heads_q":1000,"seq_q":1000,"head_dim_qk":1000}}' 'memory budget'
"$bin" run "$tmp/does-not-exist.json" >/dev/null 2>"$tmp/err"
check "missing file: exit 2" "[ $? -eq 2 ]"
"$bin" run "$src/corpus/seed-flex-lse-merge.json" --backends reference,nosuch >/dev/null 2>"$tmp/err"
check "unknown backend: exit 2" "[ $? -eq 2 ] && grep -q nosuch $tmp/err"
# A plugin built for ABI version 1 still loads and runs (version 2 only appended mask_device).
"$bin" run "$src/corpus/seed-flex-lse-merge.json" --backends "plugin:$(dirname "$bin")/plugins/libattnfuzz_plugin_minimal_v1.so" >"$tmp/out" 2>"$tmp/err"
check "ABI version 1 plugin: runs, exit 0 (got $?)" "[ $? -eq 0 ] && grep -Eq '^plugin.minimal +.* dK .* ok( |\$)' $tmp/out"
# A fuzzer artifact imported, recorded, minimized and re-run: the same signature, smaller.
mutants=$(dirname "$bin")/mutants
if [ -f "$mutants/libattnfuzz_mutant_ignores_dlse.so" ]; then
  plugin="plugin:$mutants/libattnfuzz_mutant_ignores_dlse.so"
  # fp32, dLSE normal, B = H = 1, Sq = Skv = 4, D = 8; then every tensor its own layout, packed QKV and dK/dV.
  printf '\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x03\x00\x03\x00\x07\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x01\x03\x01\x05\x01\x02\x02\x03\x01\x05\x01\x02\x03\x03\x01\x05\x01\x02\x04\x03\x01\x05\x01\x02\x05\x03\x01\x05\x01\x02\x00\x03\x01\x05\x01\x02\x01\x03\x01\x05\x01\x02\x02\x03\x01\x05\x01\x02\x03\x03\x01\x05\x01\x02\x01\x02' >"$tmp/crash-1"
  "$bin" import "$tmp/crash-1" --backends "$plugin" >"$tmp/out" 2>&1
  check "import finds the dLSE mutant (exit 1)" "[ $? -eq 1 ] && grep -q 'mismatch' $tmp/out"
  check "import decodes per-tensor layouts" "grep -q '\"layouts\"' $tmp/crash-1.json && grep -q '\"inputs\": \"qkv\"' $tmp/crash-1.json"
  "$bin" minimize "$tmp/crash-1.json" --out "$tmp/min.json" >"$tmp/out" 2>&1
  check "minimize exits 0 and reports its steps" "[ $? -eq 0 ] && grep -q 'shrunk' $tmp/out"
  cat "$tmp/out"
  "$bin" run "$tmp/min.json" --backends "$plugin" >"$tmp/out" 2>&1
  check "the minimized reproducer still diverges (exit 1)" "[ $? -eq 1 ]"
  check "the minimized reproducer is back in the default layout" "grep -q '\"layout\"' $tmp/min.json && ! grep -q '\"layouts\"' $tmp/min.json"
  sig=$(grep -o '"key": "[^"]*"' "$tmp/min.json" | cut -d'"' -f4)
  check "with the same signature ($sig)" "grep -qF -- '$sig' $tmp/out"
  "$bin" run "$src/corpus/seed-flex-lse-merge.json" --backends "$plugin" --record "$tmp/rec" >/dev/null 2>&1
  check "run --record writes one reproducer per signature" "[ \$(ls $tmp/rec | wc -l) -eq 2 ]"
fi
exit $fail
