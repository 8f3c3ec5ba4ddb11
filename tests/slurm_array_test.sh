#!/usr/bin/env bash
# The Slurm job-array example on a real Slurm: brings up a private single-node cluster
# (ci/slurm/local-cluster.sh), submits a 4-task array of a campaign through
# ci/slurm/attnfuzz-array.sbatch (fixed seed, case budget per shard, CPU backends and two
# mutants, so there are findings), merges the shards, and checks that the merged findings equal
# those of one unsharded run of the same seed and 4x the budget: the summary's signatures and
# classes, the finding files' names, and per file the signature and case index of its
# representative. Exit 77 (skipped, with the reason) where Slurm cannot be installed or started;
# with CI_REQUIRE_SLURM=1 (ci/test.sh exports it when it runs as root) that is a failure instead.
#   tests/slurm_array_test.sh BUILD/attnfuzz SOURCE_DIR
set -u
bin=$1
src=$2
skip() {
  if [ "${CI_REQUIRE_SLURM:-0}" = 1 ]; then
    echo "FAIL: this test would skip ($*), but CI_REQUIRE_SLURM=1 says this machine runs it (ci/test.sh sets it when it runs as root)"
    exit 1
  fi
  echo "SKIP: $*"; exit 77
}

[ "$(id -u)" = 0 ] || skip "a single-node Slurm needs root (slurmd starts jobs); run as root, as CI does"
have_slurm() { for c in munged slurmctld slurmd sbatch squeue sinfo scancel; do command -v $c >/dev/null 2>&1 || return 1; done; }
if ! have_slurm && command -v apt-get >/dev/null 2>&1; then
  # ci/setup.sh installs them; this is for a build whose setup predates the test.
  echo "installing slurmctld slurmd slurm-client munge (apt-get)"
  pkgs=(slurmctld slurmd slurm-client munge)
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null 2>&1 ||
    { apt-get update -qq >/dev/null 2>&1; apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null 2>&1; }
fi
have_slurm || skip "Slurm and munge are not installed and apt-get could not install them (slurmctld slurmd slurm-client munge)"

tmp=$(mktemp -d /tmp/attnfuzz-slurm.XXXXXX)
cluster=$tmp/cluster
# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {
  kill "$watcher" 2>/dev/null
  "$src/ci/slurm/local-cluster.sh" down "$cluster" >/dev/null 2>&1
  rm -rf "$tmp"
}
# If this script is killed outright (a ctest timeout), the watcher still stops the daemons.
(while kill -0 $$ 2>/dev/null; do sleep 1; done
 "$src/ci/slurm/local-cluster.sh" down "$cluster"; rm -rf "$tmp") >/dev/null 2>&1 </dev/null &
watcher=$!
trap cleanup EXIT
trap 'exit 130' INT TERM

