#!/usr/bin/env bash
# Hostile arguments to every subcommand (docs/campaigns.md, "Hostile arguments"): each must end
# with exit 2 and one line on stderr naming the argument, quickly, having deleted nothing and
# run no case; never a crash, a hang, a stack trace, exit 0 or a silent default.
#   cli_args_test.sh ATTNFUZZ SOURCE_DIR
set -u
bin=$(realpath "$1") src=$(realpath "$2")
tmp=$(mktemp -d)
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
fail=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi; }
cp "$src/corpus/seed-flex-lse-merge.json" case.json
: >empty.json
head -c 4096 /dev/urandom >garbage.bin
mkdir adir loopdir
ln -s loop loop
ln -s self loopdir/self
echo x >afile

refused() {  # expected text in the one line; the arguments
  local want=$1; shift
  timeout -k 2 60 "$bin" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null
  local rc=$?
  local name="attnfuzz $*"
  check "$name: exit 2 (got $rc)" "[ $rc -eq 2 ]"
  check "$name: one line on stderr ($(wc -l <"$tmp/err"))" "[ \$(wc -l <$tmp/err) -eq 1 ]"
  printf '%s\n' "$want" >"$tmp/want"
  check "$name: names: $want" "grep -aqF -f $tmp/want $tmp/err"
  check "$name: no stack trace or internal error" "! grep -aqE 'internal error|terminate|Aborted|filesystem error|stoi' $tmp/err"
  head -c 300 "$tmp/err" | tr -c '[:print:]\n' '?' 
}
quick="--cases 1 --backends reference --quiet"

# The command line itself (CLI11's errors on one line, naming the subcommand).
refused "unknown subcommand 'bogus'" bogus
refused "attnfuzz: A subcommand is required"
refused "attnfuzz run: case is required" run
refused "attnfuzz list: The following argument was not expected: foo" list foo
refused "--seed: At Most 1 required but received 2" generate --seed 1 --seed 2
refused "--backends: 1 required TEXT missing" run case.json --backends

# Numbers: negative, not numbers, 1e30, past 2^64, out of range, NaN, infinite.
for v in -1 abc 1e30 99999999999999999999999; do
  refused "--seed: '$v'" generate --seed "$v"
  refused "--seed: '$v'" campaign --seed "$v" $quick
  refused "--cases: '$v'" campaign --cases "$v" --backends reference
  refused "--memory-budget-mib: '$v'" run case.json --memory-budget-mib "$v"
done
refused "--memory-budget-mib: Value 0 not in range" run case.json --memory-budget-mib 0
refused "--memory-budget-mib: Value 18446744073709551615 not in range" run case.json --memory-budget-mib 18446744073709551615
for v in -1 0 nan inf abc 1e30; do
  refused "--seconds: '$v'" campaign --seconds "$v" $quick
  refused "--timeout: '$v'" campaign --timeout "$v" $quick
  refused "--timeout: '$v'" replay adir --timeout "$v"
done
refused "--jobs: Value 0 not in range" campaign --jobs 0
refused "--jobs: Value 99999999999 not in range" campaign --jobs 99999999999
refused "--cases: Value 0 not in range" check --cases 0 --backends reference --out chk0
refused "--count: Value 0 not in range" generate --count 0
refused "--count 5: more than one case needs --out" generate --count 5
for v in 3/2 1/0 a/b 1/2/3 -1/2 0/1x 2 99999999999/1; do
  refused "--shard" campaign --shard "$v" $quick --out "shard-$RANDOM"
done
refused "--devices takes comma-separated GPU ids" campaign --devices ,,, $quick --out dev
refused "--backends: 'reference' is given twice" campaign --backends reference,reference --cases 1 --out dup
refused "--backends: 'reference' is given twice" run case.json --backends reference,reference

# Paths: missing, empty, a directory, binary garbage, a symbolic link loop, a device.
refused "--out: an empty path" campaign --out '' $quick
refused "--out: an empty path" generate --out ''
refused "--resume needs --out" campaign --resume $quick
refused "--resume: nostate holds no campaign to continue" campaign --resume --out nostate $quick
check "a refused --resume created nothing" "[ ! -e nostate ]"
# --resume continues the recorded seed and shard; another one named is refused.
"$bin" campaign --seed 7 --shard 1/2 --cases 1 --backends reference --quiet --no-minimize --out seeded >/dev/null 2>&1
"$bin" campaign --resume --cases 2 --quiet --out seeded >/dev/null 2>&1
rc=$?
check "--resume without --seed or --shard continues the recorded ones (exit 0, got $rc)" "[ $rc -eq 0 ]"
check "--resume keeps the recorded --no-minimize" \
  "python3 -c \"import json, sys; d = json.load(open(sys.argv[1])); sys.exit(0 if d['minimize'] is False and d['seed'] == 7 else 1)\" seeded/state.json"
