#!/usr/bin/env bash
# The path of docs/testing-python-kernels.md from a fresh virtualenv, offline: `pip install` of the
# repository, the `attnfuzz` command (found binary, and the one-line error without one), then
# `pytest --attnfuzz` on a ten-line kernel file (passes) and on the same kernel with a planted bug
# (fails with the finding); last, an editable install that finds build/<preset>/attnfuzz by itself.
#
#   tests/python/pip_install_test.sh ATTNFUZZ_BINARY SOURCE_ROOT PYTHON
#
# PYTHON is the interpreter of ci/setup.sh's env (.deps/pyenv): its torch, numpy, pytest and
# setuptools serve the new virtualenvs, so nothing is downloaded. Exit 77 (skipped) without them.
set -euo pipefail
bin=$(realpath "$1")
root=$(realpath "$2")
py=$3
if ! "$py" -c "import torch, numpy, pytest, setuptools, pip" 2>/dev/null; then
  echo "SKIP: $py lacks torch, numpy, pytest, setuptools or pip (ci/setup.sh installs them)"
  exit 77
fi
work=$(mktemp -d)
# `pip install` of a source folder builds in it. Its egg-info would be an installed-looking
# `attnfuzz` distribution, pytest11 entry point included, for every test running meanwhile with
# PYTHONPATH=python/: setuptools writes it here instead (DIST_EXTRA_CONFIG, an extra setup.cfg).
# The build folder (python/.setuptools-build, git-ignored) goes again unless it was there before.
mkdir "$work/egg-info"
printf '[egg_info]\negg_base = %s\n' "$work/egg-info" > "$work/setup.cfg"
export DIST_EXTRA_CONFIG=$work/setup.cfg
build_folder=$root/python/.setuptools-build
[ -e "$build_folder" ] && keep_build_folder=1 || keep_build_folder=0
[ -e "$root/python/attnfuzz.egg-info" ] && had_egg_info=1 || had_egg_info=0
cleanup() {
  rm -rf "$work"
  [ "$keep_build_folder" = 1 ] || rm -rf "$build_folder"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# The new virtualenvs see PYTHON's packages through a .pth file, after their own: PYTHON is itself
# a venv, so --system-site-packages would reach its base interpreter's packages, not its torch.
deps_sites=$("$py" -c "import site; print('\n'.join(site.getsitepackages()))")
make_venv() {
  "$py" -m venv --without-pip "$1"
  local site
  site=$("$1/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  printf '%s\n' "$deps_sites" > "$site/attnfuzz-test-deps.pth"
}
# Nothing of the caller's may point the package, the interpreter or the binary elsewhere.
clean_env=(env -u PYTHONPATH -u ATTNFUZZ_BIN -u ATTNFUZZ_PYTHON -u ATTNFUZZ_PY_PACKAGE_DIR -u ATTNFUZZ_PRESET)

t0=$SECONDS
venv=$work/venv
make_venv "$venv"
"${clean_env[@]}" "$venv/bin/python" -m pip install --quiet --no-index --no-build-isolation "$root"
[ "$had_egg_info" = 1 ] || [ ! -e "$root/python/attnfuzz.egg-info" ] ||
  fail "pip install left python/attnfuzz.egg-info in the source tree"
echo "ok: pip install of $root into a fresh virtualenv ($((SECONDS - t0)) s)"

# An installed copy, not the source tree; no torch imported by the package itself.
"${clean_env[@]}" "$venv/bin/python" - "$venv" <<'EOF'
import sys
import attnfuzz_py, attnfuzz_py.api, attnfuzz_py.cli, attnfuzz_py.kernel, attnfuzz_py.pytest_plugin, attnfuzz_py.worker
assert attnfuzz_py.__file__.startswith(sys.argv[1]), attnfuzz_py.__file__
assert attnfuzz_py.api.source_tree() is None, attnfuzz_py.api.source_tree()
assert "torch" not in sys.modules, "importing attnfuzz_py imported torch"
EOF
[ -x "$venv/bin/attnfuzz" ] || fail "no attnfuzz entry point in $venv/bin"

# No binary anywhere: exit 2 and one line saying how to get one.
set +e
err=$("${clean_env[@]}" PATH="$venv/bin" "$venv/bin/attnfuzz" list 2>&1 >/dev/null)
rc=$?
set -e
[ "$rc" = 2 ] || fail "attnfuzz without a binary exited $rc, expected 2: $err"
[ "$(printf '%s\n' "$err" | wc -l)" = 1 ] || fail "attnfuzz without a binary printed more than one line: $err"
case "$err" in "attnfuzz: no attnfuzz binary found"*"ATTNFUZZ_BIN"*) ;; *) fail "unexpected message: $err" ;; esac
echo "ok: without a binary: $err"
# The binary named, or on PATH behind the entry point of the same name. (grep reads all of
# `list`: with -q it stops at the first line, and `list`, still writing, fails with EPIPE.)
"${clean_env[@]}" ATTNFUZZ_BIN="$bin" "$venv/bin/attnfuzz" list | grep '^reference ' >/dev/null || fail "attnfuzz list through ATTNFUZZ_BIN"
mkdir "$work/on-path"
ln -s "$bin" "$work/on-path/attnfuzz"
"${clean_env[@]}" PATH="$venv/bin:$work/on-path:/usr/bin:/bin" attnfuzz list | grep '^reference ' >/dev/null ||
  fail "attnfuzz list through PATH"