start=$(date +%s)
"$src/ci/slurm/local-cluster.sh" up "$cluster"
case $? in
  0) ;;
  3) skip "Slurm or munge is not complete on this machine" ;;
  *) tail -n 20 "$cluster"/log/* 2>/dev/null; skip "the single-node Slurm did not start (logs above)" ;;
esac
# shellcheck source=/dev/null
source "$cluster/env"
echo "cluster up in $(( $(date +%s) - start )) s"

mutants=$(dirname "$bin")/mutants
backends="torch.math,plugin:$mutants/libattnfuzz_mutant_masked_rows_nan.so,plugin:$mutants/libattnfuzz_mutant_causal_align.so"
seed=7 shards=4 per_shard=20
# toy: small cases, fast; blind: a guided stream depends on the corpus each shard saw, so only
# blind shards draw exactly the unsharded run's cases
common=(--tier toy --jobs 1 --quiet --mutation-share 0 --backends "$backends")

mkdir "$tmp/array" && cd "$tmp/array" || exit 1
job=$(ATTNFUZZ=$bin SEED=$seed SECONDS_BUDGET=600 SHARD_PREFIX=shard \
      sbatch --parsable --array=0-$((shards - 1)) --cpus-per-task=1 \
      "$src/ci/slurm/attnfuzz-array.sbatch" --cases "$per_shard" "${common[@]}") || { echo "FAIL: sbatch refused the array"; exit 1; }
echo "submitted array job $job"
# Poll rather than `sbatch --wait`, whose back-off adds up to half a minute here.
for _ in $(seq 600); do
  [ -z "$(squeue -h -j "$job" -o %i 2>/dev/null)" ] && break
  sleep 0.5
done
[ -z "$(squeue -h -j "$job" -o %i 2>/dev/null)" ] || { echo "FAIL: array $job not done after 300 s"; squeue; exit 1; }
echo "array done $(( $(date +%s) - start )) s after the start"
fail=0
tasks=$(scontrol -o show job "$job")
for i in $(seq 0 $((shards - 1))); do
  line=$(grep -E "ArrayTaskId=$i " <<<"$tasks")
  state=$(grep -oE 'JobState=[A-Z_]+' <<<"$line"); code=$(grep -oE ' ExitCode=[0-9:]+' <<<"$line")
  echo "task $i: $state$code"
  [ "$state $code" = "JobState=COMPLETED  ExitCode=0:0" ] || { fail=1; echo "FAIL: task $i"; cat "attnfuzz-${job}_$i.log"; }
done

"$bin" merge $(seq -f 'shard-%g' 0 $((shards - 1))) --out merged || { echo "FAIL: merge"; exit 1; }
"$bin" campaign --seed "$seed" --shard 0/1 --seconds 600 --cases $((shards * per_shard)) "${common[@]}" --out unsharded >/dev/null
[ $? -le 1 ] || { echo "FAIL: the unsharded campaign"; exit 1; }
echo "merged and unsharded runs done $(( $(date +%s) - start )) s after the start"

python3 - "$tmp/array/merged" "$tmp/array/unsharded" $((shards * per_shard)) <<'EOF' || fail=1
import json, os, sys
merged, unsharded, cases = sys.argv[1], sys.argv[2], int(sys.argv[3])

def run(d):
    s = json.load(open(os.path.join(d, "summary.json")))
    files = {}
    for f in sorted(os.listdir(os.path.join(d, "findings"))):
        r = json.load(open(os.path.join(d, "findings", f)))
        files[f] = (r["finding"]["key"], r.get("case_index"))
    return s, files

def bucket(sig):  # the store's bucket: backend/composition/tensor/class
    b, comp, tensor, cls = sig.split("/")[:4]
    return f"{b}/{comp}/{tensor}/{cls}"

(sm, fm), (su, fu) = run(merged), run(unsharded)
ok = True
def check(what, a, b):
    global ok
    if a == b:
        return
    ok = False
    print(f"FAIL: {what} differ")
    if isinstance(a, list):
        a, b = set(a), set(b)
        print("  only in merged:   ", sorted(a - b))
        print("  only in unsharded:", sorted(b - a))
    else:
        print(f"  merged:    {a}\n  unsharded: {b}")

print(f"unsharded: {len(su['signatures'])} signatures, {len(fu)} finding files; merged: {len(sm['signatures'])} signatures, {len(fm)} finding files")
if not su["signatures"]:
    print("FAIL: the unsharded run found nothing: the comparison would be empty"); ok = False
check("cases", sm["cases"], su["cases"])
if su["cases"] != cases:
    print(f"FAIL: the unsharded run ran {su['cases']} cases, not {cases}"); ok = False
buckets_m, buckets_u = sorted({bucket(s) for s in sm["signatures"]}), sorted({bucket(s) for s in su["signatures"]})
check("buckets of the summary signatures", buckets_m, buckets_u)
bucket_sets_agree = buckets_m == buckets_u
check("summary signatures", sm["signatures"], su["signatures"])
check("findings by class", sm.get("findings_by_class"), su.get("findings_by_class"))
check("finding file names", sorted(fm), sorted(fu))
for f in sorted(set(fm) & set(fu)):
    if fm[f] != fu[f]:
        ok = False
        print(f"FAIL: {f}: merged keeps {fm[f]}, the unsharded run {fu[f]} (signature, case index)")
if not ok and bucket_sets_agree and sorted(fm) == sorted(fu):
    print("NOTE: the buckets and file names agree and only signatures or representatives differ: "
          "merge deduplicates otherwise than the campaign's store (issue 14, 'merge and the store disagree')")
sys.exit(0 if ok else 1)
EOF
echo "total $(( $(date +%s) - start )) s"
[ $fail = 0 ] && echo "PASS: the merged Slurm array equals the unsharded run"
exit $fail
