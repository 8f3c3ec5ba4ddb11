#!/usr/bin/env bash
# A short campaign against part of the mutant zoo leaves minimized reproducers and a
# report.html; headless Chromium renders it to a screenshot.
set -u
bin=$1
mutants=$(dirname "$bin")/mutants
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
backends="plugin:$mutants/libattnfuzz_mutant_ok.so,plugin:$mutants/libattnfuzz_mutant_ignores_dlse.so,plugin:$mutants/libattnfuzz_mutant_crash.so"
"$bin" campaign --seconds 8 --jobs 2 --quiet --out "$out/run" --backends "$backends" >"$out/log" 2>&1
echo "campaign exit $? ($(grep -c . "$out/log") lines)"
fail=0
ls "$out/run/findings" | grep -q '\.min\.json$' || { echo "FAIL: no minimized reproducer"; fail=1; }
html="$out/run/report.html"
[ -s "$html" ] || { echo "FAIL: no report.html"; exit 1; }
for want in "Summary" "Findings" "Likely root causes" "plugin.mutant_ignores_dlse</td><td>backward" "attnfuzz replay" "<svg" "error histogram" "along the sequence" "crash"; do
  grep -q "$want" "$html" || { echo "FAIL: report lacks '$want'"; fail=1; }
done
grep -q "http" "$html" && { echo "FAIL: the report refers to the network"; fail=1; }
browser=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$browser" ]; then
  echo "FAIL: chromium not installed (ci/setup.sh installs it)"
  exit 1
fi
timeout 120 "$browser" --headless --no-sandbox --disable-gpu --screenshot="$out/shot.png" --window-size=1200,1600 "file://$html" >/dev/null 2>&1
size=$(stat -c %s "$out/shot.png" 2>/dev/null || echo 0)
echo "screenshot $size bytes"
[ "$size" -gt 20000 ] || { echo "FAIL: screenshot missing or blank"; fail=1; }
[ -n "${ATTNFUZZ_KEEP_SCREENSHOT:-}" ] && cp "$out/shot.png" "$ATTNFUZZ_KEEP_SCREENSHOT"
exit $fail
