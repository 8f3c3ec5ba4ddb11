#!/usr/bin/env bash
# Stages a gpu build and the python package into a carry folder for the device (docs/gpu.md):
#   ci/python_campaign/stage.sh <checkout> <carry folder, e.g. .carry-pyflex>
# then, on the device: OUT=... SECONDS_TOTAL=540 bash <carry folder>/campaign.sh
set -euo pipefail
W=$(cd "$1" && pwd)
mkdir -p "$2"
C=$(cd "$2" && pwd)
S=$(cd "$(dirname "$0")" && pwd)
cp "$S/campaign.sh" "$S/side_checks.sh" "$C/"
mkdir -p "$C/cases"; cp "$S/novalidchoices-d256-dv137-bf16.json" "$C/cases/"
rm -rf "$C/bin" "$C/lib" "$C/python"; mkdir -p "$C/bin" "$C/lib" "$C/python"
strip -o "$C/bin/attnfuzz" "$W/build/gpu/attnfuzz"
cp -L "$(ldd "$C/bin/attnfuzz" | awk '/libfmt/ {print $3}')" "$C/lib/"
cp -r "$W/python/attnfuzz_py" "$C/python/"
find "$C/python" -name __pycache__ -prune -exec rm -rf {} +
cp "$W"/docs/findings/standalone/flex_*.py "$C/"
(cd "$W" && git log --oneline -1) > "$C/STAGED_FROM"
du -sh "$C"
