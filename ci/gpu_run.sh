#!/usr/bin/env bash
# Runs on the GPU machine (device tool), from the repository root, with .carry/ from
# ci/gpu_bundle.sh. Uses the machine's own torch package for LibTorch (libtorch_cuda.so is
# loaded at run time), cuDNN and the CUDA runtime. Logs go to $OUT.
#   ci/gpu_run.sh env                        versions, GPU, `attnfuzz list`
#   ci/gpu_run.sh tests                      the gpu-labelled gtest binaries
#   ci/gpu_run.sh campaign SECONDS SEED BACKENDS [extra campaign args]
#   ci/gpu_run.sh oracles [bench args]       the GPU oracle set: tests, benchmark, sanitizers
#   ci/gpu_run.sh cuda-plugins [DEVICES]     tests/plugins/cuda_plugin_test.sh on the carried plugins
#   ci/gpu_run.sh ledger                     every docs/findings reproducer replayed; $OUT/LEDGER.md with its
#                                            "last replay" table rewritten (ci/ledger_update.py)
#   ci/gpu_run.sh aimed [SECONDS]            the support-envelope targets (docs/gpu.md, "Aimed cases on the
#                                            GPU"): the default campaign, a real-tier one, the judged rates
#                                            of bench_case_rate --aimed beside bench/plain_loop.py
#   ci/gpu_run.sh seeds                      the two seeds (docs/python-backends.md, "The seeds on the H200"):
#                                            corpus/jax-seed-*.json through the JAX adapters and torch.flash,
#                                            JAX's cuDNN path under deterministic ops, FlexCompiled's fp32 at
#                                            matmul_precision highest and high; one command at a time
#   ci/gpu_run.sh thirdparty [smoke|run|campaign|all] [SECONDS] [fa4|flashinfer]
#                                            FlashAttention-4 and FlashInfer (docs/python-backends.md,
#                                            "Third-party kernels"), after the parts of ci/thirdparty_carry.sh
#                                            were carried: unpacks what is there (ci/thirdparty_unpack.sh),
#                                            smoke: ci/thirdparty_smoke.py; run: three corpus cases through
#                                            every variant beside torch.flash; campaign: SECONDS (default 60)
#                                            per adapter (both, or the one named), real tier up to S=1024,
#                                            beside torch.flash
#   ci/gpu_run.sh pycampaign [SECONDS] [JOBS] the Python campaign figure (docs/python-backends.md, "Python
#                                            campaigns"): FlexEager, FlexCompiled, TritonFlash and JaxSdpa
#                                            (xla, cudnn) at the real tier up to S=1024, a cold invocation of
#                                            SECONDS/2 (default 240) then a --resume of SECONDS on the warm
#                                            compile caches, JOBS workers (default 6); their done and steady
#                                            lines, per-backend coverage, the plain loop in the same call
#   ci/gpu_run.sh pyeach [SECONDS] [JOBS] [NAMES...]
#                                            the same backends each in a campaign of its own (eager,
#                                            compiled, triton, xla, cudnn; default all), cold SECONDS/2
#                                            (default 120) then warm SECONDS, JOBS workers (default 4)
#   ci/gpu_run.sh breaking [SECONDS] [SEED] [campaign args]
#                                            a campaign of the default GPU backends where every case carries
#                                            values that break kernels (--breaking-share 1, docs/fuzzing.md),
#                                            each finding's reproducer through `run`, and the standalone
#                                            LSE probe docs/findings/standalone/lse_extreme_rows.py
#   ci/gpu_run.sh fuzz SECONDS [FORKS] [BACKENDS] [TIER]
#                                            the differential libFuzzer target over the GPU backends
#                                            (docs/fuzzing.md, "The differential target on real
#                                            backends"): fork mode, FORKS children (default 4), crashes
#                                            ignored and kept as artifacts, BACKENDS (default torch.flash,
#                                            torch.efficient,torch.cudnn,cudnn,cuda.flash) at TIER (default
#                                            real); its final stats, the features its counters reached,
#                                            every finding's reproducer under $OUT/fuzz/findings
#   ci/gpu_run.sh varlen [SECONDS] [SEED]   the varlen, paged and decode interfaces (docs/gpu.md, "Varlen
#                                            backends", "cuDNN varlen and paged"): the standalone probes of
#                                            the open varlen rows (.carry/bin/cudnn_paged_ragged_probe, one
#                                            variant a process; torch_varlen_misaligned.py), the varlen gpu
#                                            tests, FlexPaged and FlexPagedCompiled against float64, the CUDA
#                                            varlen plugin, side by side with a campaign of SECONDS (default
#                                            300) over the six varlen backends with cudnn and torch.flash,
#                                            --ragged-share 0.8. Everything comes back in four files (the device
#                                            returns few): varlen-summary.txt, varlen-logs.tgz, varlen-SEED.tgz
#                                            (the run directory) and the plugin test's own tarball; with
#                                            VARLEN_RESUME=path/to/varlen-SEED.tgz (carried) the campaign resumes it
#   ci/gpu_run.sh unverified                 what compiles in CI but has not run on a GPU, in one call (docs/gpu.md,
#                                            "Stop 65"): the gpu tests with the device mirror, the error model on the
#                                            device and dK's via blocks on; the real-tier and toy digests with each
#                                            piece off and on; S = 1088 off and on beside the plain loop; a sampled
#                                            profile of the 'on' case ($OUT/samples-1088-on.txt); memcheck and racecheck
#                                            of the new kernels. $OUT/unverified.txt, the logs in $OUT/unverified-logs.tgz
#   ci/gpu_run.sh zoo SECONDS [PARALLEL] [MUTANTS...]
#                                            a real-tier campaign per GPU mutant (.carry/mutants/
#                                            libattnfuzz_mutant_flash_*.so; default all), PARALLEL at a
#                                            time (default 4), each with 3 jobs; per mutant the
#                                            findings and the seconds to the first (docs/kernels.md);
#                                            ZOO_ARGS: more campaign arguments (--mutation-share 0 for blind)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# OUT, LD_LIBRARY_PATH (the machine's torch package), bin=.carry/bin, ATTNFUZZ_PLUGIN_PATH.
# shellcheck source=ci/gpu_env.sh
source "$root/ci/gpu_env.sh"
# The Python backends' environment, and a campaign of them as a cold invocation of SECS/2 then
# a --resume of SECS on the warm compile caches (pycampaign, pyeach):
#   py_cold_then_warm SECS JOBS BACKENDS CAMPAIGN_DIR LOG_PREFIX
py_env() {
  export ATTNFUZZ_PYTHON=${ATTNFUZZ_PYTHON:-python3} ATTNFUZZ_PY_PACKAGE_DIR=${ATTNFUZZ_PY_PACKAGE_DIR:-$root/python} ATTNFUZZ_PY_TIMEOUT_S=300
  export TORCHINDUCTOR_COMPILE_THREADS=1 OMP_NUM_THREADS=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
}
py_cold_then_warm() {
  local secs=$1 jobs=$2 backends=$3 camp=$4 log=$5 leg s resume
  for leg in cold warm; do
    s=$((secs / 2)) resume=()
    [ $leg = warm ] && s=$secs resume=(--resume)
    timeout -k 5 $((s + 200)) "$bin/attnfuzz" campaign --seconds "$s" --seed 62 --tier real --max-seq 1024 --jobs "$jobs" \
      --devices 0 --timeout 120 --no-minimize --quiet --backends "$backends" --out "$camp" "${resume[@]}" > "$log-$leg.log" 2>&1
    echo "=== $(basename "$log") $leg: exit $?"; grep -E "^(done|steady|coverage|aimed) |in flight" "$log-$leg.log"
    echo "compiles: $(grep -c 'compiled (' "$log-$leg.log")"
  done
}
mode=${1:-env}; shift || true
case "$mode" in
  env)
    { nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
      python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())'
      echo "harness $(cat "$root/.carry/commit")"
      "$bin/attnfuzz" list; } 2>&1 | tee "$OUT/env.log" ;;
  tests)
    for t in test_gpu_backends test_cudnn_backend; do
      [ -x "$bin/$t" ] || continue
      "$bin/$t" --gtest_output="xml:$OUT/$t.xml" 2>&1 | tee "$OUT/$t.log" | grep -E "^\[ *(RUN|OK|FAILED|SKIPPED|PASSED) |ran |skipped " ; done ;;
  campaign)
    secs=$1 seed=$2 backends=$3; shift 3
    "$bin/attnfuzz" campaign --seconds "$secs" --seed "$seed" --backends ${backends//,/ } --out "$OUT/campaign-$seed" "$@" 2>&1 \
      | tee "$OUT/campaign-$seed.log" | grep -v " elapsed, " | tail -40
    (cd "$OUT" && tar czf "campaign-$seed.tgz" "campaign-$seed" && rm -rf "campaign-$seed") ;;
  replay)
    # Each reproducer alone, with only the backend it blames, in its own process: a judgement
    # no other backend's CUDA error can touch.
    for f in "$@"; do
      # The blamed backend alone; a plugin (named plugin.X in signatures) with the backends recorded.
      b=$(python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); b=j["finding"]["signature"]["backend"]; print(",".join(j["backends"]) if b.startswith("plugin.") else b)' "$f" 2>/dev/null) || continue
      echo "$b $f"
    done | xargs -P 8 -L 1 sh -c '"$0" replay --timeout 120 --backends "$1" "$2" 2>&1 | grep -E "^(FAILING|fixed|UNTESTED|ERROR)"' "$bin/attnfuzz" \
      | sort | tee "$OUT/replay.log" ;;
  oracles)
    # The GPU oracle set (kernels/): its gpu tests, its benchmark at real sizes, and
    # compute-sanitizer (memcheck, racecheck) over a small run of every kernel.
    # The device mirror keeps copies in every test here, not only in its own (which set a budget).
    for t in test_gpu_oracles test_gpu_error_terms test_gpu_verdict; do
      ATTNFUZZ_DEVICE_MIRROR_MIB=4096 "$bin/$t" > "$OUT/$t.log" 2>&1
      echo "$t: exit $?"
      grep -E "^\[ *(OK|FAILED|SKIPPED|PASSED) |coverage|cases:|%|Failure|Expected|differs|outside" "$OUT/$t.log" | head -120
    done
    "$bin/bench_gpu_oracles" "$@" 2>&1 | tee "$OUT/bench_gpu_oracles.log"
    for tool in memcheck racecheck; do
      compute-sanitizer --tool "$tool" "$bin/bench_gpu_oracles" --quick > "$OUT/sanitizer-$tool.log" 2>&1
      echo "compute-sanitizer $tool: exit $?, $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/sanitizer-$tool.log" | tail -1)"
      compute-sanitizer --tool "$tool" "$bin/test_gpu_verdict" --gtest_filter='*SameBitsTwice' > "$OUT/sanitizer-verdict-$tool.log" 2>&1
      echo "compute-sanitizer $tool (verdict): exit $?, $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/sanitizer-verdict-$tool.log" | tail -1)"
    done ;;
  varlen)
    secs=${1:-300} seed=${2:-58} run="$OUT/varlen-$seed" resume=()
    [ -n "${VARLEN_RESUME:-}" ] && [ ! -d "$run" ] && tar xzf "$VARLEN_RESUME" -C "$OUT"
    [ -f "$run/state.json" ] && resume=(--resume)
    ( "$bin/attnfuzz" campaign --seconds "$secs" --minimize-seconds 60 --seed "$seed" --ragged-share 0.8 "${resume[@]}" \
        --backends cudnn.varlen,cudnn.paged,torch.flash.varlen,torch.efficient.varlen,cuda.flash.varlen,cuda.flash.paged,cudnn,torch.flash \
        --out "$run" \
        > "$OUT/varlen-campaign.log" 2>&1; echo "campaign exit $?" >> "$OUT/varlen-campaign.log" ) &
    ( if [ -x "$bin/cudnn_paged_ragged_probe" ]; then
        for v in all paged-k-headmajor paged-v-headmajor ragged-plus8 ragged-plus4 ragged-plus2 ragged-odd ragged-odd-q \
                 ragged-odd-k ragged-odd-v ragged-odd-o ragged-odd-ptr ragged-odd-align2; do
          timeout 60 "$bin/cudnn_paged_ragged_probe" "$v" 2>&1; echo "($v: exit $?)"
        done
      else echo "no .carry/bin/cudnn_paged_ragged_probe (ci/gpu_bundle.sh builds it where the frontend headers are)"; fi
      python3 "$root/docs/findings/standalone/torch_varlen_misaligned.py" ) > "$OUT/varlen-standalone.log" 2>&1 &
    ( for t in test_gpu_cudnn_varlen test_gpu_varlen test_gpu_flash_varlen; do
        "$bin/$t" --gtest_brief=1 > "$OUT/$t.log" 2>&1; echo "$t: exit $?" >> "$OUT/$t.log"
      done ) &
    ( export PYTHONPATH="$root/python" FLEX_PAGED_DEVICE=cuda
      for a in FlexPaged FlexPagedCompiled; do FLEX_PAGED_ADAPTER=$a python3 "$root/tests/python/test_flex_paged.py" 2>&1 | grep -v Warning; done
    ) > "$OUT/flex-paged.log" 2>&1 &
    ( CUDA_PLUGIN_TEST_ONLY=varlen "$root/tests/plugins/cuda_plugin_test.sh" "$bin/attnfuzz" "$root/.carry/plugins" "$root" 0 \
        > "$OUT/varlen-cuda-plugin.log" 2>&1 ) &
    wait
    { for f in test_gpu_cudnn_varlen.log test_gpu_varlen.log test_gpu_flash_varlen.log; do grep -E "^\[  (FAILED|PASSED) |exit" "$OUT/$f"; done
      tail -n 3 "$OUT/flex-paged.log" "$OUT/varlen-cuda-plugin.log"; tail -n 40 "$OUT/varlen-campaign.log"; } | tee "$OUT/varlen-summary.txt"
    (cd "$OUT" && tar czf "varlen-$seed.tgz" "varlen-$seed" && rm -rf "varlen-$seed" &&
       tar czf varlen-logs.tgz ./*.log && rm -f ./*.log) ;;
  cuda-plugins)  # the minimal CUDA plugin and its planted-bug variants through run, campaign, check
    "$root/tests/plugins/cuda_plugin_test.sh" "$bin/attnfuzz" "$root/.carry/plugins" "$root" "${1:-0}" 2>&1 | tee "$OUT/cuda-plugins.log" ;;
  ledger)
    # Every reproducer of docs/findings/ replayed as `replay` does, then LEDGER.md's "last
    # replay" table rewritten from the log into $OUT/LEDGER.md (copy it back into the checkout).
    "$0" replay $(find "$root/docs/findings" -name '*.json' | sort) > /dev/null
    cp "$root/docs/findings/LEDGER.md" "$OUT/LEDGER.md"
    python3 "$root/ci/ledger_update.py" "$OUT/replay.log" "$(cat "$root/.carry/commit")" "$(date -u +%Y-%m-%d)" "$OUT/LEDGER.md" ;;
  run)  # one case (or reproducer) through the given backends, in this process
    "$bin/attnfuzz" run --backends "$2" "$1" 2>&1 | tee -a "$OUT/run.log" ;;
  minimize)
    # Reproducers shrunk side by side (each in its own isolated workers), at most SECONDS each.
    secs=$1; shift
    mkdir -p "$OUT/min"
    for f in "$@"; do
      b=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["finding"]["signature"]["backend"])' "$f") || continue
      n=$(basename "$f" .json)
      (timeout "$secs" "$bin/attnfuzz" minimize --backends "$b" --out "$OUT/min/$n.min.json" "$f" > "$OUT/min/$n.log" 2>&1) &
    done
    wait
    tail -n 4 "$OUT"/min/*.log ;;
  aimed)
    secs=${1:-60}
    # The default campaign (no --backends: the fused GPU backends, the real tier, the aimed mix),
    # then the judged rates at the toy and real tiers beside the plain loop, one after the other
    # so neither shares the GPU with the other.
    "$bin/attnfuzz" campaign --seconds "$secs" --seed 24 --jobs 12 --devices 0 --no-minimize --out "$OUT/default" > "$OUT/default.log" 2>&1
    echo "default campaign: exit $?"; grep -E "^(done|coverage|aimed) " "$OUT/default.log"
    fused=cuda.flash,cudnn,torch.flash,torch.efficient,torch.cudnn
    for tier in toy real; do
      n=$([ "$tier" = toy ] && echo 2000 || echo 60)
      # Inside the envelopes only: one process judges them all, and a case just outside that
      # breaks the CUDA context (F-2) would end the measurement (a campaign restarts its worker).
      "$bin/bench_case_rate" --tier "$tier" --cases "$n" --seed 7 --backends "$fused" --aimed --edge-share 0 2>&1 | tee "$OUT/rate-$tier.log" | grep -E "cases/s|aimed|stopped"
      python3 "$root/bench/plain_loop.py" --tier "$tier" --seconds 20 --kernels flash 2>&1 | tee "$OUT/plain-$tier-flash.log"
      python3 "$root/bench/plain_loop.py" --tier "$tier" --seconds 20 --kernels flash,efficient,cudnn 2>&1 | tee "$OUT/plain-$tier-all.log"
    done
    (cd "$OUT" && tar czf default.tgz default && rm -rf default) ;;
  fuzz)
    secs=${1:?seconds}; forks=${2:-4}; backends=${3:-torch.flash,torch.efficient,torch.cudnn,cudnn,cuda.flash}; tier=${4:-real}
    mkdir -p "$OUT/fuzz/corpus" "$OUT/fuzz/artifacts"
    ATTNFUZZ_FUZZ_BACKENDS=$backends ATTNFUZZ_FUZZ_TIER=$tier ATTNFUZZ_FUZZ_OUT=$OUT/fuzz/findings ATTNFUZZ_FUZZ_KEEP_GOING=1 \
      timeout -k 10 $((secs + 120)) "$bin/fuzz_differential" -fork="$forks" -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 \
      -rss_limit_mb=65536 -timeout=300 -max_total_time="$secs" -print_final_stats=1 -artifact_prefix="$OUT/fuzz/artifacts/" \
      "$OUT/fuzz/corpus" > "$OUT/fuzz/log" 2>&1
    echo "fuzz: exit $?"
    grep -E "^#[0-9]+: cov|INFO: fuzzed for|crash|timeout" "$OUT/fuzz/log" | tail -8
    echo "corpus $(ls "$OUT/fuzz/corpus" | wc -l) inputs; artifacts $(ls "$OUT/fuzz/artifacts" | wc -l); findings: $(ls "$OUT/fuzz/findings" 2>/dev/null | wc -l)"
    ls "$OUT/fuzz/findings" 2>/dev/null | sed 's/-[0-9a-f]*\.json$//' | sort | uniq -c
    (cd "$OUT" && tar czf fuzz.tgz fuzz && rm -rf fuzz) ;;  # the device tool brings back a few files, not a tree
  unverified)
    L="$OUT/unverified-logs"; S="$OUT/unverified.txt"; mkdir -p "$L"
    say() { echo "$*" | tee -a "$S"; }
    on=(env ATTNFUZZ_DEVICE_MIRROR_MIB=4096 ATTNFUZZ_ERROR_MODEL=device ATTNFUZZ_GPU_VIA_BLOCKS=1)
    say "harness $(cat "$root/.carry/commit"); $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
    # The gpu tests with every piece on, two lanes side by side.
    ( for t in test_gpu_oracles test_gpu_error_terms test_gpu_verdict; do
        "${on[@]}" timeout 300 "$bin/$t" > "$L/$t.log" 2>&1; echo "$t: exit $? $(grep -E '^\[  (PASSED|FAILED) ' "$L/$t.log" | tr '\n' ' ')" >> "$L/tests.txt"; done ) &
    ( for t in test_gpu_backends test_cudnn_backend; do
        "${on[@]}" timeout 300 "$bin/$t" > "$L/$t.log" 2>&1; echo "$t: exit $? $(grep -E '^\[  (PASSED|FAILED) ' "$L/$t.log" | tr '\n' ' ')" >> "$L/tests.txt"; done ) &
    wait
    cat "$L/tests.txt" >> "$S"; grep -h -E "^\[  FAILED|Failure|Expected|Which is" "$L"/test_*.log | head -40 >> "$S"
    # The digests: the real tier's (torch.math.cuda) and the toy stream's (torch.flash), each piece off and on.
    for mode in host-sums default mirror model via all; do
      case $mode in
        host-sums) pre=(env ATTNFUZZ_VERDICT_SUMS=host) ;;
        default) pre=(env) ;;
        mirror) pre=(env ATTNFUZZ_DEVICE_MIRROR_MIB=4096) ;;
        model) pre=(env ATTNFUZZ_ERROR_MODEL=device) ;;
        via) pre=(env ATTNFUZZ_GPU_VIA_BLOCKS=1) ;;
        all) pre=("${on[@]}") ;;
      esac
      say "$mode: real $("${pre[@]}" timeout 120 "$bin/bench_case_rate" --tier real --cases 3 --seed 3 --backends torch.math.cuda 2>&1 | grep -o 'digest [0-9a-f]*'); toy $("${pre[@]}" timeout 120 "$bin/bench_case_rate" --tier toy --cases 400 --seed 7 --backends torch.flash 2>&1 | grep -oE '[0-9.]+ cases/s|digest [0-9a-f]*' | tr '\n' ' ')"
    done
    # S = 1088 off and on, the plain loop between; a sampled profile of 'on'.
    run1088() { "$@" timeout 150 "$bin/bench_gpu_run" "$root/bench/real_1088_causal_bf16.json" --backends torch.flash,cudnn --oracle-device cuda --reps 5 --no-determinism-check; }
    run1088 env > "$L/s1088-off.log" 2>&1
    timeout 60 python3 "$root/bench/plain_loop.py" --shape 1,8,1088,128 --causal --dtype bf16 --kernels flash,cudnn --seconds 8 > "$L/plain-1088.log" 2>&1
    run1088 "${on[@]}" > "$L/s1088-on.log" 2>&1
    for f in off on; do say "== S = 1088 $f"; tail -n 14 "$L/s1088-$f.log" >> "$S"; done
    tail -n 3 "$L/plain-1088.log" >> "$S"
    "${on[@]}" timeout 120 "$bin/bench_gpu_run" "$root/bench/real_1088_causal_bf16.json" --backends torch.flash,cudnn --oracle-device cuda --reps 5 \
      --no-determinism-check --sample "$OUT/samples-1088-on.txt" > "$L/s1088-sample.log" 2>&1
    # compute-sanitizer over the new kernels at small sizes.
    for tool in memcheck racecheck; do
      for f in 'GpuErrorModel*' 'GpuErrorTerms.MatchTheCpuViaBlocks'; do
        "${on[@]}" timeout 300 compute-sanitizer --tool "$tool" "$bin/test_gpu_error_terms" --gtest_filter="$f" > "$L/san.log" 2>&1
        say "$tool $f: exit $? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$L/san.log" | tail -1)"
      done
      "${on[@]}" timeout 300 compute-sanitizer --tool "$tool" "$bin/test_gpu_oracles" --gtest_filter='DeviceMirror*' > "$L/san.log" 2>&1
      say "$tool DeviceMirror*: exit $? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$L/san.log" | tail -1)"
    done
    (cd "$OUT" && tar czf unverified-logs.tgz unverified-logs && rm -rf unverified-logs) ;;
  zoo)
    secs=$1 parallel=${2:-4}; shift; shift || true
    mutants=("$@")
    [ ${#mutants[@]} -gt 0 ] || mutants=($(cd "$root/.carry/mutants" && ls libattnfuzz_mutant_flash_*.so | sed 's/^libattnfuzz_mutant_//; s/\.so$//'))
    mkdir -p "$OUT/zoo"
    for m in "${mutants[@]}"; do echo "$m"; done | xargs -P "$parallel" -I{} sh -c '
      m=$1 secs=$2 bin=$3 root=$4 out=$5
      # Cut off ZOO_GRACE_S (default 60) s after the budget: cases in flight finish, and the final
      # report re-runs every finding on the host for its pictures.
      timeout -k 5 $((secs + ${ZOO_GRACE_S:-60})) "$bin/attnfuzz" campaign --seconds "$secs" --seed 41 --jobs 3 --tier real --no-minimize \
        --backends "plugin:$root/.carry/mutants/libattnfuzz_mutant_$m.so" --out "$out/zoo/$m" ${ZOO_ARGS:-} > "$out/zoo/$m.log" 2>&1
      rc=$?
      # The first progress line (every 5 s) that shows a finding: the seconds to the first one.
      t=$(grep -m1 -E "elapsed, .*findings: [^n]" "$out/zoo/$m.log" | sed -E "s/.* ([0-9]+) s elapsed.*/\1/")
      n=$(ls "$out/zoo/$m/findings" 2>/dev/null | grep -c "\.json$")
      echo "zoo $m: exit $rc, $n finding file(s), first within ${t:-no} s; $(grep -E "^done " "$out/zoo/$m.log" | tail -1)"
    ' _ {} "$secs" "$bin" "$root" "$OUT" | sort | tee "$OUT/zoo.log"
    (cd "$OUT" && tar czf zoo.tgz zoo && rm -rf zoo) ;;
  seeds)
    # One command at a time: JAX and FlexAttention compile on first use, and every Python
    # backend is a process of its own on the one GPU.
    export ATTNFUZZ_PYTHON=${ATTNFUZZ_PYTHON:-python3} ATTNFUZZ_PY_PACKAGE_DIR=$root/python
    export ATTNFUZZ_PY_TIMEOUT_S=${ATTNFUZZ_PY_TIMEOUT_S:-900} ATTNFUZZ_PY_START_TIMEOUT_S=${ATTNFUZZ_PY_START_TIMEOUT_S:-600}
    jax=attnfuzz_py.adapters.jax_sdpa flex=attnfuzz_py.adapters.flex
    backends="py:$jax:JaxSdpa?implementation=xla,py:$jax:JaxSdpa?implementation=cudnn,py:$jax:JaxSdpa?implementation=xla&precision=highest,py:$jax:JaxF32Logits,torch.flash"
    for d in bf16 fp16 fp32; do
      echo "=== jax seed $d"
      "$bin/attnfuzz" run "$root/corpus/jax-seed-$d.json" --reference cuda --no-determinism-check --backends "$backends" 2>&1 | grep -v "Source Location"
    done >"$OUT/jax-seed.log"
    XLA_FLAGS=--xla_gpu_deterministic_ops=true "$bin/attnfuzz" run "$root/corpus/jax-seed-bf16.json" --reference cuda \
      --backends "py:$jax:JaxSdpa?implementation=cudnn" >"$OUT/jax-cudnn-deterministic.log" 2>&1
    for p in highest high; do
      echo "=== FlexCompiled matmul_precision=$p"
      "$bin/attnfuzz" run "$root/corpus/jax-seed-fp32.json" --reference cuda --no-determinism-check \
        --backends "py:$flex:FlexCompiled?device=cuda&shapes=static&matmul_precision=$p" 2>&1
    done >"$OUT/flex-tf32.log"
    grep -h "finding(s)" "$OUT"/jax-seed.log "$OUT"/jax-cudnn-deterministic.log "$OUT"/flex-tf32.log ;;
  pycampaign)
    secs=${1:-240} jobs=${2:-6}
    py_env
    jax=attnfuzz_py.adapters.jax_sdpa flex=attnfuzz_py.adapters.flex
    py="py:$flex:FlexEager?device=cuda,py:$flex:FlexCompiled?device=cuda,py:attnfuzz_py.adapters.triton_flash:TritonFlash"
    py="$py,py:$jax:JaxSdpa?implementation=xla,py:$jax:JaxSdpa?implementation=cudnn"
    camp=$OUT/pycampaign
    py_cold_then_warm "$secs" "$jobs" "$py" "$camp" "$OUT/pycampaign"
    du -sh "$camp/compile-cache"/* 2>/dev/null
    python3 "$root/bench/plain_loop.py" --tier real --seconds 20 2>&1 | tail -4
    (cd "$OUT" && tar czf pycampaign.tgz --exclude=compile-cache --exclude='*.html' pycampaign && rm -rf pycampaign) ;;
  pyeach)
    # Each Python backend in a campaign of its own (no other backend's processes on the GPU), a
    # cold invocation of SECONDS/2 then a --resume of SECONDS on its warm compile cache, JOBS
    # workers; NAMES (default all five of pycampaign): eager, compiled, triton, xla, cudnn.
    # ATTNFUZZ_PY_PACKAGE_DIR and PYEACH_TAG: another attnfuzz_py, its runs tagged. Each judged
    # case also runs the harness's GPU oracles: the plain loop is measured beside it.
    secs=${1:-120} jobs=${2:-4}; shift 2 2>/dev/null || shift $#
    py_env
    jax=attnfuzz_py.adapters.jax_sdpa flex=attnfuzz_py.adapters.flex
    for name in "${@:-eager compiled triton xla cudnn}"; do for n in $name; do
      case $n in
        eager) b="py:$flex:FlexEager?device=cuda" ;; compiled) b="py:$flex:FlexCompiled?device=cuda" ;;
        triton) b="py:attnfuzz_py.adapters.triton_flash:TritonFlash" ;;
        xla) b="py:$jax:JaxSdpa?implementation=xla" ;; cudnn) b="py:$jax:JaxSdpa?implementation=cudnn" ;;
        *) echo "pyeach: unknown backend $n" >&2; exit 2 ;;
      esac
      tag=pyeach${PYEACH_TAG:+-$PYEACH_TAG}-$n
      py_cold_then_warm "$secs" "$jobs" "$b" "$OUT/$tag" "$OUT/$tag"
      (cd "$OUT" && tar czf "$tag.tgz" --exclude=compile-cache --exclude='*.html' "$tag" && rm -rf "$tag")
    done; done
    python3 "$root/bench/plain_loop.py" --tier real --seconds 20 2>&1 | tail -4 ;;
  thirdparty)
    step=${1:-all} secs=${2:-60} which=${3:-both}
    cd "$root" && . ci/thirdparty_unpack.sh > "$OUT/3p-unpack.log" 2>&1
    cat "$OUT/3p-unpack.log"
    # The JIT caches live in .site-3p (git-ignored): kept from call to call while the machine is held.
    export ATTNFUZZ_PYTHON=${ATTNFUZZ_PYTHON:-python3} ATTNFUZZ_PY_PACKAGE_DIR=$root/python
    export ATTNFUZZ_PY_TIMEOUT_S=${ATTNFUZZ_PY_TIMEOUT_S:-900} ATTNFUZZ_PY_START_TIMEOUT_S=${ATTNFUZZ_PY_START_TIMEOUT_S:-600}
    fa4=py:attnfuzz_py.adapters.fa4:FA4 fi=py:attnfuzz_py.adapters.flashinfer:FlashInfer
    if [ "$step" = smoke ] || [ "$step" = all ]; then
      timeout 540 python3 ci/thirdparty_smoke.py > "$OUT/3p-smoke.log" 2>&1
      echo "smoke: exit $?"; grep -E "^SMOKE|^  (cuda-bindings|flash|nvidia-cutlass|apache)|release" "$OUT/3p-smoke.log"
    fi
    if [ "$step" = run ] || [ "$step" = all ]; then
      # bf16 cases through every variant (FlashInfer's modules: the smoke's two, and fa2 for Dqk=64, Dv=32);
      # the fp16 one through FA4 only (each FlashInfer dtype is another nvcc module, minutes)
      for c in jax-seed-bf16 gqa-bf16-kv-split jax-seed-fp16; do
        b="$fa4,$fa4?deterministic=true&backward=explicit,$fi,$fi?backend=fa2&mask=custom,torch.flash"
        [ "$c" = jax-seed-fp16 ] && b="$fa4,$fa4?deterministic=true&backward=explicit,torch.flash"
        timeout 540 "$bin/attnfuzz" run "corpus/$c.json" --reference cuda --backends "$b" > "$OUT/3p-run-$c.log" 2>&1
        echo "run $c: exit $?"; grep -E "^py\.|finding\(s\)" "$OUT/3p-run-$c.log" | grep -vE " ok +(row|element|tile|head)" | head -30
      done
    fi
    if [ "$step" = campaign ] || [ "$step" = all ]; then
      for b in "$fa4" "$fi"; do
        n=$(echo "$b" | sed 's/.*://; s/[^A-Za-z0-9]/_/g')
        case "$which:$n" in both:*|fa4:FA4|flashinfer:FlashInfer) ;; *) continue ;; esac
        timeout -k 5 $((secs + 240)) "$bin/attnfuzz" campaign --seconds "$secs" --seed 28 --tier real --max-seq 1024 --jobs 2 --minimize-seconds 60 \
          --backends "$b" torch.flash --out "$OUT/3p-campaign-$n" > "$OUT/3p-campaign-$n.log" 2>&1
        echo "campaign $n: exit $?"; grep -E "^(done|coverage|aimed) |compiled" "$OUT/3p-campaign-$n.log" | tail -8
        (cd "$OUT" && tar czf "3p-campaign-$n.tgz" "3p-campaign-$n" && rm -rf "3p-campaign-$n")
      done
    fi ;;
  breaking)
    # The values that break kernels (docs/fuzzing.md) on the default GPU backends: a campaign where
    # every case carries one (--breaking-share 1), known deviations counted apart, then each
    # finding's reproducer through `run` with the blamed backend (its table, per tensor), and
    # the standalone LSE probe (docs/findings/standalone/lse_extreme_rows.py).
    secs=${1:-240} seed=${2:-45}; shift 2 2>/dev/null || shift $#
    camp=$OUT/breaking-$seed
    timeout -k 5 $((secs + 240)) "$bin/attnfuzz" campaign --seconds "$secs" --seed "$seed" --jobs 12 --devices 0 --timeout 120 \
      --breaking-share 1 --no-minimize --known "$root/docs/findings/repro" --out "$camp" "$@" > "$OUT/breaking-$seed.log" 2>&1
    echo "breaking campaign: exit $?"; grep -E "^(done|coverage|aimed|known) " "$OUT/breaking-$seed.log"
    # Six at a time, each in its own process, at most 90 s each.
    ls "$camp"/findings/*.json 2>/dev/null | xargs -r -P 6 -I{} sh -c '
      b=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[\"finding\"][\"signature\"][\"backend\"])" "$1") || exit 0
      { echo "=== $(basename "$1") ($b)"; timeout 90 "$0" run --no-determinism-check --backends "$b" "$1" 2>&1 | grep -vE "^ *$" | head -60; } > "$1.run.txt"
    ' "$bin/attnfuzz" {}
    cat "$camp"/findings/*.run.txt > "$OUT/breaking-runs.log" 2>/dev/null; rm -f "$camp"/findings/*.run.txt
    grep -c "^===" "$OUT/breaking-runs.log"
    python3 "$root/docs/findings/standalone/lse_extreme_rows.py" > "$OUT/lse_extreme_rows.log" 2>&1; echo "lse probe: exit $?"
    (cd "$OUT" && tar czf "breaking-$seed.tgz" --exclude='*.html' "breaking-$seed" && rm -rf "breaking-$seed") ;;
  *) echo "usage: $0 env|tests|oracles|campaign SECONDS SEED BACKENDS|cuda-plugins [DEVICES]|replay FILES...|ledger|minimize SECONDS FILES...|aimed [SECONDS]|seeds|thirdparty [smoke|run|campaign|all] [SECONDS] [fa4|flashinfer]|pycampaign [SECONDS] [JOBS]|pyeach [SECONDS] [JOBS] [NAMES...]|zoo SECONDS [PARALLEL] [MUTANTS...]|breaking [SECONDS] [SEED] [campaign args]|unverified" >&2; exit 2 ;;
esac
