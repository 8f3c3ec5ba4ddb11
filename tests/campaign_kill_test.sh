#!/usr/bin/env bash
# Kills a campaign with SIGKILL at random moments, several times, and checks that no
# recorded finding is lost or truncated and that --resume continues the case stream.
set -u
bin=$1
mutants=$(dirname "$bin")/mutants
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
backends="plugin:$mutants/libattnfuzz_mutant_ok.so,plugin:$mutants/libattnfuzz_mutant_ignores_dlse.so,plugin:$mutants/libattnfuzz_mutant_masked_rows_nan.so,plugin:$mutants/libattnfuzz_mutant_crash.so"
fail=0
findings() { ls "$out/run/findings" 2>/dev/null | grep -v '\.tmp\.' | sort; }
valid_all() {  # every reproducer and the state are whole JSON documents
  for f in "$out"/run/findings/*.json "$out/run/state.json"; do
    [ -e "$f" ] || continue
    python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$f" || { echo "FAIL: torn or invalid $f"; return 1; }
  done
}
next_k() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["next_k"])' "$out/run/state.json" 2>/dev/null || echo 0; }
RANDOM=7
prev_k=0
for round in 1 2 3 4 5; do
  before=$(findings)
  resume=""; [ $round -gt 1 ] && [ -f "$out/run/state.json" ] && resume="--resume"  # a campaign killed before its first state has nothing to resume
  setsid "$bin" campaign --seconds 120 --jobs 2 --timeout 5 --no-minimize --quiet --out "$out/run" $resume --backends "$backends" >/dev/null 2>&1 &
  pid=$!
  sleep "$(( RANDOM % 3 + 1 )).$(( RANDOM % 10 ))"
  kill -KILL -- -"$pid" 2>/dev/null  # the campaign and its workers
  wait "$pid" 2>/dev/null
  after=$(findings)
  lost=$(comm -23 <(echo "$before") <(echo "$after"))
  [ -n "$lost" ] && { echo "FAIL round $round: lost $lost"; fail=1; }
  valid_all || fail=1
  k=$(next_k)
  [ "$k" -ge "$prev_k" ] || { echo "FAIL round $round: state went back from $prev_k to $k"; fail=1; }
  echo "round $round: killed; $(echo "$after" | grep -c json) finding files, next case $k"
  prev_k=$k
done
# Four more cases, however loaded the machine (a 3 s budget once ran none under ctest -j2: the
# workers' start and a crash's respawn took it all); 60 s at most.
"$bin" campaign --seconds 60 --cases $((prev_k + 4)) --jobs 2 --no-minimize --quiet --out "$out/run" --resume --backends "$backends" >/dev/null 2>&1
rc=$?
k=$(next_k)
echo "resumed to the end: exit $rc, next case $k (was $prev_k)"
{ [ "$rc" -le 1 ] && [ "$k" -gt "$prev_k" ]; } || { echo "FAIL: --resume did not continue"; fail=1; }
valid_all || fail=1
[ -f "$out/run/summary.json" ] || { echo "FAIL: no summary after the resumed run"; fail=1; }
exit $fail
