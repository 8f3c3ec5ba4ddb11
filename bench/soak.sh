#!/usr/bin/env bash
# 30-minute CPU campaign; samples the resident memory of the campaign and its worker every 30 s.
cd "${SOAK_DIR:-/tmp/soak}"
./attnfuzz campaign --seconds 1800 --jobs 1 --out out --no-minimize \
  --backends torch.math,torch.sdpa.math,torch.sdpa.cpu_flash,plugin:"${MUTANT_OK:?path to libattnfuzz_mutant_ok.so}" > campaign.log 2>&1 &
pid=$!
echo "t_s,parent_rss_kb,workers_rss_kb" > rss.csv
start=$(date +%s)
while kill -0 $pid 2>/dev/null; do
  p=$(awk '/VmRSS/{print $2}' /proc/$pid/status 2>/dev/null)
  w=0; for c in $(pgrep -P $pid); do r=$(awk '/VmRSS/{print $2}' /proc/$c/status 2>/dev/null); w=$((w + ${r:-0})); done
  echo "$(( $(date +%s) - start )),${p:-0},$w" >> rss.csv
  sleep 30
done
echo done >> rss.csv
