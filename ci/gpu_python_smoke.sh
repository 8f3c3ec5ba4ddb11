#!/usr/bin/env bash
# The pip-installed package and `pytest --attnfuzz` on the GPU machine (issue 33; docs/testing-python-
# kernels.md, "On a GPU"): a fresh virtualenv over the machine's python3 (its torch and Triton, no
# network), `pip install --no-deps --no-build-isolation` of this repository into it, then
# `pytest --attnfuzz` on examples/triton_kernel/test_triton_attention.py (a Triton flash-attention
# forward with its LSE, a torch backward through autograd, device="cuda"): a check of CASES cases at
# the small tier, then a campaign of SECONDS at the real tier. Logs, JUnit and the campaign folders
# under $OUT/python-smoke. About 1 to 3 minutes.
#
# On the GPU machine, from the repository root, with .carry/ from ci/gpu_bundle.sh (the gpu build):
#   ci/gpu_python_smoke.sh [SECONDS] [CASES]        # defaults 20 and 16
# Environment as ci/gpu_run.sh's (ci/gpu_env.sh); ATTNFUZZ_BIN overrides .carry/bin/attnfuzz;
# ATTNFUZZ_EXAMPLE_DEVICE=cpu runs the same in Triton's interpreter (a CPU check of this script; with
# SMOKE_CAMPAIGN_TIER=small, the interpreter being far too slow for the real tier).
# pytest: the machine's where python3 has it, else wheels carried in .carry-pytest/, which
#   ci/gpu_python_smoke.sh fetch-wheels     (on the development machine: pip download from PyPI)
# writes; carry .carry-pytest beside .carry.
# Exit 0 when the install worked and both pytest runs passed; 1 otherwise; 2 when something it
# needs is missing (the binary, setuptools, pytest).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
PYTEST_VERSION=${ATTNFUZZ_PYTEST_VERSION:-9.2.0}  # ci/setup.sh's pin
wheels=${PYTEST_WHEELS:-$root/.carry-pytest}
if [ "${1:-}" = fetch-wheels ]; then
  mkdir -p "$wheels"
  python3 -m pip download --quiet --only-binary=:all: -d "$wheels" "pytest==$PYTEST_VERSION" && ls "$wheels"
  exit $?
fi
secs=${1:-20}
cases=${2:-16}
# OUT, LD_LIBRARY_PATH (the machine's torch package), bin=.carry/bin, ATTNFUZZ_PLUGIN_PATH.
# shellcheck source=ci/gpu_env.sh
source "$root/ci/gpu_env.sh"
log=$OUT/python-smoke
mkdir -p "$log"
exec > >(tee "$log/smoke.log") 2>&1
t0=$SECONDS
step() { printf '=== %s (%d s)\n' "$*" $((SECONDS - t0)); }
die() { echo "FAIL: $1"; exit "${2:-1}"; }
attnfuzz_bin=${ATTNFUZZ_BIN:-$bin/attnfuzz}
[ -x "$attnfuzz_bin" ] || die "no attnfuzz binary at $attnfuzz_bin: carry .carry/ from ci/gpu_bundle.sh (the gpu build), or set ATTNFUZZ_BIN" 2
device=${ATTNFUZZ_EXAMPLE_DEVICE:-cuda}

step "machine"
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
  python3 -c 'import sys, torch, triton; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available(), "triton", triton.__version__)'
  echo "harness $(cat "$root/.carry/commit" 2>/dev/null || echo '?'), binary $attnfuzz_bin"; } | tee "$log/machine.log"
python3 -c 'import setuptools' 2>/dev/null || die "the machine's python3 has no setuptools: pip install --no-build-isolation needs it" 2

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
venv=$work/venv
step "virtualenv over the machine's python3 (--system-site-packages)"
# Without a pip of its own first: the machine's pip and setuptools serve it through the system
# site-packages (a venv's bundled setuptools can be older than the machine's and lack bdist_wheel);
# with one (ensurepip) where the machine's pip is not importable there.
vpy=$venv/bin/python
python3 -m venv --system-site-packages --without-pip "$venv" 2> "$log/venv.err" ||
  die "python3 -m venv failed: $(tail -1 "$log/venv.err")"
