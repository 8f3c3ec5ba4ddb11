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
run() { "$bin" campaign --seed 5 --cases "${cases:-100}" --seconds 900 --jobs 1 --no-minimize --quiet --backends "$mutant" "$@"; }

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

# --resume keeps the known deviations (OUT/known.json, named in state.json), even when the file
# given to --known is gone: the resumed campaign counts re-findings apart exactly as the first run.
cp "$tmp/known-all.json" "$tmp/known-moved.json"
cases=50 run --out "$tmp/res" --known "$tmp/known-moved.json" >"$tmp/res1.log" 2>&1
k1=$(python3 -c 'import json; print(json.load(open("'"$tmp"'/res/summary.json"))["known_findings"]["K-1"])')
check "resume: the first run counts K-1 ($k1)" "[ '$k1' -gt 0 ]"
check "resume: the state names its known set" "grep -q '\"known_set\": \"known.json\"' $tmp/res/state.json && [ -f $tmp/res/known.json ]"
rm "$tmp/known-moved.json"
cases=100 run --out "$tmp/res" --resume >"$tmp/res2.log" 2>&1
rc=$?
check "resume without --known: every finding still known, exit 0 (got $rc)" "[ $rc -eq 0 ]"
check "resume without --known: nothing recorded" "[ -z \"\$(ls $tmp/res/findings/ 2>/dev/null)\" ]"
check "resume without --known: says which set it uses" "grep -q 'known     1 known deviation(s) recorded with the campaign' $tmp/res2.log"
k2=$(python3 -c 'import json; s=json.load(open("'"$tmp"'/res/summary.json")); print(s["known_findings"]["K-1"], s["cases"])')
check "resume: K-1 counted further over 100 cases (first $k1, now $k2)" "[ \$(echo $k2 | cut -d' ' -f1) -gt '$k1' ] && [ \$(echo $k2 | cut -d' ' -f2) -eq 100 ]"
f100=$(python3 -c 'import json; print(json.load(open("'"$tmp"'/all/summary.json"))["known_findings"]["K-1"])')
check "resume: the same count as one uninterrupted run of 100 cases ($f100)" "[ \$(echo $k2 | cut -d' ' -f1) -eq '$f100' ]"
"$bin" replay "$tmp/res" >"$tmp/replay-dir.log" 2>&1
check "replay of the campaign directory skips its known.json (no ERROR)" "! grep -q '^ERROR' $tmp/replay-dir.log"
# An explicit --known on resume replaces the recorded set, and says so.
cases=120 run --out "$tmp/res" --resume --known "$tmp/known-fp32.json" >"$tmp/res3.log" 2>&1
check "resume --known: the override is announced" "grep -q 'note: --resume with --known: 1 known deviation(s) from .*known-fp32.json replace the 1 the campaign recorded' $tmp/res3.log"
check "resume --known: the new set is recorded" "grep -q '\"K-2\"' $tmp/res/known.json && ! grep -q '\"K-1\"' $tmp/res/known.json"
check "resume --known: fp32/bf16 findings are new again" "grep -q '\"signatures\": \[\$' $tmp/res/summary.json && ! grep -q '/fp16/' $tmp/res/summary.json"
# A damaged known set is refused by name, not silently dropped.
echo '{' >"$tmp/res/known.json"
cases=130 run --out "$tmp/res" --resume >"$tmp/res4.log" 2>&1
rc=$?
check "resume with a damaged known.json: exit 2 (got $rc)" "[ $rc -eq 2 ] && grep -q 'known.json' $tmp/res4.log && [ \$(wc -l <$tmp/res4.log) -eq 1 ]"
# A state of an older attnfuzz (counts, no set): warned, loudly.
python3 - "$tmp/res/state.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1])); s.pop("known_set"); json.dump(s, open(sys.argv[1], "w"))
PY
cases=130 run --out "$tmp/res" --resume >"$tmp/res5.log" 2>&1
check "resume of an old state with known counts: warned" "grep -q 'WARNING: --resume: .* counted known deviations but does not record which' $tmp/res5.log"

mark "$found" K-3 'sometimes' >"$tmp/known-bad.json"
run --out "$tmp/bad" --known "$tmp/known-bad.json" >"$tmp/bad.log" 2>&1
rc=$?
check "a bad predicate: exit 2 (got $rc)" "[ $rc -eq 2 ]"
check "a bad predicate is named" "grep -q \"'sometimes'\" $tmp/bad.log"
exit $fail
