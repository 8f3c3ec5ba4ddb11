#!/usr/bin/env bash
# Reproducers that travel (docs/campaigns.md, "Reproducers on another machine"): a plugin is
# recorded by file name and content hash; replay finds it on --plugin-path / ATTNFUZZ_PLUGIN_PATH
# / the build's plugin folders when the recorded path is gone, refuses another build of it
# (untested, exit 4) unless --any-plugin-build, and the case's surround is recorded and replayed.
set -u
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() { if ! eval "$2"; then echo "FAIL: $1"; fail=1; else echo "ok: $1"; fi; }
mutants=$(dirname "$bin")/mutants
mkdir -p "$tmp/lib" "$tmp/elsewhere" "$tmp/other"
cp "$mutants/libattnfuzz_mutant_causal_align.so" "$tmp/lib/"

"$bin" campaign --seed 5 --cases 60 --seconds 900 --jobs 1 --no-minimize --quiet \
  --backends "plugin:$tmp/lib/libattnfuzz_mutant_causal_align.so" --out "$tmp/c" >"$tmp/c.log" 2>&1
check "the mutant is found (exit 1, got $?)" "[ $? -eq 1 ]"
found=$(ls "$tmp"/c/findings/*.json | head -1)
check "a finding was recorded" "[ -f '$found' ]"
check "the plugin is named by its file name, not its path" \
  "python3 -c 'import json,sys; j=json.load(open(\"$found\")); sys.exit(0 if j[\"backends\"] == [\"plugin:libattnfuzz_mutant_causal_align.so\"] else 1)'"
check "its content hash and recorded folder are kept" \
  "python3 -c 'import json,sys; s=json.load(open(\"$found\"))[\"backend_sources\"][\"plugin:libattnfuzz_mutant_causal_align.so\"]; sys.exit(0 if s[\"content_hash\"].startswith(\"fnv1a64:\") and s[\"recorded_path\"].endswith(\"/lib/libattnfuzz_mutant_causal_align.so\") else 1)'"

"$bin" replay "$found" >"$tmp/r1.log" 2>&1
check "replay from the recorded folder: still failing (exit 1, got $?)" "[ $? -eq 1 ] && grep -q '^FAILING' $tmp/r1.log"

# The recorded folder is gone (another machine): found on --plugin-path, then in the environment.
mv "$tmp/lib/libattnfuzz_mutant_causal_align.so" "$tmp/elsewhere/"
"$bin" replay --plugin-path "$tmp/elsewhere" "$found" >"$tmp/r2.log" 2>&1
check "replay with --plugin-path: still failing (exit 1, got $?)" "[ $? -eq 1 ] && grep -q '^FAILING' $tmp/r2.log"
ATTNFUZZ_PLUGIN_PATH="$tmp/elsewhere" "$bin" replay "$found" >"$tmp/r3.log" 2>&1
check "replay with ATTNFUZZ_PLUGIN_PATH: still failing (exit 1, got $?)" "[ $? -eq 1 ] && grep -q '^FAILING' $tmp/r3.log"
# Nowhere but the build's own mutants/ folder: the same file there, found by default.
"$bin" replay "$found" >"$tmp/r4.log" 2>&1
check "replay from the build's plugin folders: still failing (exit 1, got $?)" "[ $? -eq 1 ] && grep -q '^FAILING' $tmp/r4.log"

# Another build of it under the same file name (the same code and a byte more): refused as
# untested, with both hashes and the way out; --any-plugin-build replays it.
cp "$mutants/libattnfuzz_mutant_causal_align.so" "$tmp/other/" && printf '\0' >>"$tmp/other/libattnfuzz_mutant_causal_align.so"
"$bin" replay --plugin-path "$tmp/other" "$found" >"$tmp/r5.log" 2>&1
rc=$?
check "another build: untested, exit 4 (got $rc)" "[ $rc -eq 4 ] && grep -q '^UNTESTED' $tmp/r5.log"
check "another build: both hashes and --any-plugin-build named" "grep -q 'recorded with fnv1a64:' $tmp/r5.log && grep -q -- '--any-plugin-build' $tmp/r5.log"
"$bin" replay --plugin-path "$tmp/other" --any-plugin-build "$found" >"$tmp/r6.log" 2>&1
rc=$?
check "--any-plugin-build: replayed with that build (still failing, exit 1, got $rc)" "[ $rc -eq 1 ] && grep -q '^FAILING' $tmp/r6.log && grep -q 'replayed with this one' $tmp/r6.log"
# A different plugin under that file name is another backend: its finding cannot be replayed.
cp "$mutants/libattnfuzz_mutant_ok.so" "$tmp/other/libattnfuzz_mutant_causal_align.so"
"$bin" replay --plugin-path "$tmp/other" --any-plugin-build "$found" >"$tmp/r6b.log" 2>&1
check "a different plugin under the name: untested, exit 4 (got $?)" "[ $? -eq 4 ] && grep -q 'did not run' $tmp/r6b.log"
"$bin" minimize --plugin-path "$tmp/other" --out "$tmp/m.json" "$found" >"$tmp/m.log" 2>&1
rc=$?
check "minimize with another build: refused, exit 2 (got $rc)" "[ $rc -eq 2 ] && grep -q 'content hash' $tmp/m.log"
"$bin" minimize --plugin-path "$tmp/elsewhere" --out "$tmp/m.json" "$found" >"$tmp/m2.log" 2>&1
check "minimize finds the plugin on --plugin-path (exit 0, got $?)" "[ $? -eq 0 ] && [ -f $tmp/m.json ]"
check "the minimized reproducer keeps the portable name and the source" \
  "python3 -c 'import json,sys; j=json.load(open(\"$tmp/m.json\")); sys.exit(0 if j[\"backends\"] == [\"plugin:libattnfuzz_mutant_causal_align.so\"] and j[\"backend_sources\"] else 1)'"
"$bin" replay --plugin-path "$tmp/nowhere" --backends plugin:libattnfuzz_no_such_plugin.so "$found" >"$tmp/r7.log" 2>&1
rc=$?
check "a plugin found nowhere: untested, exit 4, the folders searched named (got $rc)" "[ $rc -eq 4 ] && grep -q 'not in the plugin path' $tmp/r7.log && grep -q '$tmp/nowhere' $tmp/r7.log"

# The surround (harness/layout.h): a plugin that reads its row padding is silent on zeros and
# found on NaN; the reproducer records the surround, and replays the same.
cat >"$tmp/pad.json" <<'JSON'
{"format":"attnfuzz-case/1","seed":5,"shape":{"heads_q":1,"seq_q":8,"head_dim_qk":12},
 "layouts":{"q":{"order":"bhsd","row_padding":4},"k":{"order":"bhsd","row_padding":4},"surround":{"fill":"zero","guard":8}}}
JSON
sed 's/"fill":"zero"/"fill":"nan"/' "$tmp/pad.json" >"$tmp/pad-nan.json"
pad="plugin:$mutants/libattnfuzz_mutant_reads_row_padding.so"
"$bin" run --backends "$pad" "$tmp/pad.json" >"$tmp/p0.log" 2>&1
check "reads_row_padding on a zero surround: passes (exit 0, got $?)" "[ $? -eq 0 ]"
"$bin" run --backends "$pad" --record "$tmp/rec" "$tmp/pad-nan.json" >"$tmp/p1.log" 2>&1
check "reads_row_padding on a NaN surround: found (exit 1, got $?)" "[ $? -eq 1 ]"
rec=$(ls "$tmp"/rec/*.json 2>/dev/null | head -1)
check "its reproducer records the surround" "[ -f '$rec' ] && grep -q '\"fill\": \"nan\"' '$rec'"
"$bin" replay "$rec" >"$tmp/p2.log" 2>&1
check "and replays failing (exit 1, got $?)" "[ $? -eq 1 ] && grep -q '^FAILING' $tmp/p2.log"
# --runnable-only: reproducers whose backend this build cannot run are listed, not counted as
# untested (this test runs on the cpu preset: no CUDA backend is available).
root=$(cd "$(dirname "$0")/.." && pwd)
"$bin" replay --known --runnable-only "$root/docs/findings/repro" >"$tmp/k.log" 2>&1
rc=$?
check "replay --runnable-only of the GPU-only known deviations: exit 0 (got $rc)" "[ $rc -eq 0 ]"
check "each is listed with why" "grep -q '^not here  known F-1' $tmp/k.log && grep -q 'is not available here' $tmp/k.log"
check "and the run says none could run here" "grep -q 'no reproducer of .* can run on this machine' $tmp/k.log"
exit $fail
