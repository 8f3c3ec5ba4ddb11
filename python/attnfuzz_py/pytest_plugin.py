"""pytest --attnfuzz: every @attnfuzz_py.kernel of the collected test files (and every backend named
with --attnfuzz-backends) becomes a test item that runs a short attnfuzz check over it
(docs/testing-python-kernels.md).

An item fails when the kernel has findings (the report names each finding's signature and
reproducer, the replay command, and shows the tensor table of the first one), when it ran no case
(check's honest coverage: a kernel that declined everything tested nothing), or when attnfuzz
refused it (an import error in the kernel's module, a bad declaration: the binary's message).
Registered through the pytest11 entry point of the attnfuzz package; without --attnfuzz it adds
nothing.
"""
import re
import sys
import time
from pathlib import Path

import pytest

from . import api
from .kernel import is_kernel

DEFAULT_CASES = 20
DEFAULT_TIER = "toy"
DEFAULT_SEED = 1
MAX_FINDINGS_SHOWN = 8
_SEEN_KEY = pytest.StashKey[set]()


def pytest_addoption(parser):
    group = parser.getgroup("attnfuzz", "attnfuzz: fuzz attention kernels (docs/testing-python-kernels.md)")
    group.addoption("--attnfuzz", action="store_true", default=False,
                    help="test every @attnfuzz_py.kernel of the collected test files with an attnfuzz check")
    group.addoption("--attnfuzz-cases", type=int, default=DEFAULT_CASES, metavar="N",
                    help=f"cases per kernel (attnfuzz check --cases; default {DEFAULT_CASES})")
    group.addoption("--attnfuzz-seconds", type=float, default=None, metavar="S",
                    help="a time budget per kernel instead: an attnfuzz campaign of S seconds (not deterministic)")
    group.addoption("--attnfuzz-seed", type=int, default=DEFAULT_SEED, metavar="SEED",
                    help=f"campaign seed (default {DEFAULT_SEED})")
    group.addoption("--attnfuzz-tier", default=DEFAULT_TIER, choices=("toy", "small", "real", "decode", "auto"),
                    help=f"size tier of the generated cases (default {DEFAULT_TIER})")
    group.addoption("--attnfuzz-case-mix", default="aimed", choices=("aimed", "blind", "auto"),
                    help="cases aimed at each kernel's declared envelope (default), or blind")
    group.addoption("--attnfuzz-backends", action="append", default=[], metavar="A,B",
                    help="more backends to test, one item each: py:MODULE:CLASS[?k=v], plugin:/path/lib.so, or a "
                         "built-in name (comma-separated, repeatable)")
    group.addoption("--attnfuzz-out", default=None, metavar="DIR",
                    help="where the campaign directories go (default: attnfuzz-runs/pytest under the rootdir)")
    group.addoption("--attnfuzz-timeout", type=float, default=None, metavar="S",
                    help="the campaign's watchdog per case, seconds (a hang is a timeout finding)")
    group.addoption("--attnfuzz-minimize-seconds", type=float, default=None, metavar="S",
                    help="time for shrinking a kernel's findings, all together (default: attnfuzz's; 0: no limit)")


def pytest_configure(config):
    config.addinivalue_line("markers", "attnfuzz: an attnfuzz check of one kernel (pytest --attnfuzz)")
    config.stash[_SEEN_KEY] = set()


def pytest_pycollect_makeitem(collector, name, obj):
    if not collector.config.getoption("attnfuzz") or not is_kernel(obj) or name != obj.__name__:
        return None
    seen = collector.config.stash[_SEEN_KEY]
    key = f"{obj.__module__}:{obj.__qualname__}"
    if key in seen:  # imported into several test files: tested once
        return []
    seen.add(key)
    return AttnfuzzItem.from_parent(collector, name=name, kernel=obj)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items):
    # tryfirst: added before -k and -m deselect, so they select these too.
    if not config.getoption("attnfuzz"):
        return
    for spec in _named_backends(config):
        items.append(AttnfuzzItem.from_parent(session, name=f"attnfuzz[{spec}]", nodeid=f"attnfuzz::{spec}",
                                              spec=spec))


def _named_backends(config):
    specs = []
    for value in config.getoption("attnfuzz_backends"):
        specs += [s for s in value.split(",") if s]
    return list(dict.fromkeys(specs))


def module_root(module_name):
    """The sys.path entry from which `module_name` imports as the file it was loaded from (what
    the attnfuzz worker's PYTHONPATH needs), or (None, why not)."""
    module = sys.modules.get(module_name)
    file = getattr(module, "__file__", None)
    if not file:
        return None, f"module {module_name} has no file"
    path = Path(file).resolve()
    parts = module_name.split(".")
    root = path.parent
    if path.name == "__init__.py":
        root = root.parent
    for _ in parts[1:]:
        root = root.parent
    expected = root.joinpath(*parts[:-1], parts[-1] + ".py") if path.name != "__init__.py" else \
        root.joinpath(*parts, "__init__.py")
    if expected != path:
        return None, (f"module {module_name} ({path}) cannot be imported by that name from any folder "
                      "(pytest's importmode=importlib names modules so): move the kernel into a module of its own")
    return root, None


class AttnfuzzFailure(Exception):
    """The report of a failed attnfuzz item, shown as it is."""


