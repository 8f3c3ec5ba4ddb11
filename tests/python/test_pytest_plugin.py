"""pytest --attnfuzz (python/attnfuzz_py/pytest_plugin.py) through pytest's own pytester: a
correct kernel passes, planted bugs in a hand-written backward are found by attnfuzz and fail with
their reproducer, replay command and tensor table, a kernel that runs no case fails (check's honest
coverage), and a backend named on the command line (the Triton example in Triton's interpreter)
is an item too.

    ATTNFUZZ_BIN=build/cpu/attnfuzz PYTHONPATH=python .deps/pyenv/bin/python -m pytest \
        tests/python/test_pytest_plugin.py

Without ATTNFUZZ_BIN the binary is looked up as the `attnfuzz` command does (attnfuzz_py.api).
"""
import subprocess

import pytest

pytest_plugins = ["pytester"]
torch = pytest.importorskip("torch")

# A flash-attention-style kernel with its own backward (dS = P * (dP - D + dLSE)), the shape most
# hand-written kernels have; BUG plants one mistake in that backward and none in the forward.
FLASH_STYLE = '''
import torch

import attnfuzz_py

BUG = {bug!r}


class FlashStyle(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, mask, scale):
        s = scale * (q.float() @ k.float().transpose(-1, -2))
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        lse = torch.logsumexp(s, dim=-1)
        p = torch.exp(s - lse[..., None]).nan_to_num(0.0)  # fully masked rows: no weight
        o = p @ v.float()
        ctx.save_for_backward(q, k, v, p, o)
        ctx.scale = scale
        return o, lse

    @staticmethod
    def backward(ctx, d_o, d_lse):
        q, k, v, p, o = ctx.saved_tensors
        d_p = d_o @ v.float().transpose(-1, -2)
        d_lse_term = 0.0 if BUG == "drops_dlse" else d_lse[..., None]
        d_s = p * (d_p - (d_o * o).sum(-1, keepdim=True) + d_lse_term)
        dq_scale = 1.0 if BUG == "dq_unscaled" else ctx.scale
        d_q = dq_scale * d_s @ k.float()
        d_k = ctx.scale * d_s.transpose(-1, -2) @ q.float()
        d_v = p.transpose(-1, -2) @ d_o
        return d_q, d_k, d_v, None, None


@attnfuzz_py.kernel(contracts={{"fp32": "fp32"}})
def flash_style(q, k, v, *, scale, mask=None):
    return FlashStyle.apply(q, k, v, mask, scale)


def test_an_ordinary_test_beside_it():
    assert True
'''

DECLINES_ALL = '''
import attnfuzz_py


@attnfuzz_py.kernel(contracts={"fp32": "fp32"}, supports=lambda p: "no kernel for this shape yet")
def unfinished(q, k, v, *, scale, mask=None):
    raise AssertionError("never called: supports() declines every call")
'''

NOT_AT_MODULE_LEVEL = '''
import attnfuzz_py


def make():
    @attnfuzz_py.kernel()
    def hidden(q, k, v, *, scale):
        return q, None
    return hidden


hidden = make()
'''

# The plugin from this source tree, by module; the entry point of an installed attnfuzz (or of an
# egg-info that `pip install .` left in python/) blocked, so it is never registered twice.
PLUGIN = ("-p", "no:attnfuzz", "-p", "attnfuzz_py.pytest_plugin")
QUICK = ("--attnfuzz", "--attnfuzz-cases", "16", "--attnfuzz-tier", "toy", "--attnfuzz-minimize-seconds", "10")


def test_without_the_flag_kernels_are_not_items(pytester):
    pytester.makepyfile(test_plain_run=FLASH_STYLE.format(bug=None))
    result = pytester.runpytest(*PLUGIN)
    result.assert_outcomes(passed=1)


def test_a_correct_kernel_passes(pytester):
    pytester.makepyfile(test_correct_kernel=FLASH_STYLE.format(bug=None))
    result = pytester.runpytest(*PLUGIN, *QUICK, "-v")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*test_correct_kernel.py::flash_style PASSED*"])
    summary = pytester.path / "attnfuzz-runs" / "pytest" / "py_test_correct_kernel_flash_style" / "summary.json"
    assert summary.is_file(), "the check's campaign directory is under attnfuzz-runs/pytest"


@pytest.mark.parametrize("bug, tensor", [("drops_dlse", "d[QK]"), ("dq_unscaled", "dQ")])
def test_a_planted_bug_is_found(pytester, bug, tensor):
    module = f"test_bug_{bug}"
    pytester.makepyfile(**{module: FLASH_STYLE.format(bug=bug)})
    result = pytester.runpytest(*PLUGIN, *QUICK)
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    # The failure names the findings, each reproducer and its replay, and shows the tensor table.
    result.stdout.re_match_lines([rf"\s+py\.flash_style/\w+/{tensor}/mismatch/fp32/\S+", r"\s+reproducer: \S+\.json",
                                  r"\s+replay: .* replay \S+\.json", r"backend\s+composition\s+contract\s+out.*",
                                  rf"py\.flash_style\s+\S+\s+fp32\s+{tensor}\s.*FAIL.*"])
    assert f"FAILED {module}.py::flash_style - " in out and "finding(s) in py:" in out
    # The replay command, as printed, runs the reproducer again and it still fails (exit 1).
    replay = next(line.split("replay:", 1)[1].strip() for line in out.splitlines() if "replay:" in line)
    done = subprocess.run(replay, shell=True, cwd=pytester.path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, (replay, done.stdout, done.stderr)
    assert "FAILING" in done.stdout and "1 still failing" in done.stdout


def test_a_kernel_that_runs_no_case_fails(pytester):
    pytester.makepyfile(test_unfinished=DECLINES_ALL)
    result = pytester.runpytest(*PLUGIN, *QUICK)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*the kernel ran no case*nothing was tested: py:test_unfinished:unfinished",
                                 "*coverage py.unfinished: 0 ran, 16 skipped, 0 errored*",
                                 "*no kernel for this shape yet*"])


def test_a_kernel_not_at_module_level_is_refused(pytester):
    pytester.makepyfile(test_hidden=NOT_AT_MODULE_LEVEL)
    result = pytester.runpytest(*PLUGIN, *QUICK)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*must be defined at module level*"])


def test_a_named_backend_is_an_item(pytester):
    pytest.importorskip("triton")
    spec = "py:attnfuzz_py.adapters.triton_flash:TritonFlash?device=cpu"
    result = pytester.runpytest(*PLUGIN, "--attnfuzz", "--attnfuzz-cases", "4", "--attnfuzz-tier", "toy",
                                "--attnfuzz-backends", spec, "-v")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"*attnfuzz::{spec} PASSED*"])
