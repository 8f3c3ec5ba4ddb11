#!/usr/bin/env bash
# Campaigns and checks say what they really tested (issue 15):
# - a backend that cannot be loaded or is unknown: `campaign` and `check` exit 2 with one
#   line on stderr, before any case runs (nothing written);
# - a backend that declines every case: the campaign warns loudly with the reason and
#   records ran/skipped/errored per backend in summary.json, report.html and the progress
#   line; `check` fails with exit 4 and a failing JUnit test; `run` exits 4 when every
#   backend was skipped;
# - the feature map: cells judged per backend, check --min-per-cell.
set -u
bin=$1
src=$2
plugins=$(dirname "$bin")/plugins
mutants=$(dirname "$bin")/mutants
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() { if ! eval "$2"; then echo "FAIL: $1"; fail=1; else echo "ok: $1"; fi; }

printf 'not a shared library\n' >"$tmp/not-elf.so"
ok="plugin:$mutants/libattnfuzz_mutant_ok.so"
declines="plugin:$plugins/libattnfuzz_plugin_declines_all.so"

# 1. Unloadable or unknown backends: exit 2, one line, before any case.
bad() {  # name, backend, expected text
  for cmd in campaign check; do
    local t0=$(date +%s) budget="--cases 50"
    [ $cmd = campaign ] && budget="--seconds 20"
    "$bin" $cmd $budget --jobs 1 --quiet --backends "$ok,$2" --out "$tmp/out-$cmd" >"$tmp/stdout" 2>"$tmp/err"
    local rc=$? dt=$(( $(date +%s) - t0 ))
    check "$cmd, $1: exit 2 (got $rc)" "[ $rc -eq 2 ]"
    check "$cmd, $1: one line on stderr ($(wc -l <"$tmp/err"))" "[ \$(wc -l <$tmp/err) -eq 1 ]"
    check "$cmd, $1: names '$3'" "grep -q -- '$3' $tmp/err"
    check "$cmd, $1: no case ran (nothing written, ${dt} s)" "[ ! -e $tmp/out-$cmd ] && [ $dt -lt 15 ]"
    cat "$tmp/err"
    rm -rf "$tmp/out-$cmd"
  done
}
bad "nonexistent .so" "plugin:$tmp/nonexistent.so" "cannot load"
bad "non-ELF file" "plugin:$tmp/not-elf.so" "cannot load"
bad "missing symbols" "plugin:$plugins/libattnfuzz_plugin_no_symbols.so" "exports no attnfuzz_plugin_abi_version"
bad "ABI 999" "plugin:$plugins/libattnfuzz_plugin_wrong_abi.so" "ABI version 999"
bad "unknown name" "nosuch.backend" "unknown backend .nosuch.backend."
if "$bin" list 2>/dev/null | grep -q 'this build has no cuDNN backend'; then
  bad "a backend this build lacks" "cudnn" "backend .cudnn. is not available here"
fi

# 2. A backend that declines every case, next to one that runs.
"$bin" campaign --cases 30 --jobs 2 --no-minimize --backends "$ok,$declines" --out "$tmp/camp" >"$tmp/stdout" 2>"$tmp/err"
rc=$?
cat "$tmp/stdout" "$tmp/err"
check "campaign with a declining backend: exit 0 or 1, not 2 (got $rc)" "[ $rc -le 1 ]"
check "campaign warns: plugin.declines_all ran no case" "grep -q 'WARNING: backend plugin.declines_all ran no case: 30 skipped, 0 errored' $tmp/err"
check "the warning gives the grouped reason" "grep -q '30x \"plugin.declines_all does not support a part: declines_all plugin: no kernel for head_dim_qk [0-9]*\"' $tmp/err"
check "the progress line counts ran/skipped/errored" "grep -q 'plugin.declines_all 0/30/0 NOTHING RAN' $tmp/err && grep -q 'plugin.mutant_ok 30/0/0' $tmp/err"
check "stdout has the coverage lines" "grep -q '^coverage  plugin.mutant_ok: 30 ran, 0 skipped, 0 errored (.*single 30/0/0)' $tmp/stdout"
python3 - "$tmp/camp/summary.json" >"$tmp/py" 2>&1 <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
c = s["coverage"]
b = c["backends"]
assert c["untested"] == ["plugin.declines_all"], c["untested"]
d = b["plugin.declines_all"]
assert (d["ran"], d["skipped"], d["errored"]) == (0, 30, 0), d
assert d["reasons"][0]["reason"].endswith("declines_all plugin: no kernel for head_dim_qk #"), d["reasons"]
assert d["reasons"][0]["count"] == 30, d["reasons"]
assert d["by_composition"]["single"]["skipped"] == 30, d["by_composition"]
m = b["plugin.mutant_ok"]
assert (m["ran"], m["skipped"], m["errored"]) == (30, 0, 0), m
assert m["by_composition"]["single"]["ran"] == 30, m
assert sum(v["ran"] for k, v in m["by_composition"].items() if k != "single") > 0, m
assert (s["cases_judged"], s["cases_unjudged"]) == (30, 0), (s["cases_judged"], s["cases_unjudged"])
print("summary ok")
PY
check "summary.json coverage: $(tail -1 "$tmp/py")" "grep -q 'summary ok' $tmp/py"
check "report.html has the coverage table and the warning" \
  "grep -q '<h2>Coverage</h2>' $tmp/camp/report.html && grep -q \"class='warn'>WARNING: backend plugin.declines_all ran no case\" $tmp/camp/report.html"