echo "ok: the attnfuzz command runs the binary (ATTNFUZZ_BIN, PATH)"

# The ten-line kernel file of docs/testing-python-kernels.md.
mkdir "$work/project"
cat > "$work/project/test_my_kernel.py" <<'EOF'
import torch
import attnfuzz_py

@attnfuzz_py.kernel(contracts={"fp32": "fp32"})
def my_attention(q, k, v, *, scale, mask=None):
    s = scale * q.double() @ k.double().transpose(-1, -2)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    return torch.exp(s - lse[..., None]).nan_to_num(0.0) @ v.double(), lse
EOF
t0=$SECONDS
(cd "$work/project" && "${clean_env[@]}" ATTNFUZZ_BIN="$bin" "$venv/bin/python" -m pytest --attnfuzz --attnfuzz-cases 12 -v \
  -p no:cacheprovider) > "$work/pass.log" 2>&1 || { cat "$work/pass.log"; fail "pytest --attnfuzz on a correct kernel"; }
grep -q "test_my_kernel.py::my_attention PASSED" "$work/pass.log" || { cat "$work/pass.log"; fail "no attnfuzz item passed"; }
echo "ok: pytest --attnfuzz passes the correct kernel ($((SECONDS - t0)) s)"

# A planted bug: V detached from the graph, so its gradient is lost (dV = 0); the forward is right.
sed -e 's/@ v.double(), lse$/@ v.double().detach(), lse/' "$work/project/test_my_kernel.py" \
  > "$work/project/test_my_buggy_kernel.py"
grep -q 'v.double().detach()' "$work/project/test_my_buggy_kernel.py" || fail "the bug was not planted"
t0=$SECONDS
set +e
(cd "$work/project" && "${clean_env[@]}" ATTNFUZZ_BIN="$bin" "$venv/bin/python" -m pytest --attnfuzz --attnfuzz-cases 12 \
  --attnfuzz-minimize-seconds 5 -p no:cacheprovider test_my_buggy_kernel.py) > "$work/fail.log" 2>&1
rc=$?
set -e
[ "$rc" = 1 ] || { cat "$work/fail.log"; fail "pytest --attnfuzz on the planted bug exited $rc, expected 1"; }
grep -Eq "^  py\.my_attention/[a-z_]+/dV/mismatch/fp32/" "$work/fail.log" &&
  grep -q "reproducer: .*\.json" "$work/fail.log" && grep -q "replay: .* replay " "$work/fail.log" ||
  { cat "$work/fail.log"; fail "the failure does not show the finding, its reproducer and replay command"; }
echo "ok: pytest --attnfuzz fails the planted bug with its findings ($((SECONDS - t0)) s)"

# An editable install finds the checkout's build/<preset>/attnfuzz without being told.
editable=$work/editable
make_venv "$editable"
"${clean_env[@]}" "$editable/bin/python" -m pip install --quiet --no-index --no-build-isolation -e "$root"
found=$("${clean_env[@]}" PATH="$editable/bin:/usr/bin:/bin" "$editable/bin/python" -c "from attnfuzz_py import api; print(api.find_binary())")
case "$found" in "$root/build/cpu/attnfuzz" | "$root/build/gpu/attnfuzz") ;; *) fail "editable install found '$found'" ;; esac
"${clean_env[@]}" PATH="$editable/bin:/usr/bin:/bin" attnfuzz list | grep '^reference ' >/dev/null || fail "attnfuzz list (editable)"
echo "ok: an editable install runs $found"
echo "pip_install_test: all passed"
