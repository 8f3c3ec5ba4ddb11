#!/usr/bin/env bash
# The second hostile probe (issue 26), one ctest per item:
#   hardening2_test.sh ATTNFUZZ_BINARY SOURCE_DIR ITEM
# Everything happens in a private scratch directory; device nodes are made there with mknod
# (skipped, exit 77, without root), never taken from /dev. Exit 77: skipped, the reason on stdout.
set -u
bin=$(realpath "$1")
src=$(realpath "$2")
item=$3
build=$(dirname "$bin")
mutants=$build/mutants
hostile="plugin:$build/plugins/libattnfuzz_plugin_hostile.so"
dlse="plugin:$mutants/libattnfuzz_mutant_ignores_dlse.so"
tmp=$(mktemp -d)
bg=
trap '[ -n "$bg" ] && kill -KILL -- -"$bg" 2>/dev/null; rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
fail=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi; }
# Runs attnfuzz with a time limit; rc, and the output in $tmp/out and $tmp/err.
af() {
  timeout -k 2 120 "$bin" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null
  rc=$?
}
refused() {  # name, text the one line must hold: exit 2, one short line on stderr
  check "$1: exit 2 (got $rc)" "[ $rc -eq 2 ]"
  check "$1: one line on stderr ($(wc -l <"$tmp/err"))" "[ \$(wc -l <$tmp/err) -eq 1 ]"
  check "$1: the line is short ($(wc -c <"$tmp/err") bytes)" "[ \$(wc -c <$tmp/err) -lt 1000 ]"
  printf '%s\n' "$2" >"$tmp/want"
  check "$1: names '$2'" "grep -aqF -f $tmp/want $tmp/err"
  check "$1: no internal error" "! grep -aqE 'internal error|terminate|filesystem error' $tmp/err"
  head -c 300 "$tmp/err"
}
count_findings() { ls "$1"/findings/*.json 2>/dev/null | grep -vc '\.min\.json$'; }
# A campaign that keeps running in the background (its own process group), with findings.
live_campaign() {
  setsid "$bin" campaign --seconds 120 --jobs 1 --no-minimize --quiet --out "$1" --backends "$dlse" >/dev/null 2>&1 &
  bg=$!
  local i
  for i in $(seq 1 300); do
    [ "$(count_findings "$1")" -gt 0 ] && return 0
    sleep 0.1
  done
  return 1
}
a_mismatch_reproducer() {  # a reproducer of the dLSE mutant in $1 (run --record)
  "$bin" run "$src/corpus/seed-flex-lse-merge.json" --no-determinism-check --backends "$dlse" --record "$1" >/dev/null 2>&1
  ls "$1"/*.json | head -1
}

case "$item" in
01)  # commands that write into a campaign directory honour its lock
  check "a live campaign with findings" "live_campaign live"
  before=$(count_findings live)
  inode=$(stat -c %i live/lock)
  af check --cases 2 --backends reference --quiet --out live
  refused "check --out a live campaign's directory" "in use"
  check "check deleted none of the campaign's findings ($before before, $(count_findings live) now)" "[ \$(count_findings live) -ge $before ]"
  check "check did not recreate the lock file" "[ \$(stat -c %i live/lock) = $inode ]"
  check "the campaign still runs" "kill -0 $bg"
  "$bin" campaign --cases 4 --jobs 1 --no-minimize --quiet --tier toy --out shard --backends reference >/dev/null 2>&1
  af merge shard --out live
  refused "merge --out a live campaign's directory" "in use"
  check "no foreign summary landed in the live directory" "[ ! -e live/summary.json ]"
  af report live
  refused "report of a live campaign's directory" "in use"
  check "no report was written under the campaign" "[ ! -e live/report.html ]"
  finding=$(ls live/findings/*.json | grep -v '\.min\.json$' | head -1)
  af minimize "$finding"
  refused "minimize into a live campaign's findings/" "in use"
  af minimize "$finding" --out live/findings/mine.min.json
  refused "minimize --out inside a live campaign's directory" "in use"
  check "the campaign still runs after all of that" "kill -0 $bg"
  kill -TERM -- -"$bg" 2>/dev/null
  wait "$bg" 2>/dev/null
  bg=
  # Once it is gone, the same commands work: the lock is the campaign's, not the directory's.
  af report live
  check "report after the campaign ended: exit 0 (got $rc)" "[ $rc -eq 0 ] && [ -f live/report.html ]"
  af check --cases 2 --backends reference --quiet --tier toy --out chk
  check "a first check: exit 0 (got $rc)" "[ $rc -eq 0 ]"
  af check --cases 2 --backends reference --quiet --tier toy --out chk
  check "a second check over the first one's directory: exit 0 (got $rc)" "[ $rc -eq 0 ] && [ -f chk/junit.xml ]" ;;
02)  # output flags never replace a device node, a FIFO or a symbolic link
  shard_and_finding() {
    "$bin" campaign --cases 10 --jobs 1 --no-minimize --quiet --out camp --backends "$dlse" >/dev/null 2>&1
    ls camp/findings/*.json | head -1
  }
  finding=$(shard_and_finding)
  check "a finding to minimize" "[ -f '$finding' ]"
  : >artifact
  mkfifo fifo
  mkdir outside && echo keep >outside/precious && ln -s outside/precious link
  targets="fifo link"
  if [ "$(id -u)" = 0 ] && mknod node c 1 3 2>/dev/null; then targets="node $targets"; else echo "note: not root: the device node probes are left out"; fi
  for t in $targets; do
    af check --cases 1 --backends reference --quiet --tier toy --out "chk-$t" --junit "$t"
    refused "check --junit $t" "--junit $t"
    af check --cases 1 --backends reference --quiet --tier toy --out "chkj-$t" --json "$t"
    refused "check --json $t" "--json $t"
    af replay "$finding" --junit "$t"
    refused "replay --junit $t" "--junit $t"
    af minimize "$finding" --out "$t"
    refused "minimize --out $t" "--out $t"
    af import artifact --backends reference --out "$t"
    refused "import --out $t" "--out $t"
  done
  check "the FIFO is still a FIFO" "[ -p fifo ]"
  check "the link is still a link, and what it names is untouched" "[ -L link ] && [ \"\$(cat outside/precious)\" = keep ]"
  if [ -e node ]; then check "the device node is still a character device" "[ -c node ]"; fi
  # run --record: a name already taken by a FIFO is refused, reported, and the rest still written.
  mkdir rec0 && first=$(a_mismatch_reproducer rec0) && n=$(ls rec0/*.json | wc -l)
  mkdir rec1 && mkfifo "rec1/$(basename "$first")"
  af run "$src/corpus/seed-flex-lse-merge.json" --no-determinism-check --backends "$dlse" --record rec1
  check "run --record over a FIFO: exit 2 (got $rc)" "[ $rc -eq 2 ]"
  check "the refusal names the file" "grep -q -- '--record: .*$(basename "$first").*FIFO' $tmp/err"
  check "the other $((n - 1)) reproducer(s) were written" "[ \$(ls rec1/*.json | wc -l) -eq $n ] && [ -p 'rec1/$(basename "$first")' ]"
  if [ ! -e node ]; then echo "SKIP: the device node part needs root (mknod)"; [ $fail = 0 ] && exit 77; fi ;;
04)  # minimize judges a crash's candidates in isolated workers, and takes --timeout
  crash="plugin:$mutants/libattnfuzz_mutant_crash.so"
  af campaign --seed 3 --cases 40 --jobs 1 --no-minimize --quiet --backends "$crash" --out camp
  f=$(ls camp/findings/*.json 2>/dev/null | head -1)
  check "the campaign recorded a crash" "[ -n '$f' ] && grep -q '\"class\": \"crash\"' '$f'"
  af minimize --out m.json "$f"
  check "minimize of a crash: exit 0, not a crash of minimize itself (got $rc)" "[ $rc -eq 0 ] && grep -q '\"class\": \"crash\"' m.json"
  check "  shrunk (Skv % 7 == 3 is all the bug needs)" "python3 -c 'import json,sys; s=json.load(open(\"m.json\"))[\"case\"][\"shape\"]; sys.exit(0 if s[\"seq_q\"] == 1 and s[\"heads_q\"] == 1 else 1)'"
  af minimize --timeout 5 --out m5.json "$f"
  check "minimize --timeout 5: exit 0 (got $rc)" "[ $rc -eq 0 ] && [ -f m5.json ]"
  af minimize --timeout 0 --out m0.json "$f"
  check "minimize --timeout 0: refused (exit 2, got $rc)" "[ $rc -eq 2 ]"
  # report re-runs each finding for its pictures in a child of its own, with a watchdog: a
  # backend that crashes (and leaves a forked child behind) or hangs there costs the pictures.
  ATTNFUZZ_HOSTILE=wrong_o "$bin" campaign --seed 5 --cases 2 --jobs 1 --no-minimize --quiet --tier toy --backends "$hostile" --out rep >/dev/null 2>&1
  check "a campaign with O mismatch findings of the hostile plugin" "[ \$(count_findings rep) -gt 0 ] && grep -lq '\"tensor\": \"O\"' rep/findings/*.json"
  rm -f rep/report.html
  ATTNFUZZ_HOSTILE=fork_crash ATTNFUZZ_HOSTILE_PIDS=$tmp/pids af report rep
  check "report, the re-run crashing: exit 0 (got $rc)" "[ $rc -eq 0 ] && [ -f rep/report.html ]"
  check "  the report says the re-run crashed" "grep -q 'the re-run crashed: killed by signal 11' rep/report.html"
  check "  what the plugin forked is gone" "[ -s $tmp/pids ] && ! kill -0 \$(head -1 $tmp/pids) 2>/dev/null"
  ATTNFUZZ_HOSTILE=hang af report --timeout 2 rep
  check "report --timeout 2, the re-run hanging: exit 0 (got $rc)" "[ $rc -eq 0 ] && grep -q 'the re-run hung: no answer within 2' rep/report.html"
  af report --timeout 0 rep
  check "report --timeout 0: refused (exit 2, got $rc)" "[ $rc -eq 2 ]" ;;
05)  # what a plugin forks dies with its worker, and does not hide the worker's crash
  ATTNFUZZ_HOSTILE=fork_crash ATTNFUZZ_HOSTILE_PIDS=$tmp/pids af campaign --seed 5 --cases 2 --jobs 1 --timeout 60 --no-minimize --quiet \
    --backends "$hostile" --out camp
  check "the campaign ends with its findings (exit 1, got $rc)" "[ $rc -eq 1 ]"
  check "a crash, not a timeout after the 60 s watchdog" "grep -rlq '\"class\": \"crash\"' camp/findings && ! grep -rlq '\"class\": \"timeout\"' camp/findings"
  check "the plugin forked (pids recorded)" "[ -s $tmp/pids ]"
  sleep 0.5
  alive=0
  # A killed process whose parent (init, here) has not reaped it yet is a zombie: dead.
  for p in $(cat "$tmp/pids" 2>/dev/null); do
    state=$(ps -o stat= -p "$p" 2>/dev/null | tr -d ' ')
    [ -n "$state" ] && [ "${state#Z}" = "$state" ] && alive=$((alive + 1))
  done
  check "none of the $(wc -l <"$tmp/pids" 2>/dev/null) forked processes outlives the campaign ($alive alive)" "[ $alive -eq 0 ]"
  for p in $(cat "$tmp/pids" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done ;;
06)  # silent loss: merge of a store of .min.json files only, run --record after a failed write
  "$bin" campaign --cases 10 --jobs 1 --no-minimize --quiet --out mins --backends "$dlse" >/dev/null 2>&1
  n=$(count_findings mins)
  check "the campaign recorded findings ($n)" "[ $n -gt 0 ]"
  for f in mins/findings/*.json; do mv "$f" "${f%.json}.min.json"; done
  af merge mins --out merged
  check "merge: exit 0 (got $rc)" "[ $rc -eq 0 ]"
  check "a warning per minimized file without its finding ($(grep -c 'left out: its finding' "$tmp/err"))" \
    "[ \$(grep -c 'left out: its finding' $tmp/err) -eq $n ]"
  check "the summary line counts them" "grep -q '$n minimized file(s) without their finding left out' $tmp/out"
  # report: an edited finding (which merge warns about) is said to be left out, not dropped silently.
  "$bin" campaign --cases 10 --jobs 1 --no-minimize --quiet --out rep --backends "$dlse" >/dev/null 2>&1
  edited=$(ls rep/findings/*.json | head -1)
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); r['case']['seed'] += 1; json.dump(r, open(sys.argv[1],'w'))" "$edited"
  af report rep
  check "report with an edited finding: exit 0 (got $rc)" "[ $rc -eq 0 ]"
  check "a warning names the edited file" "grep -q 'report: warning: .*$(basename "$edited") left out: .*record_checksum' $tmp/err"
  check "the report says so too" "grep -q 'WARNING: .*$(basename "$edited") left out' rep/report.html"
  # run --record: one reproducer name taken by a directory; the others are still written.
  mkdir rec0 && first=$(a_mismatch_reproducer rec0) && total=$(ls rec0/*.json | wc -l)
  check "the mutant gives more than one reproducer ($total)" "[ $total -gt 1 ]"
  mkdir rec1 && mkdir "rec1/$(basename "$first")"
  af run "$src/corpus/seed-flex-lse-merge.json" --no-determinism-check --backends "$dlse" --record rec1
  check "run --record with one failed write: exit 2 (got $rc)" "[ $rc -eq 2 ]"
  check "the failure is reported, naming the file" "grep -q -- '--record: .*$(basename "$first").*is a directory' $tmp/err"
  check "the other $((total - 1)) reproducer(s) were written" "[ \$(find rec1 -maxdepth 1 -type f -name '*.json' | wc -l) -eq $((total - 1)) ]" ;;
07)  # a campaign's own known.json over the 16 MiB input limit resumes
  mkdir rec && r=$(a_mismatch_reproducer rec)
  for id in 1 2; do  # 9 MiB each, through the environment (outside the record checksum)
    python3 - "$r" "$id" >"big$id.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
j["environment"]["padding"] = "p" * (9 << 20)
j["known"] = {"id": "BIG-" + sys.argv[2], "covers": {"backend": "*", "composition": "*", "tensor": "*", "class": "*"}}
print(json.dumps(j))
PY
  done
  af campaign --cases 2 --jobs 1 --no-minimize --quiet --tier toy --out camp --backends reference --known big1.json,big2.json
  check "the first run: exit 0 (got $rc)" "[ $rc -eq 0 ]"
  check "its known.json is over 16 MiB ($(stat -c %s camp/known.json 2>/dev/null) bytes)" "[ \$(stat -c %s camp/known.json) -gt 16777216 ]"
  af campaign --cases 4 --jobs 1 --no-minimize --quiet --tier toy --out camp --resume
  check "--resume of its own known.json: exit 0 (got $rc)" "[ $rc -eq 0 ]"
  check "the recorded known set is used" "grep -q 'known     2 known deviation(s) recorded with the campaign' $tmp/out"
  head -c 300 "$tmp/err" ;;
09)  # replay says fixed only when the blamed backend ran the case to the end and passed
  ATTNFUZZ_HOSTILE=exit0 "$bin" campaign --cases 8 --jobs 1 --no-minimize --quiet --out camp --backends "reference,$hostile" >/dev/null 2>&1
  crash=$(ls camp/findings/*.json | head -1)
  check "a crash reproducer of the hostile plugin" "[ -f '$crash' ] && grep -q '\"class\": \"crash\"' '$crash'"
  ATTNFUZZ_HOSTILE=exit0 af replay "$crash"
  check "still crashing: FAILING, exit 1 (got $rc)" "[ $rc -eq 1 ] && grep -q '^FAILING' $tmp/out"
  af replay "$crash"
  check "the plugin fixed: fixed, exit 0 (got $rc)" "[ $rc -eq 0 ] && grep -q '^fixed' $tmp/out"
  for mode in decline fail; do
    ATTNFUZZ_HOSTILE=$mode af replay "$crash" --junit "junit-$mode.xml"
    check "the plugin now ${mode}s every case: UNTESTED, exit 4 (got $rc)" "[ $rc -eq 4 ] && grep -q '^UNTESTED' $tmp/out"
    check "  never fixed" "! grep -q '^fixed' $tmp/out"
    check "  said on stderr" "grep -q 'untested' $tmp/err"
    check "  a failing JUnit case" "grep -q 'untested' junit-$mode.xml"
  done
  af replay "$crash" --backends reference
  check "--backends reference: UNTESTED, exit 4 (got $rc)" "[ $rc -eq 4 ] && grep -q '^UNTESTED.*did not run' $tmp/out"
  mkdir rec && mismatch=$(a_mismatch_reproducer rec)
  af replay "$mismatch" --backends reference
  check "a mismatch replayed without its backend: UNTESTED, exit 4 (got $rc)" "[ $rc -eq 4 ] && grep -q '^UNTESTED' $tmp/out"
  af replay "$mismatch"
  check "the same with its backend: FAILING, exit 1 (got $rc)" "[ $rc -eq 1 ] && grep -q '^FAILING' $tmp/out" ;;
10)  # running out of memory is exit 3 and one line, never a finding, in `run` and in a worker
  # A case that needs about 60 GB (2 GiB a Sq x Skv float64 matrix), under a 4 GiB address-space
  # limit with a budget large enough to let it start: the first large allocation fails.
  python3 -c 'import json; print(json.dumps({"format": "attnfuzz-case/1", "seed": 1, "shape": {"heads_q": 1, "seq_q": 16384,
    "seq_kv": 16384, "head_dim_qk": 1, "head_dim_v": 1}, "mask": {"kind": "causal", "align": "top_left"}}))' >big.json
  starved() {  # attnfuzz under the limit; rc, and the output in $tmp/out and $tmp/err
    (ulimit -v 4194304 && exec timeout -k 2 120 "$bin" "$@" --memory-budget-mib 1048576 >"$tmp/out" 2>"$tmp/err" </dev/null)
    rc=$?
  }
  cp "$src/corpus/seed-flex-lse-merge.json" small.json
  for b in reference torch.f64; do
    starved run small.json --backends "$b" --no-determinism-check
    if [ $rc -ne 0 ]; then  # a build whose libraries reserve more address space (CUDA's) than the limit leaves
      echo "SKIP: a small case does not run under a 4 GiB address-space limit here (exit $rc): $(head -c 300 "$tmp/err")"
      exit 77
    fi
  done
  for b in reference torch.f64; do
    starved run big.json --backends "$b" --no-determinism-check
    check "run --backends $b out of memory: exit 3 (got $rc)" "[ $rc -eq 3 ]"
    check "  one line on stderr ($(wc -l <"$tmp/err"))" "[ \$(wc -l <$tmp/err) -eq 1 ]"
    check "  that says so" "grep -q 'out of memory' $tmp/err"
    check "  no finding" "! grep -q 'finding(s)' $tmp/out"
    head -c 300 "$tmp/err"
    # In a worker (run --isolate runs the case as a campaign does: campaign/campaign.h, run_case).
    starved run big.json --backends "$b" --no-determinism-check --isolate --timeout 120
    check "run --isolate --backends $b out of memory: exit 3 (got $rc)" "[ $rc -eq 3 ]"
    check "  one line on stderr ($(wc -l <"$tmp/err"))" "[ \$(wc -l <$tmp/err) -eq 1 ]"
    check "  that says so" "grep -q 'out of memory' $tmp/err"
    check "  no crash finding blamed on $b" "! grep -q 'crash' $tmp/out"
    head -c 300 "$tmp/err"
  done ;;
12)  # time budgets and watchdogs have sane bounds
  cp "$src/corpus/seed-flex-lse-merge.json" case.json
  af campaign --seconds 0.001 --backends reference --out c1
  refused "campaign --seconds 0.001" "--seconds"
  af campaign --timeout 1e-9 --cases 1 --backends reference --out c2
  refused "campaign --timeout 1e-9" "--timeout"
  af check --timeout 0.5 --cases 1 --backends reference --out c3
  refused "check --timeout 0.5" "--timeout"
  af replay case.json --timeout 1e-300
  refused "replay --timeout 1e-300" "--timeout"
  for v in inf 1e-9 nan abc 1e9; do
    ATTNFUZZ_PY_TIMEOUT_S=$v af run case.json --backends "py:attnfuzz_py.adapters.sdpa:TorchSDPA"
    refused "ATTNFUZZ_PY_TIMEOUT_S=$v" "ATTNFUZZ_PY_TIMEOUT_S"
  done
  ATTNFUZZ_PY_START_TIMEOUT_S=0 af run case.json --backends "py:attnfuzz_py.adapters.sdpa:TorchSDPA"
  refused "ATTNFUZZ_PY_START_TIMEOUT_S=0" "ATTNFUZZ_PY_START_TIMEOUT_S" ;;
13)  # counts in state.json and summary.json are range-checked
  "$bin" campaign --cases 2 --jobs 1 --no-minimize --quiet --tier toy --out camp --backends reference >/dev/null 2>&1
  edit() {  # file, python statement on the parsed JSON j
    python3 -c "import json,sys; j=json.load(open(sys.argv[1])); $2; json.dump(j, open(sys.argv[1],'w'))" "$1"
  }
  cp camp/state.json state.orig
  edit camp/state.json "j['next_k'] = -5"
  af campaign --cases 4 --jobs 1 --quiet --out camp --resume
  refused "state.json next_k -5" "next_k"
  cp state.orig camp/state.json && edit camp/state.json "j['seconds'] = -1e308"
  af campaign --cases 4 --jobs 1 --quiet --out camp --resume
  refused "state.json seconds -1e308" "seconds"
  cp state.orig camp/state.json && edit camp/state.json "j['coverage']['backends']['reference']['ran'] = -1"
  af campaign --cases 4 --jobs 1 --quiet --out camp --resume
  refused "state.json coverage ran -1" "coverage.backends.reference.ran"
  mkdir -p s1 s2 s3
  echo '{"format": "attnfuzz-summary/1", "cases": 18446744073709551615}' >s1/summary.json
  echo '{"format": "attnfuzz-summary/1", "cases": 30}' >s2/summary.json
  echo '{"format": "attnfuzz-summary/9", "cases": 30}' >s3/summary.json
  af merge s1 s2 --out m1
  refused "merge: (2^64 - 1) + 30 cases" "cases"
  af merge s3 --out m2
  refused "merge: a summary of a format report refuses" "format"
  echo '{"format": "attnfuzz-summary/1", "cases": 3, "known_findings": {"K": -2}}' >s2/summary.json
  af merge s2 --out m3
  refused "merge: a negative known count" "known_findings.K" ;;
14)  # --devices counts against the --jobs cap and names GPUs that are here, once each
  ids=$(seq -s, 0 299)
  af campaign --devices "$ids" --cases 1 --backends reference --out d1
  refused "300 device ids" "--devices"
  check "no worker was started (nothing written)" "[ ! -e d1 ]"
  af campaign --devices 0,1,0 --cases 1 --backends reference --out d3
  refused "an id given twice" "'0' is given twice"
  af campaign --devices 4096 --cases 1 --backends reference --out d3
  refused "an id past the GPUs here" "--devices 4096"
  af campaign --devices GPU-00000000-0000-0000-0000-000000000000 --cases 1 --backends reference --out d3
  refused "a UUID no GPU here has" "--devices GPU-00000000"
  af check --devices bogus --cases 1 --backends reference --out d3
  refused "check: an id that is no GPU id" "--devices takes GPU ids"
  check "no worker was started for any of them (nothing written)" "[ ! -e d3 ]"
  if "$bin" gpus | grep -q '^GPU-'; then
    echo "skipped: --devices 0 on a machine without a GPU (this one has one)"
  else
    CUDA_VISIBLE_DEVICES=0 af campaign --devices 0 --cases 1 --backends reference --out d3
    refused "--devices 0 without a GPU, whatever CUDA_VISIBLE_DEVICES says" "--devices 0: no GPU here"
    check "  no worker was started (nothing written)" "[ ! -e d3 ]"
  fi
  # The end of a campaign does not wait for the cases in flight: a case that hangs (the zoo's
  # hang mutant, Sq % 5 == 2) under a 200 s watchdog is abandoned at the 3 s deadline.
  hang="plugin:$(dirname "$bin")/mutants/libattnfuzz_mutant_hang.so"
  t0=$(date +%s.%N)
  af campaign --seconds 3 --timeout 200 --jobs 2 --seed 5 --no-minimize --backends "$hang" --out d2
  t1=$(date +%s.%N)
  wall=$(python3 -c "print(round($t1 - $t0, 1))")
  check "a 3 s campaign with hung cases in flight ends within 15 s (took $wall s, exit $rc)" "python3 -c 'import sys; sys.exit(0 if $wall < 15 else 1)'"
  check "the abandoned cases are said so" "grep -q 'abandoned, not judged' $tmp/err"
  check "and are no timeout findings" "! ls d2/findings/*timeout* >/dev/null 2>&1" ;;
15)  # other inputs that are refused
  "$bin" campaign --cases 2 --jobs 1 --no-minimize --quiet --tier toy --out shard --backends reference >/dev/null 2>&1
  af merge shard --out shard/merged
  refused "merge --out inside an input" "inside the input"
  check "nothing was created inside the input" "[ ! -e shard/merged ]"
  printf '{"format":"attnfuzz-case/1","seed":1,"shape":{"heads_q":1,"seq_q":8,"head_dim_qk":8}}\0{"junk": [' >nul.json
  af run nul.json --backends reference
  refused "a NUL byte in a case" "NUL" ;;
16|17)  # what a plugin does to memory that is not its outputs' elements
  printf '{"format":"attnfuzz-case/1","seed":3,"shape":{"heads_q":2,"seq_q":8,"seq_kv":8,"head_dim_qk":8},"layout":{"order":"bhsd","row_padding":3}}' >pad.json
  af run pad.json --backends "reference,$hostile" --no-determinism-check
  check "the hostile plugin left alone: exit 0 (got $rc)" "[ $rc -eq 0 ]"
  ATTNFUZZ_HOSTILE=oob af run pad.json --backends "reference,$hostile" --no-determinism-check
  check "a write into O's row padding: a finding, exit 1 (got $rc)" "[ $rc -eq 1 ]"
  check "  blamed on the plugin, out of bounds, naming o (its layouts key)" "grep -q 'plugin.hostile/single/-/out_of_bounds/.*wrote 1 element(s) of its output o out of bounds' $tmp/out"
  ATTNFUZZ_HOSTILE=clobber af run pad.json --backends "reference,$hostile" --no-determinism-check
  check "a write into the input Q after computing: a finding, exit 1 (got $rc)" "[ $rc -eq 1 ]"
  check "  blamed on the plugin, naming q (its layouts key)" "grep -q 'plugin.hostile/single/-/out_of_bounds/.*wrote into its input q' $tmp/out" ;;
19)  # replay's ERROR rows also go to stderr
  mkdir rec && r=$(a_mismatch_reproducer rec)
  af replay "$r" --backends no-such-backend
  check "an ERROR row on stdout" "grep -q '^ERROR' $tmp/out"
  check "and the same on stderr" "grep -q 'attnfuzz: replay: .*no-such-backend' $tmp/err"
  # Item 22: an error names the right field, in the project's words, not the JSON library's.
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); r['environment']=5; json.dump(r, open('env.json','w'))" "$r"
  af replay env.json
  check "a bad environment: an ERROR (exit 2, got $rc)" "[ $rc -eq 2 ] && grep -q '^ERROR' $tmp/out"
  check "  named as the environment, not the finding" "grep -q 'invalid case: environment: malformed' $tmp/err"
  check "  without the JSON library's error codes" "! grep -q 'json.exception' $tmp/err"
  head -c 300 "$tmp/err" ;;
20|21)  # quoted input is cut and escaped
  cp "$src/corpus/seed-flex-lse-merge.json" case.json
  long=$(printf 'q%.0s' $(seq 1 6000))
  af run "$long.json"
  refused "a 6000-character path" "qqqq"
  af run case.json --backends "$(printf 'x%.0s' $(seq 1 100000))"
  check "a 100 kB backend name: a short message ($(wc -c <"$tmp/err") bytes)" "[ \$(wc -c <$tmp/err) -lt 1000 ] && [ \$(wc -c <$tmp/out) -lt 1000 ]"
  af run case.json --backends "$(printf 'red\033[31mname\377')"
  check "control characters and invalid UTF-8 are escaped: exit 2 (got $rc)" "[ $rc -eq 2 ]"
  check "  no raw ESC or 0xff byte on stderr" "! LC_ALL=C grep -q \$(printf '[\033\377]') $tmp/err"
  check "  shown as \\x1b and \\xff" "grep -qF 'red\\x1b[31mname\\xff' $tmp/err"
  head -c 300 "$tmp/err" ;;
*) echo "unknown item $item"; exit 2 ;;
esac
exit $fail
