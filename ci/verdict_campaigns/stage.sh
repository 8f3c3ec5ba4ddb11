#!/usr/bin/env bash
# Stages a gpu build's binaries and the CPU plugins into this carry folder: stage.sh <build-dir>
set -euo pipefail
C=$(cd "$(dirname "$0")" && pwd)
B=$1
rm -rf "$C/bin" "$C/lib"; mkdir -p "$C/bin" "$C/lib"
for t in attnfuzz tests/test_gpu_error_terms tests/test_gpu_oracles; do
  [ -f "$B/$t" ] && strip -o "$C/bin/$(basename "$t")" "$B/$t"
done
for so in mutants/libattnfuzz_mutant_ok.so plugins/libattnfuzz_plugin_minimal.so; do strip -o "$C/lib/$(basename "$so")" "$B/$so"; done
cp -L "$(ldd "$C/bin/attnfuzz" | awk '/libfmt/ {print $3}')" "$C/lib/"
du -sh "$C"