refused "--resume: seeded/state.json belongs to another campaign" campaign --resume --seed 8 --cases 3 --quiet --no-minimize --out seeded
# --resume draws the cases with the recorded seed and stream flags (tier, case mix, shares,
# bounds): a resume without them continues the same stream (unguided, one worker: a guided
# stream follows its corpus, whose order depends on the workers), one named with another value
# is refused.
stream="--seed 9 --tier toy --ragged-share 1 --max-dim 8 --mutation-share 0 --jobs 1"
"$bin" campaign $stream --cases 6 --backends reference --quiet --no-minimize --out whole >/dev/null 2>&1
"$bin" campaign $stream --cases 3 --backends reference --quiet --no-minimize --out halves >/dev/null 2>&1
"$bin" campaign --resume --cases 6 --jobs 1 --quiet --out halves >/dev/null 2>&1
rc=$?
check "--resume without the stream flags runs (exit 0, got $rc)" "[ $rc -eq 0 ]"
check "--resume keeps the recorded stream flags" \
  "python3 -c \"import json, sys; s = json.load(open(sys.argv[1]))['stream']; sys.exit(0 if s['tier'] == 'toy' and s['ragged-share'] == 1 and s['max-dim'] == 8 else 1)\" halves/state.json"
check "a resumed campaign judged the cases of the uninterrupted one" \
  "python3 -c \"import json, sys; c = [json.load(open(f))['coverage'] for f in sys.argv[1:]]; sys.exit(0 if c[0] == c[1] else 1)\" whole/summary.json halves/summary.json"
refused "--resume: --tier \"small\" differs from the \"toy\" halves/state.json records" campaign --resume --tier small --cases 7 --quiet --out halves
refused "--resume: --ragged-share 0.5 differs from the 1.0" campaign --resume --ragged-share 0.5 --cases 7 --quiet --out halves
refused "--out afile: cannot create the directory" campaign --out afile $quick
refused "--out loop: cannot create the directory" campaign --out loop $quick
refused "--out afile: cannot create the directory" generate --count 2 --out afile
refused "--known adir: no reproducer" campaign --known adir $quick --out k1
refused "--known loopdir/self: Too many levels of symbolic links" campaign --known loopdir $quick --out k2
refused "--known garbage.bin" campaign --known garbage.bin $quick --out k3
refused "import: adir: invalid case: <file>: 'adir' is a directory" import adir --backends reference
refused "import: /dev/zero" import /dev/zero --backends reference
refused "import: loop" import loop --backends reference
refused "--out adir/missing/x.json: no such directory" import garbage.bin --backends reference --out adir/missing/x.json
refused "attnfuzz minimize: --out: an empty path" minimize empty.json --out ''
refused "replay: garbage.bin" replay garbage.bin
refused "replay: empty.json" replay empty.json
refused "replay: loopdir/self: Too many levels of symbolic links" replay loopdir
refused "--junit adir: is a directory" replay case.json --junit adir
refused "report: adir: not a campaign output directory" report adir
refused "merge: adir: not a campaign output directory" merge adir
refused "--json adir: is a directory" check $quick --out chk1 --json adir

# check never deletes what it did not write.
mkdir precious && echo keep >precious/notes.txt
refused "--out precious: holds notes.txt, which no check wrote" check $quick --out precious
check "check --out precious: notes.txt is still there" "[ -f precious/notes.txt ]"
# A previous check's compilers' caches (compile-cache/) are kept: they change its time, never its findings.
"$bin" check $quick --out chk2 >/dev/null 2>&1
mkdir -p chk2/compile-cache/inductor && echo kernel >chk2/compile-cache/inductor/k.py && echo stale >chk2/findings/x.json
"$bin" check $quick --out chk2 >/dev/null 2>&1
rc=$?
check "check again in its --out: exit 0 (got $rc), its compile cache kept, its old findings gone" \
  "[ $rc -eq 0 ] && [ -f chk2/compile-cache/inductor/k.py ] && [ ! -e chk2/findings/x.json ]"
refused "--out afile: exists and is not a directory" check $quick --out afile
check "check --out afile: the file is still there" "[ -f afile ]"

# merge: a shard given twice would be counted twice.
"$bin" campaign --cases 2 --backends reference --quiet --no-minimize --out shard >/dev/null 2>&1
refused "merge: shard is given twice" merge shard shard --out merged
refused "merge: ./shard is given twice (as shard)" merge shard ./shard --out merged
refused "merge: --out afile: cannot create the directory" merge shard --out afile
# An empty directory of reproducers: a warning, not a silent pass (and not an error: all fixed).
"$bin" replay adir >/dev/null 2>"$tmp/err"
rc=$?
check "replay of a directory without reproducers: exit 0 with a warning (got $rc)" "[ $rc -eq 0 ] && grep -q 'warning: no reproducer' $tmp/err"
exit $fail