class AttnfuzzItem(pytest.Item):
    def __init__(self, *, kernel=None, spec=None, **kwargs):
        super().__init__(**kwargs)
        self.kernel = kernel
        self.spec = spec or (kernel.backend if kernel is not None else None)
        self.add_marker("attnfuzz")

    def reportinfo(self):
        return self.path, None, f"attnfuzz {self.spec or self.name}"

    def _pythonpath(self):
        if self.kernel is None:
            return [str(self.config.rootpath)]
        root, why = module_root(self.kernel.__module__)
        if root is None:
            raise AttnfuzzFailure(f"{self.kernel.__qualname__}: {why}")
        return [str(root)]

    def _out(self):
        base = self.config.getoption("attnfuzz_out")
        base = Path(base) if base else self.config.rootpath / "attnfuzz-runs" / "pytest"
        label = re.sub(r"[^A-Za-z0-9._-]+", "_", self.spec)[:120]
        if self.config.getoption("attnfuzz_seconds") is not None:
            # A campaign never reuses a directory; a check replaces its own previous output.
            label += "-" + time.strftime("%Y%m%d-%H%M%S", time.gmtime())
        base.mkdir(parents=True, exist_ok=True)
        return base / label

    def runtest(self):
        if self.spec is None:
            raise AttnfuzzFailure(f"{self.kernel.__qualname__}: a @kernel must be defined at module level "
                                  "(attnfuzz's worker imports it by its module and name)")
        opt = self.config.getoption
        pythonpath = self._pythonpath()
        minimize_seconds = opt("attnfuzz_minimize_seconds")
        common = dict(seed=opt("attnfuzz_seed"), tier=opt("attnfuzz_tier"), case_mix=opt("attnfuzz_case_mix"),
                      out=self._out(), timeout_per_case=opt("attnfuzz_timeout"), pythonpath=pythonpath,
                      cwd=str(self.config.rootpath),
                      extra_args=() if minimize_seconds is None else ("--minimize-seconds", minimize_seconds))
        seconds = opt("attnfuzz_seconds")
        try:
            if seconds is None:
                what = f"attnfuzz check --cases {opt('attnfuzz_cases')}"
                result = api.check([self.spec], cases=opt("attnfuzz_cases"), **common)
            else:
                what = f"attnfuzz campaign --seconds {seconds:g}"
                result = api.campaign([self.spec], seconds=seconds, **common)
        except api.BinaryNotFound as e:
            raise AttnfuzzFailure(f"attnfuzz: {e}") from None
        except api.AttnfuzzError as e:
            raise AttnfuzzFailure(f"{what} refused {self.spec}: {e}\n{_tail(e.stderr, 30)}") from None
        header = (f"{what} --seed {opt('attnfuzz_seed')} --tier {opt('attnfuzz_tier')} of {self.spec}: "
                  f"{result.summary.get('cases', '?')} cases -> {result.out}")
        ran = _coverage_lines(result)
        if result.untested or result.returncode == 4:
            raise AttnfuzzFailure("\n".join([f"the kernel ran no case (it declined or failed every one), so nothing "
                                             f"was tested: {self.spec}", header, *ran,
                                             _tail(result.stderr, 10)]).rstrip())
        if result.returncode == 1 or result.findings:
            raise AttnfuzzFailure(self._findings_report(header, result, pythonpath, ran))

    def _findings_report(self, header, result, pythonpath, coverage):
        findings = sorted(result.findings, key=_shown_first)
        first = f": {findings[0].signature} ..." if findings else ""
        lines = [f"{len(findings)} finding(s) in {self.spec}{first}", header]
        for f in findings[:MAX_FINDINGS_SHOWN]:
            lines += [f"  {f.signature}", f"    {f.detail}", f"    reproducer: {f.reproducer}",
                      f"    replay:     {api.replay_command(f.reproducer, pythonpath)}"]
        if len(findings) > MAX_FINDINGS_SHOWN:
            lines.append(f"  ... and {len(findings) - MAX_FINDINGS_SHOWN} more in {result.out / 'findings'}")
        lines += coverage
        if findings:
            first = findings[0]
            lines += ["", f"the tensor table of {first.reproducer.name} "
                          f"(attnfuzz run REPRODUCER --backends {self.spec}):"]
            lines.append(self._table(first.reproducer, pythonpath))
        lines.append(f"report: {result.out / 'report.html'}")
        return "\n".join(lines)

    def _table(self, reproducer, pythonpath):
        try:
            shown = api.run(reproducer, [self.spec], determinism_check=False, pythonpath=pythonpath,
                            cwd=str(self.config.rootpath))
        except api.AttnfuzzError as e:
            return f"  (attnfuzz run failed: {e})"
        # The rule is a long constant line, said in docs/verdicts.md: left out here.
        return "\n".join(line for line in shown.stdout.rstrip().splitlines() if not line.startswith("rule "))

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, AttnfuzzFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style)


# Wrong results before precision classes (a wrong value often also looks like a coarser contract),
# a single call before a composition: the first finding shown is the plainest to read.
_PRECISION_CLASSES = ("contract_violation", "consistency")


def _shown_first(finding):
    return finding.kind in _PRECISION_CLASSES, finding.composition != "single", finding.signature


def _coverage_lines(result):
    lines = []
    for name, cov in sorted(result.coverage.get("backends", {}).items()):
        lines.append(f"coverage {name}: {cov.get('ran', 0)} ran, {cov.get('skipped', 0)} skipped, "
                     f"{cov.get('errored', 0)} errored")
        for reason in cov.get("reasons", [])[:5]:
            lines.append(f"  {reason.get('count', 0)}x {reason.get('example') or reason.get('reason')}")
    return lines


def _tail(text, n):
    return "\n".join(text.rstrip().splitlines()[-n:])
