#!/usr/bin/env bash
# `attnfuzz check` twice with the same seed gives byte-identical JUnit and JSON, and a failure's
# body holds what a reader acts on: the verdict's numbers, the case, the reproducer and the
# commands that replay and shrink it.
set -u
bin=$1
mutants=$(dirname "$bin")/mutants
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
backends="plugin:$mutants/libattnfuzz_mutant_ok.so,plugin:$mutants/libattnfuzz_mutant_ignores_dlse.so"
for i in 1 2; do
  "$bin" check --seed 5 --cases 40 --quiet --backends "$backends" --out "$out/c" --junit "$out/j$i.xml" --json "$out/s$i.json" >"$out/log$i" 2>&1
  echo "run $i exit $?"
done
fail=0
cmp "$out/j1.xml" "$out/j2.xml" || { echo "FAIL: JUnit differs"; fail=1; }
cmp "$out/s1.json" "$out/s2.json" || { echo "FAIL: JSON summary differs"; fail=1; }
grep -q 'failures="[1-9]' "$out/j1.xml" || { echo "FAIL: the dLSE mutant should fail the check"; fail=1; }
for want in 'divergence: plugin.mutant_ignores_dlse/' 'metrics: ' 'bound_rms=' 'rule: ' 'case: ' "reproducer: $out/c/findings/" "replay: attnfuzz replay $out/c/findings/" 'minimize: attnfuzz minimize '; do
  grep -qF "$want" "$out/j1.xml" || { echo "FAIL: the JUnit failure body lacks '$want'"; fail=1; }
done
head -c 1200 "$out/j1.xml"; echo
exit $fail
