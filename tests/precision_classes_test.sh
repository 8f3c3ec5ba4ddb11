#!/usr/bin/env bash
# The precision classes outside `run` (docs/verdicts.md, "Precision fingerprints"): every tensor
# is fingerprinted in campaigns, check, minimize and replay, so `consistency` (two passing
# backends of one contract at different precisions) is found by a campaign and by check,
# minimized, and re-triggered by replay. The pair is the zoo's
# tf32_declared_strict and tf32_declared_tf32_backward (tests/mutants/README.md): both declare
# TF32 for fp32 and each alone passes; one computes in fp32, the other its backward in TF32.
set -u
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() { if ! eval "$2"; then echo "FAIL: $1"; fail=1; else echo "ok: $1"; fi; }
mutants=$(dirname "$bin")/mutants
strict="plugin:$mutants/libattnfuzz_mutant_tf32_declared_strict.so"
loose="plugin:$mutants/libattnfuzz_mutant_tf32_declared_tf32_backward.so"

"$bin" campaign --seed 3 --cases 40 --seconds 600 --jobs 1 --minimize-seconds 120 --quiet \
  --backends "$strict,$loose" --out "$tmp/c" >"$tmp/c.log" 2>&1
rc=$?
check "the campaign finds the pair (exit 1, got $rc)" "[ $rc -eq 1 ]"
found=$(ls "$tmp"/c/findings/*.json 2>/dev/null | grep -v '\.min\.json$' | xargs -r grep -l '"consistency"' | head -1)
check "a consistency finding was recorded" "[ -n '$found' ]"
if [ -n "$found" ]; then
  check "it blames the pair and only the pair: no other class" \
    "python3 - '$tmp/c/findings' <<'PY'
import glob, json, sys
classes = set()
for p in glob.glob(sys.argv[1] + '/*.json'):
    sig = json.load(open(p))['finding']['signature']
    classes.add(sig['class'])
    if sig['class'] == 'consistency' and sig['backend'] != 'plugin.mutant_tf32_declared_strict~plugin.mutant_tf32_declared_tf32_backward':
        sys.exit('blames ' + sig['backend'])
sys.exit(0 if classes == {'consistency'} else 'classes: ' + ', '.join(sorted(classes)))
PY"
  check "the reproducer names both backends" \
    "python3 -c 'import json,sys; j=json.load(open(\"$found\")); sys.exit(0 if len(j[\"backends\"]) == 2 else 1)'"
  min=${found%.json}.min.json
  check "the campaign minimized it" "python3 -c 'import json,sys; j=json.load(open(\"$min\")); sys.exit(0 if j.get(\"minimized_from\") and j[\"case\"][\"shape\"].get(\"seq_q\", 1) <= 16 else 1)'"
  "$bin" replay "$min" >"$tmp/rm.log" 2>&1
  rc=$?
  check "replay re-triggers the campaign's minimized reproducer (exit 1, got $rc)" "[ $rc -eq 1 ] && grep -q '^FAILING' $tmp/rm.log"
  "$bin" replay "$found" >"$tmp/r.log" 2>&1
  rc=$?
  check "replay re-triggers it (exit 1, got $rc)" "[ $rc -eq 1 ] && grep -q '^FAILING' $tmp/r.log"
  "$bin" minimize --out "$tmp/m.json" "$found" >"$tmp/m.log" 2>&1
  rc=$?
  check "minimize keeps its signature (exit 0, got $rc)" "[ $rc -eq 0 ] && [ -f $tmp/m.json ]"
  "$bin" replay "$tmp/m.json" >"$tmp/r2.log" 2>&1
  rc=$?
  check "the minimized reproducer re-triggers it (exit 1, got $rc)" "[ $rc -eq 1 ] && grep -q '^FAILING' $tmp/r2.log"
  # Replayed with the strict one alone, there is no pair: the finding cannot be judged.
  "$bin" replay --backends "$strict" "$found" >"$tmp/r3.log" 2>&1
  rc=$?
  check "replay without the pair's other half: not reported fixed (got $rc)" "[ $rc -ne 0 ] && ! grep -q '^FIXED' $tmp/r3.log"
fi

# check: the gate raises the same class on the same pair.
"$bin" check --seed 3 --cases 40 --backends "$strict,$loose" --out "$tmp/k" >"$tmp/k.log" 2>&1
rc=$?
check "check fails on the pair (exit 1, got $rc)" "[ $rc -eq 1 ] && grep -l '\"consistency\"' $tmp/k/findings/*.json >/dev/null 2>&1"

# Each alone is within its contract: no finding.
"$bin" campaign --seed 3 --cases 20 --seconds 600 --jobs 1 --no-minimize --quiet \
  --backends "$loose" --out "$tmp/alone" >"$tmp/alone.log" 2>&1
rc=$?
check "the TF32 one alone passes (exit 0, got $rc)" "[ $rc -eq 0 ]"

if [ $fail -ne 0 ]; then
  for f in "$tmp"/*.log; do echo "--- $f"; tail -20 "$f"; done
fi
exit $fail
