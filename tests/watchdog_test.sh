#!/usr/bin/env bash
# The watchdog times the backend, not the harness (harness/worker.h, kHarnessWorkProgress): a
# case whose float64 reference, baselines and verdict take several times the watchdog is judged,
# not a timeout; the same case with that extension switched off (ATTNFUZZ_HARNESS_WORK_LIMIT_S
# tiny, and no growth with the case's work) is a timeout, so the case does outlast the watchdog;
# a backend that hangs is still a timeout, blamed on it. The watchdog grows with the case's work
# (campaign/campaign.h, case_watchdog_seconds): a slow but correct backend on a case it needs
# longer than --timeout for is judged, and is a timeout with the growth off
# (ATTNFUZZ_WATCHDOG_GROWTH_LIMIT_S=0).
set -u
bin=$1
build=$(dirname "$bin")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() { if ! eval "$2"; then echo "FAIL: $1"; fail=1; else echo "ok: $1"; fi; }
cat > "$tmp/case.json" <<'JSON'
{"format": "attnfuzz-case/1", "seed": 3, "shape": {"batch": 1, "heads_q": 4, "heads_kv": 4, "seq_q": 640, "seq_kv": 640,
 "head_dim_qk": 64, "head_dim_v": 64}, "dtype": "fp32", "mask": {"kind": "causal", "align": "top_left"}}
JSON
start=$(date +%s.%N)
"$bin" run --isolate --timeout 1 --backends torch.math "$tmp/case.json" >"$tmp/a.log" 2>&1
rc=$?
took=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
check "the harness's work does not count against a 1 s watchdog (exit 0, got $rc, $took s)" "[ $rc -eq 0 ] && ! grep -q timeout $tmp/a.log"
check "the case took longer than the watchdog ($took s)" "awk -v t=$took 'BEGIN { exit !(t > 2) }'"
ATTNFUZZ_HARNESS_WORK_LIMIT_S=0.001 ATTNFUZZ_WATCHDOG_GROWTH_LIMIT_S=0 "$bin" run --isolate --timeout 1 --backends torch.math "$tmp/case.json" >"$tmp/b.log" 2>&1
rc=$?
check "without the extension the same case is a timeout (exit 1, got $rc)" "[ $rc -eq 1 ] && grep -q '/timeout/' $tmp/b.log"


# The zoo's naive plugin takes about a second a run of this case here (two runs: the determinism
# check); a case of work W adds 2 W / 1e8 s (4.2 s) to the 1 s watchdog.
ok_plugin="plugin:$build/mutants/libattnfuzz_mutant_ok.so"
"$bin" run --isolate --timeout 1 --backends "$ok_plugin" "$tmp/case.json" >"$tmp/d.log" 2>&1
rc=$?
check "a slow but correct backend on a large case is judged: the watchdog grew with the work (exit 0, got $rc)" \
  "[ $rc -eq 0 ] && grep -q 'watchdog 5.2' $tmp/d.log"
ATTNFUZZ_WATCHDOG_GROWTH_LIMIT_S=0 "$bin" run --isolate --timeout 1 --backends "$ok_plugin" "$tmp/case.json" >"$tmp/e.log" 2>&1
rc=$?
check "with the growth off it is a timeout of that backend (exit 1, got $rc)" "[ $rc -eq 1 ] && grep -q 'plugin.mutant_ok/-/-/timeout' $tmp/e.log"

start=$(date +%s)
ATTNFUZZ_HOSTILE=hang "$bin" run --isolate --timeout 2 --backends "reference,plugin:$build/plugins/libattnfuzz_plugin_hostile.so" "$tmp/case.json" >"$tmp/c.log" 2>&1
rc=$?
took=$(( $(date +%s) - start ))
check "a hanging backend is still a timeout, blamed on it (exit 1, got $rc)" "[ $rc -eq 1 ] && grep -q 'plugin.hostile/-/-/timeout' $tmp/c.log"
check "and it is killed well before the harness-work limit (${took} s)" "[ $took -lt 60 ]"
exit $fail