"$bin" campaign --cases 50 --resume --jobs 2 --no-minimize --quiet --backends "$ok,$declines" --out "$tmp/camp" >"$tmp/stdout" 2>&1
check "a resumed campaign counts the first part's cases once: 50 in all" \
  "grep -q '^coverage  plugin.declines_all: 0 ran, 50 skipped, 0 errored' $tmp/stdout && grep -q '^coverage  plugin.mutant_ok: 50 ran' $tmp/stdout"

check "the resumed campaign's summary counts 50 judged cases" "grep -q '\"cases_judged\": 50,' $tmp/camp/summary.json"

# 2a. Under a time budget, two workers finish out of order (the crash mutant restarts one): the
# summary's cases, judged and unjudged count the same population.
crash="plugin:$mutants/libattnfuzz_mutant_crash.so"
"$bin" campaign --seconds 6 --jobs 2 --timeout 5 --no-minimize --quiet --backends "$ok,$crash" --out "$tmp/timed" >/dev/null 2>&1
check "a timed campaign's summary: cases = judged + unjudged" \
  "python3 -c 'import json,sys; s=json.load(open(\"$tmp/timed/summary.json\")); sys.exit(0 if s[\"cases\"] > 0 and s[\"cases\"] == s[\"cases_judged\"] + s[\"cases_unjudged\"] else 1)'"

# 2b. Only the declining backend: every case is unjudged (no backend ran), and the rate counts
# judged cases only, in the progress line, on stdout, in summary.json and in the report.
"$bin" campaign --cases 20 --jobs 2 --no-minimize --backends "$declines" --out "$tmp/none" >"$tmp/stdout" 2>"$tmp/err"
check "nothing ran: the last progress line says 0 judged, 20 unjudged, 0.0 judged cases/s" \
  "tail -n 3 $tmp/err | grep -q '^20 cases (0 judged, 20 unjudged), 0.0 judged cases/s, .*cases no backend ran 20'"
check "nothing ran: stdout says so" "grep -q '^done      20 cases (0 judged, 20 unjudged) in .* (0.0 judged cases/s)' $tmp/stdout"
check "nothing ran: summary.json counts 0 judged, 20 unjudged (no backend ran)" \
  "python3 -c 'import json,sys; s=json.load(open(\"$tmp/none/summary.json\")); sys.exit(0 if (s[\"cases_judged\"], s[\"cases_unjudged\"], s[\"coverage\"][\"unjudged_cases\"][\"no_backend_ran\"]) == (0, 20, 20) else 1)'"
check "nothing ran: the report says so" "grep -q 'unjudged</th><td>20: 20 in which no backend ran' $tmp/none/report.html && grep -q 'judged</th><td>0 (0.0 judged cases/s' $tmp/none/report.html"
"$bin" campaign --cases 20 --jobs 2 --no-minimize --backends "$ok" --out "$tmp/all" >"$tmp/stdout" 2>"$tmp/err"
check "everything ran: 20 judged, 0 unjudged, a rate over them" \
  "tail -n 3 $tmp/err | grep -Eq '^20 cases \(20 judged, 0 unjudged\), [0-9.]*[1-9][0-9.]* judged cases/s' && grep -q 'judged</th><td>20 (' $tmp/all/report.html"

