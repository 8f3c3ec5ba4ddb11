#!/usr/bin/env bash
# Campaign throughput (cases/s, isolation included) for a few backend mixes, 15 s each.
#   bench/campaign_throughput.sh [build dir, default build/cpu]
set -euo pipefail
b=${1:-build/cpu}
m=$b/mutants/libattnfuzz_mutant_ok.so
p=$b/plugins/libattnfuzz_plugin_minimal.so
for mix in "torch.sdpa.cpu_flash,plugin:$m" "torch.math,torch.sdpa.cpu_flash" "plugin:$m,plugin:$p" "torch.math,torch.sdpa.math,torch.sdpa.cpu_flash,plugin:$m"; do
  out=$(mktemp -d)
  echo "== reference + $mix"
  "$b/attnfuzz" campaign --seconds 15 --jobs "$(nproc)" --max-seq 64 --no-minimize --quiet --out "$out/run" --backends "$mix" | grep done
  rm -rf "$out"
done
