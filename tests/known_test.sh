#!/usr/bin/env bash
# Known deviations end to end (docs/campaigns.md, "Known deviations"): a campaign's finding,
# marked known, is counted and not recorded by the next campaign of the same seed; a predicate
# narrows what it covers; `replay --known` names it still failing; `check --known` passes and
# shows it; a bad predicate is refused by name.
set -u
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() { if ! eval "$2"; then echo "FAIL: $1"; fail=1; else echo "ok: $1"; fi; }
mutant="plugin:$(dirname "$bin")/mutants/libattnfuzz_mutant_causal_align.so"
run() { "$bin" campaign --seed 5 --cases 100 --seconds 900 --jobs 1 --no-minimize --quiet --backends "$mutant" "$@"; }

run --out "$tmp/first" >"$tmp/first.log" 2>&1
check "the mutant is found (exit 1, got $?)" "[ $? -eq 1 ]"
found=$(ls "$tmp"/first/findings/*.json | head -1)
check "a finding was recorded" "[ -f '$found' ]"

mark() {  # reproducer, id, when -> a known deviation covering every bucket of the mutant
  python3 - "$1" "$2" "$3" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
j["known"] = {"id": sys.argv[2], "covers": {"backend": "*", "composition": "*", "tensor": "*", "class": "*"}, "when": sys.argv[3]}
print(json.dumps(j, indent=2))
PY
}
mark "$found" K-1 always >"$tmp/known-all.json"
run --out "$tmp/all" --known "$tmp/known-all.json" >"$tmp/all.log" 2>&1
rc=$?
check "every finding known: exit 0 (got $rc)" "[ $rc -eq 0 ]"
check "no finding recorded" "[ -z \"\$(ls $tmp/all/findings/ 2>/dev/null)\" ]"
check "stdout counts the known findings" "grep -Eq '^known +[1-9][0-9]* finding\(s\) covered by 1 known deviation' $tmp/all.log"
"$bin" report "$tmp/all" >/dev/null 2>&1
check "the report shows the known deviation" "grep -q 'known K-1' $tmp/all/report.html"
check "summary.json counts K-1" "python3 -c 'import json,sys; s=json.load(open(\"$tmp/all/summary.json\")); sys.exit(0 if s[\"known_findings\"][\"K-1\"] > 0 and s[\"signatures\"] == [] else 1)'"

# A predicate: only fp16 cases are known; findings on fp32/bf16 cases are still new.
mark "$found" K-2 'dtype(fp16)' >"$tmp/known-fp32.json"
run --out "$tmp/fp32" --known "$tmp/known-fp32.json" >"$tmp/fp32.log" 2>&1
check "fp16 known: findings remain (exit 1, got $?)" "[ $? -eq 1 ]"
check "fp16 known: no recorded finding is fp16" "! grep -q '/fp16/' $tmp/fp32/summary.json"
check "fp16 known: some were known" "grep -q '\"K-2\"' $tmp/fp32/summary.json"

"$bin" replay --known "$tmp/known-all.json" >"$tmp/replay.log" 2>&1
rc=$?
check "replay --known: exit 0 (got $rc)" "[ $rc -eq 0 ]"
check "replay --known names K-1 still failing" "grep -q '^FAILING *known K-1' $tmp/replay.log"
check "replay --known sums up" "grep -q 'known deviations: 1 still failing, 0 fixed' $tmp/replay.log"

"$bin" check --seed 5 --cases 40 --backends "$mutant" --out "$tmp/check" --known "$tmp/known-all.json" >"$tmp/check.log" 2>&1
rc=$?
check "check --known: exit 0 (got $rc)" "[ $rc -eq 0 ]"
check "check's JUnit shows the known deviation" "grep -q 'known K-1' $tmp/check/junit.xml"

mark "$found" K-3 'sometimes' >"$tmp/known-bad.json"
run --out "$tmp/bad" --known "$tmp/known-bad.json" >"$tmp/bad.log" 2>&1
rc=$?
check "a bad predicate: exit 2 (got $rc)" "[ $rc -eq 2 ]"
check "a bad predicate is named" "grep -q \"'sometimes'\" $tmp/bad.log"
exit $fail