purelib=$("$vpy" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# torch where the machine's python3 finds it (a user site, a PYTHONPATH entry) and the venv does not.
if ! env -u PYTHONPATH "$vpy" -c 'import torch, triton' 2>/dev/null; then
  python3 -c 'import os, torch, triton; print(os.path.dirname(os.path.dirname(torch.__file__))); print(os.path.dirname(os.path.dirname(triton.__file__)))' \
    > "$work/machine-packages.pth"
  cp "$work/machine-packages.pth" "$purelib/"
  echo "torch and triton reached through $purelib/machine-packages.pth: $(paste -sd' ' "$purelib/machine-packages.pth")"
fi
if ! "$vpy" -m pip --version 2>/dev/null; then
  rm -rf "$venv"
  python3 -m venv --system-site-packages "$venv" 2>> "$log/venv.err" || die "python3 -m venv (with pip) failed: $(tail -1 "$log/venv.err")"
  [ ! -f "$work/machine-packages.pth" ] || cp "$work/machine-packages.pth" "$purelib/"
  "$vpy" -m pip --version || die "no pip in the virtualenv (nor the machine's pip through its site-packages)" 2
fi
if ! env -u PYTHONPATH "$vpy" -c 'import pytest' 2>/dev/null; then
  ls "$wheels"/pytest-*.whl >/dev/null 2>&1 ||
    die "pytest is not in the machine's python3, and no wheels in $wheels (ci/gpu_python_smoke.sh fetch-wheels on the development machine, then carry .carry-pytest)" 2
  "$vpy" -m pip install --quiet --no-index --find-links "$wheels" "pytest==$PYTEST_VERSION" > "$log/pip-pytest.log" 2>&1 ||
    die "pip install of the carried pytest wheels failed: $(tail -3 "$log/pip-pytest.log")" 2
fi

step "pip install --no-deps --no-build-isolation of the repository"
# The egg-info goes to the scratch folder, not into python/ (as tests/python/pip_install_test.sh does).
mkdir "$work/egg-info" && printf '[egg_info]\negg_base = %s\n' "$work/egg-info" > "$work/setup.cfg"
[ -e "$root/python/.setuptools-build" ] && keep_build_folder=1 || keep_build_folder=0
DIST_EXTRA_CONFIG=$work/setup.cfg env -u PYTHONPATH "$vpy" -m pip install --no-deps --no-build-isolation --no-index "$root" \
  > "$log/pip-install.log" 2>&1 || die "pip install failed: $(tail -5 "$log/pip-install.log")"
[ "$keep_build_folder" = 1 ] || rm -rf "$root/python/.setuptools-build"
env -u PYTHONPATH "$vpy" - "$venv" <<'EOF' || die "the installed package is not the virtualenv's"
import sys, attnfuzz_py, attnfuzz_py.pytest_plugin
assert attnfuzz_py.__file__.startswith(sys.argv[1]), attnfuzz_py.__file__
print("attnfuzz_py from", attnfuzz_py.__file__)
EOF
[ -x "$venv/bin/attnfuzz" ] || die "no attnfuzz entry point in $venv/bin"

# The user's side: a folder of their own with the kernel file, the venv's pytest, the binary named.
proj=$work/project
mkdir "$proj" && cp "$root/examples/triton_kernel/test_triton_attention.py" "$proj/"
run_env=(env -u PYTHONPATH -u ATTNFUZZ_PYTHON -u ATTNFUZZ_PY_PACKAGE_DIR ATTNFUZZ_BIN="$attnfuzz_bin"
         ATTNFUZZ_EXAMPLE_DEVICE="$device" PATH="$venv/bin:$PATH")
"${run_env[@]}" "$venv/bin/attnfuzz" list > "$log/list.log" 2>&1
echo "attnfuzz list through the entry point: exit $?, $(grep -cE '^[a-z]' "$log/list.log") backends"

status=0
pytest_run() {  # pytest_run NAME TIME_LIMIT PYTEST_ARGS...
  local name=$1 limit=$2 rc; shift 2
  step "pytest --attnfuzz: $name"
  (cd "$proj" && timeout -k 10 "$limit" "${run_env[@]}" "$vpy" -m pytest -p no:cacheprovider -rA --attnfuzz \
     test_triton_attention.py --attnfuzz-out "$log/runs-$name" --attnfuzz-timeout 120 --attnfuzz-minimize-seconds 20 \
     --junitxml="$log/$name.xml" "$@") > "$log/$name.log" 2>&1
  rc=$?
  tail -n 40 "$log/$name.log"
  echo "pytest $name: exit $rc"
  [ "$rc" = 0 ] || status=1
}
pytest_run check 80 --attnfuzz-cases "$cases" --attnfuzz-tier small --attnfuzz-seed 1
pytest_run campaign $((secs + 60)) --attnfuzz-seconds "$secs" --attnfuzz-tier "${SMOKE_CAMPAIGN_TIER:-real}" --attnfuzz-seed 2
# Coverage of each run (check's honest coverage: the item fails when the kernel ran no case).
for s in "$log"/runs-*/*/summary.json; do
  [ -f "$s" ] || continue
  python3 - "$s" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
for name, cov in sorted(s.get("coverage", {}).get("backends", {}).items()):
    print(f"{sys.argv[1]}: {s.get('cases')} cases; {name}: {cov.get('ran', 0)} ran, {cov.get('skipped', 0)} skipped, "
          f"{cov.get('errored', 0)} errored; {len(s.get('signatures', []))} signatures")
EOF
done | tee "$log/coverage.log"
step "done: $([ $status = 0 ] && echo PASS || echo FAIL)"
exit $status
