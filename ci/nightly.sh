#!/usr/bin/env bash
# Nightly campaign on one machine: the gpu build, one worker per GPU, a time budget, minimized
# findings, an HTML report; then replay of the regression corpus.
#   SECONDS_BUDGET=14400 SHARD=0/1 ci/nightly.sh [--backends ...]
# The build is explicit, never guessed from nvcc: ATTNFUZZ_BUILD (default gpu: build/gpu/attnfuzz,
# run as it is; cpu, or an absolute path to a binary), through ./attnfuzz, which exits 2 naming the
# missing binary and how to build it. With the gpu build a GPU must be visible (ATTNFUZZ_REQUIRE_GPU,
# default 1 for gpu): a GPU nightly that would test the CPU backends alone fails instead.
# ATTNFUZZ_BUILD=cpu ci/nightly.sh is the CPU nightly (one worker per core).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
export ATTNFUZZ_BUILD=${ATTNFUZZ_BUILD:-gpu}
if [ "$ATTNFUZZ_BUILD" = gpu ]; then default_require=1; else default_require=0; fi
export ATTNFUZZ_REQUIRE_GPU=${ATTNFUZZ_REQUIRE_GPU:-$default_require}
# The binary and the GPU are checked once, before anything runs (exit 2 with the reason).
"$root/attnfuzz" --help >/dev/null || exit $?
stamp=$(date -u +%Y%m%d)
shard=${SHARD:-0/1}
out=${OUT:-nightly-$stamp-${shard//\//of}}  # OUT is used as given (a path); the default name has no slash
devices=""
if command -v nvidia-smi >/dev/null 2>&1; then
  devices=$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | paste -sd, -) || devices=""
fi
args=(campaign --seed "${SEED:-$stamp}" --seconds "${SECONDS_BUDGET:-3600}" --shard "${SHARD:-0/1}" --out "$out")
[ -n "$devices" ] && args+=(--devices "$devices")
echo "nightly: ATTNFUZZ_BUILD=$ATTNFUZZ_BUILD${devices:+, devices $devices}" >&2
set +e
"$root/attnfuzz" "${args[@]}" "$@"
rc=$?
"$root/attnfuzz" replay "$root/corpus/repro" --junit "$out/replay.xml"
exit $(( rc > 1 ? rc : 0 ))  # findings are the product, not a failure of the job
