"""attnfuzz_py.api and the `attnfuzz` command (python/attnfuzz_py/api.py, cli.py): where the binary
is found, the environment its Python workers get, and run / check / replay through the real
binary with their results parsed.

    ATTNFUZZ_BIN=build/cpu/attnfuzz PYTHONPATH=python .deps/pyenv/bin/python -m pytest tests/python/test_api.py
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from attnfuzz_py import api

ROOT = Path(__file__).resolve().parents[2]
SEED_CASE = ROOT / "corpus" / "seed-flex-lse-merge.json"


def executable(path, content):
    path.write_bytes(content)
    path.chmod(0o755)
    return path


@pytest.fixture
def bare_env(monkeypatch):
    for name in ("ATTNFUZZ_BIN", "ATTNFUZZ_PRESET", "ATTNFUZZ_PYTHON", "ATTNFUZZ_PY_PACKAGE_DIR"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_attnfuzz_bin_comes_first_and_must_be_executable(bare_env, tmp_path):
    fake = executable(tmp_path / "my-attnfuzz", b"\x7fELF not really")
    bare_env.setenv("ATTNFUZZ_BIN", str(fake))
    assert api.find_binary() == str(fake)
    bare_env.setenv("ATTNFUZZ_BIN", str(tmp_path / "missing"))
    with pytest.raises(api.BinaryNotFound, match="ATTNFUZZ_BIN"):
        api.find_binary()


def test_path_skips_scripts_named_attnfuzz(bare_env, tmp_path):
    # The entry point of this package and the checkout's ./attnfuzz are scripts: never "the binary".
    scripts, binaries = tmp_path / "scripts", tmp_path / "binaries"
    scripts.mkdir()
    binaries.mkdir()
    executable(scripts / "attnfuzz", b"#!/bin/sh\nexec true\n")
    elf = executable(binaries / "attnfuzz", b"\x7fELF...")
    bare_env.setenv("PATH", f"{scripts}{os.pathsep}{binaries}")
    assert api.find_binary() == str(elf)


def test_the_source_tree_builds_and_the_message_without_any(bare_env, tmp_path):
    bare_env.setenv("PATH", str(tmp_path))  # nothing there
    tree = api.source_tree()
    assert tree == ROOT, "run from the checkout: the package is python/attnfuzz_py"
    built = [p for p in ("cpu", "gpu") if api._is_native_executable(ROOT / "build" / p / "attnfuzz")]
    for preset in built:
        bare_env.setenv("ATTNFUZZ_PRESET", preset)
        assert api.find_binary() == str(ROOT / "build" / preset / "attnfuzz")
    bare_env.setattr(api, "source_tree", lambda: None)  # an installed copy
    with pytest.raises(api.BinaryNotFound) as e:
        api.find_binary()
    assert "ATTNFUZZ_BIN" in str(e.value) and "\n" not in str(e.value)
    done = subprocess.run([sys.executable, "-c", "import sys; from attnfuzz_py import api, cli; "
                           "api.source_tree = lambda: None; sys.exit(cli.main(['list']))"],
                          env={**os.environ, "PATH": str(tmp_path)}, capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.startswith("attnfuzz: no attnfuzz binary found")
    assert done.stderr.count("\n") == 1, done.stderr


def test_the_workers_get_this_interpreter_and_package_unless_told_otherwise(bare_env):
    bare_env.setenv("PYTHONPATH", "/already/there")
    env = api.environment(["/my/kernels"])
    assert env["ATTNFUZZ_PYTHON"] == sys.executable
    assert env["ATTNFUZZ_PY_PACKAGE_DIR"] == str(ROOT / "python")
    assert env["PYTHONPATH"] == f"/my/kernels{os.pathsep}/already/there"
    bare_env.setenv("ATTNFUZZ_PYTHON", "/opt/other/python")
    assert api.environment()["ATTNFUZZ_PYTHON"] == "/opt/other/python"


def test_replay_lines_are_parsed(monkeypatch):
    stdout = ("FAILING   /x/a.min.json  py.k/single/dQ/mismatch/fp32/causal\n"
              "fixed     /x/b.json  py.k/merged/LSE/mismatch/fp16/none\n"
              "UNTESTED  /x/c.json  py.k/single/O/mismatch/fp32/none: py.k declined the case: no kernel\n"
              "1 still failing, 1 fixed, 1 untested, 0 errors, 0 files skipped (not reproducers)\n")
    monkeypatch.setattr(api, "_execute", lambda *a: (["attnfuzz"], subprocess.CompletedProcess([], 4, stdout, "")))
    r = api.replay(["/x"])
    assert [(o.status, o.path, o.signature) for o in r.outcomes] == [
        ("failing", "/x/a.min.json", "py.k/single/dQ/mismatch/fp32/causal"),
        ("fixed", "/x/b.json", "py.k/merged/LSE/mismatch/fp16/none"),
        ("untested", "/x/c.json", "py.k/single/O/mismatch/fp32/none")]
    assert r.with_status("untested")[0].reason == "py.k declined the case: no kernel"


BUGGY_KERNEL = '''
import torch
import attnfuzz_py


@attnfuzz_py.kernel(contracts={"fp32": "fp32"})
def base2_lse(q, k, v, *, scale, mask=None):
    s = scale * q.double() @ k.double().transpose(-1, -2)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    o = torch.exp(s - lse[..., None]).nan_to_num(0.0) @ v.double()
    return o, lse * 1.4426950408889634  # the LSE in base 2, as exp2-based kernels keep it
'''


@pytest.fixture
def binary():
    try:
        return api.find_binary()
    except api.BinaryNotFound as e:
        if os.environ.get("ATTNFUZZ_BIN"):
            raise
        pytest.skip(f"no attnfuzz binary: {e}")


def test_run_check_and_replay_through_the_binary(binary, tmp_path):
    pytest.importorskip("torch")
    (tmp_path / "buggy_kernels.py").write_text(BUGGY_KERNEL)
    spec = "py:buggy_kernels:base2_lse"
    r = api.run(SEED_CASE, [spec], record=tmp_path / "recorded", pythonpath=[tmp_path], determinism_check=False)
    assert r.returncode == 1
    assert r.signatures and all(s.startswith("py.base2_lse/") for s in r.signatures)
    assert {f.signature for f in r.findings} == set(r.signatures)
    assert any(f.tensor == "LSE" and f.kind == "mismatch" and f.composition == "single" for f in r.findings)

    minimal = "py:attnfuzz_py.adapters.minimal:Minimal"
    checked = api.check([minimal], cases=6, tier="toy", seed=1, case_mix="aimed", out=tmp_path / "check")
    assert checked.returncode == 0 and checked.findings == [] and checked.summary["signatures"] == []
    assert checked.summary["cases"] == 6 and checked.summary["backends"] == [minimal]
    assert checked.backend_coverage("py.minimal")["ran"] > 0 and checked.untested == []
    assert checked.junit is not None and checked.out == tmp_path / "check"

    first = r.findings[0]
    replayed = api.replay(first.reproducer, pythonpath=[tmp_path])
    assert replayed.returncode == 1
    assert [(o.status, o.signature) for o in replayed.outcomes] == [("failing", first.signature)]
    record = json.loads(first.reproducer.read_text())
    assert record["finding"]["key"] == first.signature and first.case == record["case"]

    with pytest.raises(api.AttnfuzzError) as e:  # exit 2: an unknown backend, refused before any case
        api.check(["py:buggy_kernels:no_such_kernel"], cases=1, out=tmp_path / "refused", pythonpath=[tmp_path])
    assert e.value.returncode == 2 and "no_such_kernel" in str(e.value)
