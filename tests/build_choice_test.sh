#!/usr/bin/env bash
# Scale-out runs the gpu build explicitly (docs/campaigns.md, "Scale-out"), proved without a GPU
# and without building anything: a copy of ./attnfuzz, ci/nightly.sh and the Slurm script in a
# scratch tree whose build/{gpu,cpu}/attnfuzz are fakes that log how they were called, a stub
# nvidia-smi on PATH (listing one GPU, or none), and stub cmake and nvcc that log any call.
#  - ATTNFUZZ_BUILD=gpu|cpu|/path runs that binary as it is: no cmake, no nvcc, exit codes kept;
#    a missing one is exit 2 with one line naming it and how to build it; ATTNFUZZ_REQUIRE_GPU=1
#    without a listed GPU is exit 2.
#  - Without ATTNFUZZ_BUILD the development path is unchanged (gpu where a GPU and nvcc are; where
#    a GPU is visible but nvcc is not: the cpu build, said on stderr).
#  - ci/nightly.sh and ci/slurm/attnfuzz-array.sbatch default to the gpu build and need a GPU, fail
#    before any campaign where the build is missing, and run the cpu build only when asked.
#  - The K8s job's command, run against the scratch tree: the gpu build, its shard and seed.
#  - Statically: ci/docker/Dockerfile builds the gpu preset's `attnfuzz` target and its entrypoint
#    is ./attnfuzz with ATTNFUZZ_BUILD=gpu, i.e. build/gpu/attnfuzz (CMakePresets.json's binaryDir);
#    the K8s yaml names the image the Dockerfile's instructions build and runs that entrypoint.
#   tests/build_choice_test.sh SOURCE_DIR
set -uo pipefail
src=$(cd "${1:?usage: build_choice_test.sh SOURCE_DIR}" && pwd)
tmp=$(mktemp -d /tmp/attnfuzz-build-choice.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
ok() { echo "ok: $*"; }

tree=$tmp/tree log=$tmp/calls.log
mkdir -p "$tree/ci/slurm" "$tree/build/gpu" "$tree/build/cpu" "$tmp/stubs" "$tmp/nvcc" "$tmp/elsewhere"
cp "$src/attnfuzz" "$tree/attnfuzz"
cp "$src/ci/nightly.sh" "$tree/ci/nightly.sh"
cp "$src/ci/slurm/attnfuzz-array.sbatch" "$tree/ci/slurm/attnfuzz-array.sbatch"
fake_binary() {  # fake_binary PATH NAME: logs "NAME ARGS"; FAKE_RC is its exit code (--help: 0)
  printf '#!/bin/sh\necho "%s $*" >> "%s"\n[ "$1" = --help ] && exit 0\nexit ${FAKE_RC:-0}\n' "$2" "$log" > "$1"
  chmod +x "$1"
}
fake_binary "$tree/build/gpu/attnfuzz" gpu-build
fake_binary "$tree/build/cpu/attnfuzz" cpu-build
touch "$tree/build/gpu/build.ninja" "$tree/build/cpu/build.ninja"
# nvidia-smi: STUB_GPUS=1 lists one GPU, 0 none (as on a node whose GPU request was not honoured).
cat > "$tmp/stubs/nvidia-smi" <<'EOF'
#!/bin/sh
[ "${STUB_GPUS:-1}" = 1 ] || { echo "No devices were found"; exit 6; }
case "$*" in
  -L) echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-00000000-1111-2222-3333-444444444444)" ;;
  *--query-gpu=index*) echo 0 ;;
esac
EOF
for tool in cmake nvcc; do
  d=$tmp/stubs; [ $tool = nvcc ] && d=$tmp/nvcc
  printf '#!/bin/sh\necho "CALLED %s $*" >> "%s"\nexit 0\n' $tool "$log" > "$d/$tool"
