#!/usr/bin/env bash
# Guided campaigns (docs/campaigns.md, "Guided campaigns"): the zoo's tall_causal_tile_noise
# (tests/mutants/README.md) errs 4x the rounding of its dtype only where a bottom-right causal
# problem has Sq > Skv and Skv % 16 == 0, and 1x (a near finding) where Skv is anything else.
# Within the same case budget and seed, the guided campaign (the default --mutation-share) finds
# it and the blind one (--mutation-share 0) does not; the guided corpus is saved, read back by
# --resume and unioned by merge; summary.json and the closing lines count the mutants.
# The budget and seed: docs/campaigns.md gives the cases each side needed on several seeds.
set -u
bin=$1
seed=${2:-1}
cases=${3:-600}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() { if ! eval "$2"; then echo "FAIL: $1"; fail=1; else echo "ok: $1"; fi; }
json() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }
mutant="plugin:$(dirname "$bin")/mutants/libattnfuzz_mutant_tall_causal_tile_noise.so"
# Sq, Skv <= 40 and head dims <= 32 keep a case at about 10 ms here; one worker keeps the
# guided stream a function of the seed.
run() {
  "$bin" campaign --seed "$seed" --cases "$1" --seconds 600 --jobs 1 --no-minimize --max-seq 40 --max-dim 32 --backends "$mutant" \
    --out "$2" "${@:3}"
}

for share in -0.1 1.5; do
  run 5 "$tmp/bad" --mutation-share $share >"$tmp/out" 2>"$tmp/err"
  rc=$?
  check "--mutation-share $share: exit 2, one line, nothing written (got $rc)" "[ $rc -eq 2 ] && [ \$(wc -l <$tmp/err) -eq 1 ] && [ ! -e $tmp/bad ]"
done

run "$cases" "$tmp/blind" --mutation-share 0 >"$tmp/blind.log" 2>&1
rc=$?
check "the blind campaign misses the bug in $cases cases (exit 0, got $rc)" "[ $rc -eq 0 ]"
check "a blind campaign writes no corpus and no guided counts" \
  "[ ! -e $tmp/blind/corpus.json ] && [ \"\$(json $tmp/blind/summary.json \"'guided' in d\")\" = False ] && ! grep -q '^guided' $tmp/blind.log"

run "$cases" "$tmp/guided" >"$tmp/guided.log" 2>&1
rc=$?
check "the guided campaign finds it in $cases cases (exit 1, got $rc)" "[ $rc -eq 1 ]"
check "in the narrow region: bottom-right causal, Sq > Skv, Skv % 16 == 0, on O" \
  "python3 - '$tmp/guided/findings' <<'PY'
import glob, json, sys
found = [json.load(open(p)) for p in glob.glob(sys.argv[1] + '/*.json')]
ok = [f for f in found if f['finding']['signature']['tensor'] == 'O' and f['case']['mask'].get('align') == 'bottom_right'
      and f['case']['shape']['seq_q'] > f['case']['shape']['seq_kv'] and f['case']['shape']['seq_kv'] % 16 == 0]
print('first finding at case', min(f['case_index'] for f in found) if found else None)
sys.exit(0 if ok else 1)
PY"
check "summary.json counts the mutants and their raises" \
  "[ \"\$(json $tmp/guided/summary.json \"d['guided']['mutants'] > 0 and d['guided']['raised'] > 0 and d['guided']['mutation_share'] == 0.3\")\" = True ]"
check "the closing lines say it" "grep -q '^guided    [1-9][0-9]* mutant(s) of the corpus (share 0.3)' $tmp/guided.log"
check "the corpus is saved with its cases" \
  "[ \"\$(json $tmp/guided/corpus.json \"d['format'] == 'attnfuzz-corpus/1' and len(d['slots']) > 0 and all(0 < e['ratio'] <= 1 for s in d['slots'] for e in s['entries'])\")\" = True ]"

# --resume reads the corpus back: the mutants counted go on from the first part's.
half=$((cases / 2))
run "$half" "$tmp/resumed" >"$tmp/r1.log" 2>&1
first=$(json "$tmp/resumed/summary.json" "d['guided']['mutants']")
run "$cases" "$tmp/resumed" --resume >"$tmp/r2.log" 2>&1
check "--resume continues the corpus and its counts ($first mutants before)" \
  "[ \"\$(json $tmp/resumed/summary.json \"d['guided']['mutants'] > $first and d['cases'] == $cases\")\" = True ]"
echo '{"format": "attnfuzz-corpus/1", "slots": 3}' >"$tmp/resumed/corpus.json"
run $((cases + 2)) "$tmp/resumed" --resume >"$tmp/r3.log" 2>&1
rc=$?
check "--resume refuses a damaged corpus (exit 2, got $rc)" "[ $rc -eq 2 ] && grep -q 'corpus.json' $tmp/r3.log"

# merge unions the shards' corpora, keeping every slot's best, and sums their counts.
"$bin" merge --out "$tmp/merged" "$tmp/blind" "$tmp/guided" >"$tmp/merge.log" 2>&1
check "merge writes the guided shard's corpus and counts" \
  "[ \"\$(json $tmp/merged/summary.json \"d['guided']['mutants']\")\" = \"\$(json $tmp/guided/summary.json \"d['guided']['mutants']\")\" ] && [ -f $tmp/merged/corpus.json ]"

if [ $fail -ne 0 ]; then
  for f in "$tmp"/*.log; do echo "--- $f"; tail -20 "$f"; done
fi
exit $fail
