#!/usr/bin/env bash
# A declared fp16 path that computes in bf16, through the pipeline (docs/verdicts.md, "Precision
# fingerprints", "A declared fp16 path that computes in bf16"). The zoo's fp16_computes_bf16
# (tests/mutants/README.md) declares fp16 and rounds its fp16 inputs and P, dS to bf16 (outputs
# stored in fp16); fp32 and bf16 cases compute as the zoo's ok. The fp16 ladder has a bf16 rung
# (fp32, fp16, bf16), so the class is `contract_violation` ("computes like bf16").
# Checked: a campaign raises it on fp16 cases only, for every tensor, minimizes every finding, and
# replay re-triggers the minimized reproducers; among them, tensors that pass every block of the
# rule and fail only because their RMS error lies a band (8x) beyond the fp16 rung's, the
# coarsest contract an fp16 kernel may hold, with the whole-tensor ratio above 1 (O = V at
# Sq = Skv = 1, where the declared computation is exact); replay re-triggers one, and the correct
# kernel passes it. The campaign over the zoo's ok passes.
set -u
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() { if ! eval "$2"; then echo "FAIL: $1"; fail=1; else echo "ok: $1"; fi; }
mutants=$(dirname "$bin")/mutants
bad="plugin:$mutants/libattnfuzz_mutant_fp16_computes_bf16.so"
good="plugin:$mutants/libattnfuzz_mutant_ok.so"

"$bin" campaign --seed 3 --cases 40 --seconds 600 --jobs 1 --minimize-seconds 120 --quiet \
  --backends "$bad" --out "$tmp/c" >"$tmp/c.log" 2>&1
rc=$?
check "the campaign finds the bf16 computation (exit 1, got $rc)" "[ $rc -eq 1 ]"
check "its findings: contract_violation (computes like bf16) on fp16 cases only, every tensor; every one minimized to Sq, Skv <= 8" \
  "python3 - '$tmp/c/findings' <<'PY'
import glob, json, sys
full = [p for p in glob.glob(sys.argv[1] + '/*.json') if not p.endswith('.min.json')]
if not full: sys.exit('no finding')
tensors = set()
for p in full:
    j = json.load(open(p))
    sig = j['finding']['signature']
    if sig['class'] != 'contract_violation' or sig['dtype'] != 'fp16' or sig['backend'] != 'plugin.mutant_fp16_computes_bf16':
        sys.exit(p + ': ' + j['finding']['key'])
    if not j['finding']['detail'].startswith('declares fp16, computes like bf16'):
        sys.exit(p + ': ' + j['finding']['detail'])
    tensors.add(sig['tensor'])
    m = json.load(open(p[:-len('.json')] + '.min.json'))
    if not m.get('minimized_from') or m['finding']['signature'] != sig:
        sys.exit(p + ': not minimized with its signature')
    if max(m['case']['shape'][k] for k in ('seq_q', 'seq_kv')) > 8:
        sys.exit(p + ': minimized to ' + json.dumps(m['case']['shape']))
if tensors != {'O', 'LSE', 'dQ', 'dK', 'dV'}: sys.exit('tensors: ' + ', '.join(sorted(tensors)))
PY"
mins=$(ls "$tmp"/c/findings/*.min.json 2>/dev/null)
if [ -n "$mins" ]; then
  # shellcheck disable=SC2086
  "$bin" replay $mins >"$tmp/r.log" 2>&1
  rc=$?
  n=$(echo "$mins" | wc -l)
  check "replay re-triggers all $n minimized reproducers (exit 1, got $rc)" \
    "[ $rc -eq 1 ] && grep -q '^$n still failing, 0 fixed, 0 untested, 0 errors' $tmp/r.log"
fi

# The band rule: a minimized reproducer whose every block passes (worst ratio <= its limit) and
# that fails only because its error lies 8x beyond the fp16 rung's.
only=$(python3 - "$tmp/c/findings" <<'PY'
import glob, json, sys
for p in sorted(glob.glob(sys.argv[1] + '/*.min.json')):
    f = json.load(open(p))['finding']
    if f['metrics']['worst_ratio'] <= f['metrics']['worst_limit']:
        print(p)
        break
PY
)
check "the band rule alone fails a tensor of a minimized reproducer" "[ -n '$only' ]"
if [ -n "$only" ]; then
  "$bin" replay "$only" >"$tmp/ro.log" 2>&1
  rc=$?
  check "replay re-triggers it (exit 1, got $rc)" "[ $rc -eq 1 ] && grep -q '^FAILING' $tmp/ro.log"
  python3 -c "import json,sys; json.dump(json.load(open(sys.argv[1]))['case'], open(sys.argv[2], 'w'))" "$only" "$tmp/only.json"
  "$bin" run "$tmp/only.json" --backends "$good" >"$tmp/ok1.log" 2>&1
  rc=$?
  check "the correct kernel passes that case (exit 0, got $rc)" "[ $rc -eq 0 ]"
fi

# The same campaign over the correct kernel: no finding.
"$bin" campaign --seed 3 --cases 40 --seconds 600 --jobs 1 --no-minimize --quiet \
  --backends "$good" --out "$tmp/ok" >"$tmp/ok.log" 2>&1
rc=$?
check "the same campaign over the zoo's ok passes (exit 0, got $rc)" "[ $rc -eq 0 ]"

if [ $fail -ne 0 ]; then
  for f in "$tmp"/*.log; do echo "--- $f"; tail -20 "$f"; done
fi
exit $fail