# 3. check: the declining backend fails it with exit 4 and a failing JUnit test.
"$bin" check --seed 3 --cases 20 --quiet --backends "$ok,$declines" --out "$tmp/chk" --junit "$tmp/chk.xml" >"$tmp/stdout" 2>"$tmp/err"
rc=$?
check "check with a backend that ran nothing: exit 4 (got $rc)" "[ $rc -eq 4 ]"
check "JUnit: plugin.declines_all fails with 'ran no case'" \
  "grep -q 'name=\"plugin.declines_all\"><failure message=\"ran no case: 20 skipped, 0 errored; most often: plugin.declines_all does not support a part: declines_all plugin' $tmp/chk.xml"
check "JUnit: plugin.mutant_ok passes with its counts" "grep -q 'name=\"plugin.mutant_ok\"><system-out>ran 20, skipped 0, errored 0' $tmp/chk.xml"
"$bin" check --seed 3 --cases 20 --quiet --backends "$ok" --out "$tmp/chk2" --junit "$tmp/chk2.xml" >/dev/null 2>&1
rc=$?
check "check with every backend running: exit 0 (got $rc)" "[ $rc -eq 0 ]"

# 4. run: exit 4 when every backend was skipped, 0 when one ran.
"$bin" run "$src/corpus/seed-flex-lse-merge.json" --backends "$declines" >"$tmp/stdout" 2>"$tmp/err"
rc=$?
check "run, every backend skipped: exit 4 (got $rc)" "[ $rc -eq 4 ] && grep -q 'skipped: .*declines_all plugin: no kernel' $tmp/stdout && grep -q 'nothing was tested' $tmp/err"
"$bin" run "$src/corpus/seed-flex-lse-merge.json" --backends "$declines,$ok" >/dev/null 2>&1
rc=$?
check "run, one backend ran: exit 0 (got $rc)" "[ $rc -eq 0 ]"

# 5. A CUDA plugin in a build without the CUDA runtime: declined with the reason, exit 4.
if "$bin" list 2>/dev/null | grep -q 'this build has no cuDNN backend'; then  # a build without CUDA
  "$bin" run "$src/corpus/seed-flex-lse-merge.json" --backends "plugin:$plugins/libattnfuzz_plugin_cuda_declared.so" >"$tmp/stdout" 2>&1
  rc=$?
  check "run, CUDA plugin in a CPU build: exit 4 with the reason (got $rc)" \
    "[ $rc -eq 4 ] && grep -q 'skipped: .*CUDA plugins need the gpu build of attnfuzz' $tmp/stdout"
fi

# 6. The feature map (docs/campaigns.md, "Feature map"): summary.json counts the cells a backend
# was judged in and those its envelope keeps out; report.html draws it; check --min-per-cell
# fails (exit 4, a failing JUnit case) while a cell inside the envelope is too thin.
"$bin" check --cases 12 --seed 3 --tier toy --backends torch.sdpa.cpu_flash --out "$tmp/cells" >"$tmp/stdout" 2>"$tmp/err"
rc=$?
check "check, no minimum per cell: exit 0 (got $rc)" "[ $rc -eq 0 ]"
check "check: stdout says how many cells were judged" "grep -Eq '^cells     torch.sdpa.cpu_flash: [1-9][0-9]* of the [0-9]+ feature cells inside its envelope judged' $tmp/stdout"
check "summary.json: the cells it was judged in, one per composition it ran a case through" \
  "python3 -c \"import json,sys; d=json.load(open(sys.argv[1]))['coverage']; b=d['backends']['torch.sdpa.cpu_flash']; c=d['features']['cells']['torch.sdpa.cpu_flash']; assert sum(c.values()) == sum(v['ran'] for k, v in b['by_composition'].items() if k != '-') >= b['ran'] > 0 and all(k.count('/') == 3 for k in c)\" $tmp/cells/summary.json"
check "report.html: the feature map" "grep -q 'Feature map' $tmp/cells/report.html"
"$bin" check --cases 12 --seed 3 --tier toy --backends torch.sdpa.cpu_flash --min-per-cell 1 --out "$tmp/cells" >"$tmp/stdout" 2>"$tmp/err"
rc=$?
check "check --min-per-cell 1 over 12 cases: exit 4, the first thin cell named (got $rc)" \
  "[ $rc -eq 4 ] && grep -q 'feature cell(s) judged fewer than 1 times (--min-per-cell), the first: torch.sdpa.cpu_flash ' $tmp/err"
check "check --min-per-cell: a failing JUnit case lists the thin cells" "grep -q 'feature cells (at least 1 judged each)' $tmp/cells/junit.xml && grep -q 'judged too few times' $tmp/cells/junit.xml"
exit $fail