done
chmod +x "$tmp"/stubs/* "$tmp"/nvcc/*
base_path=/usr/bin:/bin
# Every run: only the stubs and the base tools on PATH, none of the caller's ATTNFUZZ_* settings.
clean=(env -u ATTNFUZZ_BUILD -u ATTNFUZZ_REQUIRE_GPU -u ATTNFUZZ_PRESET -u ATTNFUZZ -u CUDA_VISIBLE_DEVICES
       -u SEED -u SHARD -u OUT -u SLURM_SUBMIT_DIR PATH="$tmp/stubs:$base_path")

# run EXPECTED_RC WHAT ENV_AND_COMMAND...: runs it from $tmp/elsewhere with a fresh log; stderr
# in $err, the calls in $calls (stdout is dropped).
run() {
  local want=$1 what=$2 rc; shift 2
  : > "$log"
  (cd "$tmp/elsewhere" && "${clean[@]}" "$@" > /dev/null 2> "$tmp/stderr")
  rc=$?
  err=$(cat "$tmp/stderr")
  calls=$(cat "$log")
  if [ "$rc" != "$want" ]; then
    fail "$what: exit $rc, expected $want; stderr: $err; calls: $calls"
    return 1
  fi
  return 0
}
expect_calls() {  # expect_calls WHAT EXPECTED: the whole log
  if [ "$calls" = "$2" ]; then ok "$1"; else fail "$1: calls were [$calls], expected [$2]"; fi
}
expect_one_line_error() {  # expect_one_line_error WHAT PATTERN...: stderr is one line holding every pattern
  local what=$1 p; shift
  [ "$(printf '%s\n' "$err" | wc -l)" = 1 ] || { fail "$what: stderr is not one line: $err"; return; }
  for p in "$@"; do
    case "$err" in *"$p"*) ;; *) fail "$what: stderr lacks '$p': $err"; return ;; esac
  done
  [ -z "$calls" ] || { fail "$what: something ran: $calls"; return; }
  ok "$what: $err"
}
wrapper=$tree/attnfuzz

# --- ./attnfuzz with ATTNFUZZ_BUILD
run 0 "gpu build" ATTNFUZZ_BUILD=gpu "$wrapper" list --x &&
  expect_calls "ATTNFUZZ_BUILD=gpu runs build/gpu/attnfuzz with the arguments, no cmake or nvcc" "gpu-build list --x"
run 1 "gpu build, exit 1" ATTNFUZZ_BUILD=gpu FAKE_RC=1 "$wrapper" campaign &&
  expect_calls "the binary's exit code is the wrapper's" "gpu-build campaign"
run 0 "gpu build, nvcc on PATH" ATTNFUZZ_BUILD=gpu PATH="$tmp/stubs:$tmp/nvcc:$base_path" "$wrapper" list &&
  expect_calls "ATTNFUZZ_BUILD=gpu builds nothing even where nvcc is" "gpu-build list"
run 0 "cpu build" ATTNFUZZ_BUILD=cpu "$wrapper" list && expect_calls "ATTNFUZZ_BUILD=cpu runs build/cpu/attnfuzz" "cpu-build list"
fake_binary "$tmp/other-attnfuzz" other
run 0 "a path" ATTNFUZZ_BUILD="$tmp/other-attnfuzz" "$wrapper" list && expect_calls "ATTNFUZZ_BUILD=/path runs that binary" "other list"
run 2 "a missing path" ATTNFUZZ_BUILD="$tmp/nowhere/attnfuzz" "$wrapper" list &&
  expect_one_line_error "a missing ATTNFUZZ_BUILD path is exit 2" "$tmp/nowhere/attnfuzz" "missing"
run 2 "a relative path" ATTNFUZZ_BUILD=build/gpu/attnfuzz "$wrapper" list &&
  expect_one_line_error "ATTNFUZZ_BUILD takes gpu, cpu or an absolute path" "ATTNFUZZ_BUILD takes gpu, cpu or an absolute path"
run 0 "a GPU required and listed" ATTNFUZZ_BUILD=gpu ATTNFUZZ_REQUIRE_GPU=1 "$wrapper" list &&
  expect_calls "ATTNFUZZ_REQUIRE_GPU=1 with a GPU listed runs" "gpu-build list"
run 2 "a GPU required, none listed" ATTNFUZZ_BUILD=gpu ATTNFUZZ_REQUIRE_GPU=1 STUB_GPUS=0 "$wrapper" list &&
  expect_one_line_error "ATTNFUZZ_REQUIRE_GPU=1 without a GPU is exit 2" "ATTNFUZZ_REQUIRE_GPU=1" "lists no GPU"
run 2 "a GPU required, no nvidia-smi" ATTNFUZZ_BUILD=gpu ATTNFUZZ_REQUIRE_GPU=1 PATH="$base_path" "$wrapper" list &&
  expect_one_line_error "ATTNFUZZ_REQUIRE_GPU=1 without nvidia-smi is exit 2" "no nvidia-smi"
mv "$tree/build/gpu/attnfuzz" "$tmp/gpu-attnfuzz.away"
run 2 "gpu build missing" ATTNFUZZ_BUILD=gpu "$wrapper" list &&
  expect_one_line_error "a missing gpu build is exit 2, naming it and how to build it" \
    "ATTNFUZZ_BUILD=gpu" "$tree/build/gpu/attnfuzz is missing" "cmake --preset gpu" "cmake --build --preset gpu --target attnfuzz" "ci/docker/Dockerfile"
mv "$tmp/gpu-attnfuzz.away" "$tree/build/gpu/attnfuzz"

# --- ./attnfuzz without ATTNFUZZ_BUILD: the development path (builds through cmake, here the stub)
run 0 "auto, GPU and nvcc" PATH="$tmp/stubs:$tmp/nvcc:$base_path" "$wrapper" list &&
  expect_calls "no ATTNFUZZ_BUILD, a GPU and nvcc: the gpu preset, built then run" \
    "$(printf 'CALLED cmake --build --preset gpu --target attnfuzz\ngpu-build list')"
run 0 "auto, no GPU" STUB_GPUS=0 "$wrapper" list &&
  expect_calls "no ATTNFUZZ_BUILD, no GPU: the cpu preset" "$(printf 'CALLED cmake --build --preset cpu --target attnfuzz\ncpu-build list')"
if [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "note: /usr/local/cuda/bin/nvcc exists here: the case 'a GPU but no nvcc' is not run"
else
  run 0 "auto, GPU without nvcc" "$wrapper" list &&
    case "$err" in
      *"a GPU is visible but nvcc is not"*"ATTNFUZZ_BUILD=gpu"*) expect_calls "a GPU without nvcc: the cpu build, said on stderr" \
        "$(printf 'CALLED cmake --build --preset cpu --target attnfuzz\ncpu-build list')" ;;
      *) fail "a GPU without nvcc: no warning on stderr: $err" ;;
    esac
fi

# --- ci/nightly.sh
nightly=$tree/ci/nightly.sh
run 0 "nightly" SECONDS_BUDGET=5 SEED=11 OUT="$tmp/n1" "$nightly" --backends x &&
  expect_calls "nightly: the gpu build, --devices from nvidia-smi, then the corpus replay" \
    "$(printf 'gpu-build --help\ngpu-build campaign --seed 11 --seconds 5 --shard 0/1 --out %s --devices 0 --backends x\ngpu-build replay %s/corpus/repro --junit %s/replay.xml' "$tmp/n1" "$tree" "$tmp/n1")"
run 0 "nightly with findings" FAKE_RC=1 SECONDS_BUDGET=5 SEED=11 OUT="$tmp/n1" "$nightly" &&
  ok "nightly: findings (exit 1) are exit 0"
run 2 "nightly without a GPU" STUB_GPUS=0 SECONDS_BUDGET=5 OUT="$tmp/n2" "$nightly" &&
  expect_one_line_error "nightly on the gpu build without a GPU: exit 2 before any campaign" "lists no GPU"
mv "$tree/build/gpu/attnfuzz" "$tmp/gpu-attnfuzz.away"
run 2 "nightly without the gpu build" SECONDS_BUDGET=5 OUT="$tmp/n3" "$nightly" &&
  expect_one_line_error "nightly without build/gpu/attnfuzz: exit 2 before any campaign" "build/gpu/attnfuzz is missing" "cmake --preset gpu"
mv "$tmp/gpu-attnfuzz.away" "$tree/build/gpu/attnfuzz"
run 0 "nightly on the cpu build" ATTNFUZZ_BUILD=cpu STUB_GPUS=0 SECONDS_BUDGET=5 SEED=11 OUT="$tmp/n4" "$nightly" &&
  expect_calls "ATTNFUZZ_BUILD=cpu ci/nightly.sh: the cpu build, no devices" \
    "$(printf 'cpu-build --help\ncpu-build campaign --seed 11 --seconds 5 --shard 0/1 --out %s\ncpu-build replay %s/corpus/repro --junit %s/replay.xml' "$tmp/n4" "$tree" "$tmp/n4")"

# --- the Slurm array script, as a task of array 99 (run from elsewhere: Slurm runs a spool copy)
sbatch_script=$tree/ci/slurm/attnfuzz-array.sbatch
task=(SLURM_ARRAY_TASK_COUNT=4 SLURM_ARRAY_TASK_ID=2 SLURM_ARRAY_JOB_ID=99 SLURM_SUBMIT_DIR="$tree" SECONDS_BUDGET=5)
run 0 "slurm task" "${task[@]}" CUDA_VISIBLE_DEVICES=0 bash "$sbatch_script" --cases 5 &&
  expect_calls "slurm task: the submit directory's gpu build, its shard, Slurm's GPU" \
    "gpu-build campaign --seed 99 --shard 2/4 --seconds 5 --out nightly-shard-2 --devices 0 --cases 5"
run 0 "slurm task with findings" "${task[@]}" FAKE_RC=1 CUDA_VISIBLE_DEVICES=0 bash "$sbatch_script" &&
  ok "slurm task: findings are exit 0"
run 2 "slurm task without a GPU" "${task[@]}" STUB_GPUS=0 bash "$sbatch_script" &&
  expect_one_line_error "slurm task on the gpu build without a GPU: exit 2" "lists no GPU"
mv "$tree/build/gpu/attnfuzz" "$tmp/gpu-attnfuzz.away"
run 2 "slurm task without the gpu build" "${task[@]}" CUDA_VISIBLE_DEVICES=0 bash "$sbatch_script" &&
  expect_one_line_error "slurm task without build/gpu/attnfuzz: exit 2" "build/gpu/attnfuzz is missing" "cmake --preset gpu"
mv "$tmp/gpu-attnfuzz.away" "$tree/build/gpu/attnfuzz"
run 0 "slurm task on the cpu build" "${task[@]}" ATTNFUZZ_BUILD=cpu STUB_GPUS=0 bash "$sbatch_script" &&
  expect_calls "ATTNFUZZ_BUILD=cpu: the cpu build" "cpu-build campaign --seed 99 --shard 2/4 --seconds 5 --out nightly-shard-2"
run 0 "slurm task, ATTNFUZZ" "${task[@]}" ATTNFUZZ="$tmp/other-attnfuzz" STUB_GPUS=0 bash "$sbatch_script" &&
  expect_calls "ATTNFUZZ=/path: that binary, as tests/slurm_array_test.sh runs it" \
    "other campaign --seed 99 --shard 2/4 --seconds 5 --out nightly-shard-2"

# --- ci/docker/Dockerfile and the K8s job, statically; the job's command against the scratch tree
dockerfile=$src/ci/docker/Dockerfile yaml=$src/ci/k8s/attnfuzz-indexed-job.yaml
static_ok=1
python3 - "$src" "$dockerfile" "$yaml" "$tmp/k8s-command.sh" <<'EOF' || { static_ok=0; fail "the Dockerfile and the K8s yaml (above)"; }
import json, os, re, sys
src, dockerfile, yaml_path, command_out = sys.argv[1:]
problems = []
def need(cond, what):
    if not cond:
        problems.append(what)
d = open(dockerfile).read()
lines = [l.strip() for l in d.splitlines() if l.strip() and not l.lstrip().startswith("#")]
base = next((l.split("=", 1)[1] for l in lines if l.startswith("ARG BASE_IMAGE=")), "")
need(re.fullmatch(r"nvidia/cuda:13\.0\.\d+-(cudnn-)?devel-ubuntu24\.04", base), f"base image {base!r}: an NVIDIA CUDA 13.0 devel Ubuntu 24.04 image")
need(any(l.startswith("FROM ${BASE_IMAGE}") for l in lines), "FROM ${BASE_IMAGE}")
workdir = next((l.split(None, 1)[1] for l in lines if l.startswith("WORKDIR ")), None)
need(workdir is not None, "a WORKDIR")
need(re.search(r"^\s*COPY ci/setup.sh ci/setup.sh", d, re.M) and re.search(r"&& ATTNFUZZ_SETUP_SKIP_PACKAGES=\"[^\"]*\" ci/setup\.sh", d),
     "ci/setup.sh copied and run")
need(re.search(r"cmake --preset gpu\b", d) and re.search(r"cmake --build --preset gpu --target attnfuzz\b", d), "the gpu preset's attnfuzz target built")
need("test -x build/gpu/attnfuzz" in d, "the build checked for build/gpu/attnfuzz")
ep = next((l.split(None, 1)[1] for l in lines if l.startswith("ENTRYPOINT ")), "[]")
ep = json.loads(ep)
need(len(ep) == 1 and workdir and ep[0] == os.path.join(workdir, "attnfuzz"), f"ENTRYPOINT {ep}: the checkout's ./attnfuzz in {workdir}")
need(os.access(os.path.join(src, "attnfuzz"), os.X_OK), "./attnfuzz is an executable of the repository")
need(re.search(r"^ENV ATTNFUZZ_BUILD=gpu\b", d, re.M), "ENV ATTNFUZZ_BUILD=gpu (the entrypoint runs build/gpu/attnfuzz)")
# What the entrypoint runs is the gpu preset's output by name: its binaryDir and the attnfuzz executable.
presets = json.load(open(os.path.join(src, "CMakePresets.json")))
gpu = next(p for p in presets["configurePresets"] if p["name"] == "gpu")
need(gpu["binaryDir"] == "${sourceDir}/build/gpu" and gpu["cacheVariables"].get("ATTNFUZZ_WITH_CUDA") == "ON",
     f"the gpu preset builds into build/gpu with CUDA ({gpu['binaryDir']})")
need(re.search(r"^add_executable\(attnfuzz\s*$", open(os.path.join(src, "CMakeLists.txt")).read(), re.M), "CMakeLists.txt: add_executable(attnfuzz")
wrapper = open(os.path.join(src, "attnfuzz")).read()
need('bin="$root/build/$ATTNFUZZ_BUILD/attnfuzz"' in wrapper, "./attnfuzz maps ATTNFUZZ_BUILD=gpu to build/gpu/attnfuzz")
ignore = [l.strip() for l in open(os.path.join(src, ".dockerignore")) if l.strip() and not l.startswith("#")]
for p in ("/build", "/.deps"):
    need(p in ignore, f".dockerignore keeps {p} out of the build context")
# The instructions: the same image variable built with this Dockerfile, and substituted into the yaml.
y = open(yaml_path).read()
for doc, text in (("the Dockerfile", d), ("the yaml", y), ("docs/campaigns.md", open(os.path.join(src, "docs/campaigns.md")).read())):
    need('docker build -f ci/docker/Dockerfile -t "$ATTNFUZZ_IMAGE" .' in text, f"{doc}: docker build -f ci/docker/Dockerfile -t \"$ATTNFUZZ_IMAGE\" .")
    need('s|@ATTNFUZZ_IMAGE@|$ATTNFUZZ_IMAGE|' in text, f"{doc}: the sed that puts $ATTNFUZZ_IMAGE into the yaml")
need(re.search(r'^\s*image: "@ATTNFUZZ_IMAGE@"', y, re.M), 'the yaml: image: "@ATTNFUZZ_IMAGE@"')
need("registry.example" not in y, "the yaml: no placeholder registry")
need(re.search(r'name: ATTNFUZZ_BUILD\s*\n\s*value: "gpu"', y) and re.search(r'name: ATTNFUZZ_REQUIRE_GPU\s*\n\s*value: "1"', y),
     "the yaml: ATTNFUZZ_BUILD=gpu and ATTNFUZZ_REQUIRE_GPU=1")
need(re.search(r"nvidia\.com/gpu: 1", y), "the yaml asks for a GPU")
# The container's shell command (the block after `args:` / `- |`).
m = re.search(r"^(\s*)args:\s*\n\s*- \|\s*\n((?:\1    .*\n)+)", y, re.M)
need(m, "the yaml: args: - | with the pod's shell command")
if m:
    body = "".join(l[len(m.group(1)) + 4:] + "\n" for l in m.group(2).splitlines())
    need(ep and body.startswith(ep[0] + " campaign "), f"the pod runs the Dockerfile's entrypoint {ep}: {body.splitlines()[0]}")
    open(command_out, "w").write(body)
try:
    import yaml  # python3-yaml where it is there; the checks above need none
    job = yaml.safe_load(y)
    c = job["spec"]["template"]["spec"]["containers"][0]
    need(c["image"] == "@ATTNFUZZ_IMAGE@" and job["spec"]["completionMode"] == "Indexed", "the yaml parses as the Job")
except ImportError:
    pass
for p in problems:
    print("FAIL:", p)
sys.exit(1 if problems else 0)
EOF
[ "$static_ok" = 1 ] && ok "the Dockerfile builds the gpu preset's attnfuzz and its entrypoint runs it; the K8s yaml names its image and runs its entrypoint"
if [ -f "$tmp/k8s-command.sh" ]; then
  sed "s|/opt/attnfuzz/attnfuzz|$wrapper|" "$tmp/k8s-command.sh" > "$tmp/k8s-local.sh"
  pod=(ATTNFUZZ_BUILD=gpu ATTNFUZZ_REQUIRE_GPU=1 CAMPAIGN_SEED=20261206 JOB_COMPLETION_INDEX=3)
  run 0 "the pod's command" "${pod[@]}" FAKE_RC=1 sh "$tmp/k8s-local.sh" &&
    expect_calls "the K8s pod: the gpu build, shard 3/16 of CAMPAIGN_SEED; findings succeed" \
      "gpu-build campaign --seed 20261206 --shard 3/16 --seconds 14000 --devices 0 --out /results/shard-3"
  run 2 "the pod's command without a GPU" "${pod[@]}" STUB_GPUS=0 sh "$tmp/k8s-local.sh" &&
    expect_one_line_error "a pod without a GPU: exit 2 (the Job's podFailurePolicy fails the Job)" "lists no GPU"
fi

[ "$failures" = 0 ] && echo "PASS: the scale-out scripts run the gpu build explicitly" && exit 0
echo "$failures failure(s)"
exit 1
