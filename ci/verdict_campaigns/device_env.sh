# Sourced by the device scripts of this folder (run7b.sh, run8.sh, run9.sh), from the carry folder $C they
# are staged into (stage.sh): the machine's own torch package for LibTorch, cuDNN and CUDA, the
# staged binaries and plugins, the backend lists, starting a campaign, and packing $OUT.
torch_dir=$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))')
site=$(dirname "$torch_dir")
export LD_LIBRARY_PATH="$torch_dir/lib:$site/nvidia/cudnn/lib:$site/nvidia/cu13/lib:$C/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
A="$C/bin/attnfuzz"
OK="plugin:$C/lib/libattnfuzz_mutant_ok.so"
CPU5="torch.math,torch.sdpa.math,torch.sdpa.cpu_flash,$OK,plugin:$C/lib/libattnfuzz_plugin_minimal.so"
LIBTORCH="torch.flash,torch.efficient,torch.cudnn,cudnn"

# Starts one campaign in the background, stopping at $S seconds ($SEED, known deviations in
# $KNOWN, results under $CAMPS, its log under $OUT/logs; $GRACE seconds for cases in flight).
camp() {  # camp NAME JOBS TIMEOUT ARGS...
  local name=$1 jobs=$2 to=$3; shift 3
  ( timeout $(( S + GRACE )) "$A" campaign --seconds "$S" --seed "$SEED" --jobs "$jobs" --timeout "$to" --no-minimize --quiet \
      --known "$KNOWN" --out "$CAMPS/$name" "$@" > "$OUT/logs/camp-$name.log" 2>&1
    echo "campaign $name exit $?" >> "$OUT/logs/camp-$name.log" ) &
}

# Starts one bench_sensitivity process in the background (GPU oracle set), its CSV and log under
# $OUT/logs/sens.
sens() {  # sens NAME ARGS...: one bench_sensitivity process, its CSV and log under logs/sens
  local name=$1; shift
  ( timeout 300 "$C/bin/bench_sensitivity" "$@" --oracle-device cuda --csv "$OUT/logs/sens/$name.csv" > "$OUT/logs/sens/$name.log" 2>&1
    echo "exit $?" >> "$OUT/logs/sens/$name.log" ) &
}

# Prints the end of every log, then packs the campaigns (without reports) and the logs: at most
# two files come back from $OUT.
pack_outputs() {  # pack_outputs CAMPS_DIR
  local camps=$1
  for f in "$OUT"/logs/*.log; do echo "=== $(basename "$f")"; grep -vE "elapsed|^\[ RUN|^\[       OK" "$f" | tail -16 | cut -c1-300; done
  for n in "$camps"/*; do [ -f "$n/summary.json" ] && cp "$n/summary.json" "$OUT/logs/summary-$(basename "$n").json"; done
  (cd "$camps" && tar czf "$OUT/camps.tgz" --exclude='*.html' . 2>/dev/null && cd .. && rm -rf "$camps")
  (cd "$OUT" && tar czf logs.tgz logs && rm -rf logs)
}
