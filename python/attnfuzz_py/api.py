"""attnfuzz from Python: run, campaign, check and replay through the attnfuzz binary, with the
results parsed into Python objects (docs/testing-python-kernels.md, "The API").

    from attnfuzz_py import api
    result = api.check(["py:my_kernels:flash"], cases=50, tier="toy", pythonpath=["."])
    result.returncode, result.findings, result.coverage

Each function runs the binary in a subprocess. Its Python workers are pointed at this interpreter
and this copy of attnfuzz_py (ATTNFUZZ_PYTHON, ATTNFUZZ_PY_PACKAGE_DIR) unless the environment
names others, so a kernel importable here is importable there; `pythonpath` entries go in front
of PYTHONPATH for the modules that hold your kernels.

Exit codes (docs/campaigns.md): 0 no finding, 1 findings, 4 nothing tested come back as results;
2 (bad input), 3 (internal error) and anything else raise AttnfuzzError with the binary's stderr.
"""
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

BINARY_NAME = "attnfuzz"
PRESETS = ("cpu", "gpu")
RESULT_CODES = (0, 1, 4)  # no finding, findings, nothing tested: answers, not failures of the call
_ELF_MAGIC = b"\x7fELF"


class BinaryNotFound(RuntimeError):
    """No attnfuzz binary: the message says where it looked and how to build one."""


class AttnfuzzError(RuntimeError):
    """The binary refused its input (exit 2) or failed (exit 3, a signal)."""

    def __init__(self, returncode, command, stdout, stderr):
        self.returncode, self.command, self.stdout, self.stderr = returncode, command, stdout, stderr
        lines = [line for line in stderr.splitlines() if line.strip()]
        why = lines[-1] if lines else f"no message (stdout ends: {stdout[-300:]!r})"
        super().__init__(f"attnfuzz exited {returncode}: {why}")


# ---------------------------------------------------------------- finding the binary


def package_dir() -> str:
    """The folder holding this attnfuzz_py package (what ATTNFUZZ_PY_PACKAGE_DIR names)."""
    return str(Path(__file__).resolve().parent.parent)


def source_tree() -> Optional[Path]:
    """The attnfuzz checkout this package lives in (an editable install, or PYTHONPATH=python/),
    None for an installed copy."""
    root = Path(__file__).resolve().parent.parent.parent
    return root if (root / "CMakePresets.json").is_file() and (root / "python" / "attnfuzz_py").is_dir() else None


def _is_native_executable(path: Path) -> bool:
    # Scripts named attnfuzz are skipped: this package's own console entry point and the
    # checkout's ./attnfuzz (which builds a preset first) would otherwise be found instead of the binary.
    try:
        if not (path.is_file() and os.access(path, os.X_OK)):
            return False
        with open(path, "rb") as f:
            return f.read(4) == _ELF_MAGIC
    except OSError:
        return False


def _gpu_usable() -> bool:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return False
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return any(line.startswith("GPU ") for line in out.splitlines())


def _preset_order():
    """The build presets to look in, as ./attnfuzz chooses: ATTNFUZZ_PRESET alone when set, else
    gpu first where a GPU is usable."""
    chosen = os.environ.get("ATTNFUZZ_PRESET")
    if chosen in PRESETS:
        return (chosen,)
    return ("gpu", "cpu") if _gpu_usable() else ("cpu", "gpu")


def find_binary() -> str:
    """The attnfuzz binary: ATTNFUZZ_BIN, else an attnfuzz executable (not a script) on PATH, else
    build/<preset>/attnfuzz of the checkout this package lives in. Raises BinaryNotFound."""
    explicit = os.environ.get("ATTNFUZZ_BIN")
    if explicit:
        if Path(explicit).is_file() and os.access(explicit, os.X_OK):
            return str(Path(explicit).absolute())
        raise BinaryNotFound(f"ATTNFUZZ_BIN={explicit!r} is not an executable file")
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        if folder and _is_native_executable(Path(folder) / BINARY_NAME):
            return str(Path(folder).absolute() / BINARY_NAME)
    tree = source_tree()
    looked = "ATTNFUZZ_BIN unset, no attnfuzz executable on PATH"
    if tree is not None:
        for preset in _preset_order():
            candidate = tree / "build" / preset / BINARY_NAME
            if _is_native_executable(candidate):
                return str(candidate)
        looked += f", no build/{{cpu,gpu}}/attnfuzz in {tree}"
        how = f"build it with `cd {tree} && ./attnfuzz list` (sets up and builds the cpu or gpu preset)"
    else:
        how = ("build it from an attnfuzz checkout (`./attnfuzz list` sets up and builds a preset), then put "
               "build/cpu on PATH or set ATTNFUZZ_BIN=/path/to/build/cpu/attnfuzz")
    raise BinaryNotFound(f"no attnfuzz binary found ({looked}): {how}")


def environment(pythonpath: Sequence = (), env: Optional[dict] = None) -> dict:
    """The environment for the binary: this interpreter and package for its Python workers
    (unless ATTNFUZZ_PYTHON / ATTNFUZZ_PY_PACKAGE_DIR are set already: an explicit choice wins),
    and `pythonpath` in front of PYTHONPATH."""
    out = dict(os.environ if env is None else env)
    out.setdefault("ATTNFUZZ_PYTHON", sys.executable)
    out.setdefault("ATTNFUZZ_PY_PACKAGE_DIR", package_dir())
    extra = [str(Path(p).absolute()) for p in pythonpath]
    if extra:
        rest = [p for p in out.get("PYTHONPATH", "").split(os.pathsep) if p]
        out["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(extra + rest))
    return out


def replay_command(reproducer, pythonpath: Sequence = ()) -> str:
    """A shell command that replays `reproducer` the way this process would: the `attnfuzz`
    entry point of this environment where there is one, else `python -m attnfuzz_py`."""
    entry = Path(sys.executable).parent / BINARY_NAME
    paths = [str(Path(p).absolute()) for p in pythonpath]
    if entry.is_file() and not _is_native_executable(entry):
        program = [str(entry)] if shutil.which(BINARY_NAME) != str(entry) else [BINARY_NAME]
    else:
        program = [sys.executable, "-m", "attnfuzz_py"]
        if not _importable_without_path():
            paths.append(package_dir())
    prefix = f"PYTHONPATH={shlex.quote(os.pathsep.join(paths))} " if paths else ""
    return prefix + shlex.join(program + ["replay", str(reproducer)])


def _importable_without_path() -> bool:
    # True when attnfuzz_py is installed in this interpreter's site-packages (not only on PYTHONPATH).
    import site
    roots = [Path(p).resolve() for p in site.getsitepackages()]
    return Path(package_dir()).resolve() in roots


# ---------------------------------------------------------------- results


@dataclass
class Finding:
    """One recorded finding of a campaign directory (findings/*.json, docs/campaigns.md).

    path: the reproducer as recorded; minimized: its shrunk .min.json (None when not minimized);
    signature: "backend/composition/tensor/class/dtype/mask"; backend ... mask: its parts;
    detail: the verdict's one line (errors, bound, worst block); metrics: the numbers behind it;
    case: the case of the minimized reproducer where there is one, else of the recorded one;
    record: the whole reproducer JSON (of `reproducer`)."""
    path: Path
    minimized: Optional[Path]
    signature: str
    backend: str
    composition: str
    tensor: str
    kind: str
    dtype: str
    mask: str
    detail: str
    metrics: dict
    case: dict
    record: dict

    @property
    def reproducer(self) -> Path:
        """The file to replay: the minimized one where there is one."""
        return self.minimized or self.path

    @classmethod
    def load(cls, path) -> "Finding":
        path = Path(path)
        minimized = path.with_name(path.name[: -len(".json")] + ".min.json")
        minimized = minimized if minimized.is_file() else None
        record = json.loads((minimized or path).read_text())
        finding = record.get("finding", {})
        sig = finding.get("signature", {})
        return cls(path=path, minimized=minimized, signature=finding.get("key", ""),
                   backend=sig.get("backend", ""), composition=sig.get("composition", ""),
                   tensor=sig.get("tensor", ""), kind=sig.get("class", ""), dtype=sig.get("dtype", ""),
                   mask=sig.get("mask", ""), detail=finding.get("detail", ""), metrics=finding.get("metrics", {}),
                   case=record.get("case", {}), record=record)


def load_findings(out) -> list:
    """The findings of a campaign directory, in file name order."""
    folder = Path(out) / "findings"
    if not folder.is_dir():
        return []
    return [Finding.load(p) for p in sorted(folder.glob("*.json")) if not p.name.endswith(".min.json")]


@dataclass
class CampaignResult:
    """A campaign's or check's outcome.

    returncode: 0 no finding, 1 findings, 4 (check) a backend ran no case; out: the campaign
    directory; summary: its summary.json (dict; {} if none was written); findings: list of
    Finding; coverage: summary["coverage"] (per backend ran/skipped/errored and the reasons,
    "untested": the backends that ran nothing); command, stdout, stderr: the run itself."""
    returncode: int
    out: Path
    summary: dict
    findings: list
    command: list
    stdout: str
    stderr: str

    @property
    def coverage(self) -> dict:
        return self.summary.get("coverage", {})

    @property
    def untested(self) -> list:
        """The backends (by name, py.<name>) that ran no case."""
        return list(self.coverage.get("untested", []))

    def backend_coverage(self, name) -> dict:
        """ran, skipped, errored, reasons, by_composition of one backend (by name, py.<name>)."""
        return self.coverage.get("backends", {}).get(name, {})

    @property
    def junit(self) -> Optional[Path]:
        path = self.out / "junit.xml"
        return path if path.is_file() else None


@dataclass
class RunResult:
    """One case through `attnfuzz run`: returncode (0, 1, 4), the printed table (stdout), the
    findings' signatures as printed, and the recorded Findings when `record` named a folder."""
    returncode: int
    stdout: str
    stderr: str
    signatures: list
    findings: list
    command: list


@dataclass
class ReplayOutcome:
    """One reproducer's line of `attnfuzz replay`: status is failing, fixed, untested, not_here or
    error; reason: why it was untested, not here or an error."""
    status: str
    path: str
    signature: str = ""
    reason: str = ""


@dataclass
class ReplayResult:
    returncode: int
    outcomes: list = field(default_factory=list)
    stdout: str = ""
    stderr: str = ""
    command: list = field(default_factory=list)

    def with_status(self, status) -> list:
        return [o for o in self.outcomes if o.status == status]


# ---------------------------------------------------------------- running the binary


def _execute(args, pythonpath, env, cwd, timeout):
    command = [find_binary(), *map(str, args)]
    done = subprocess.run(command, env=environment(pythonpath, env), cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)
    if done.returncode not in RESULT_CODES:
        raise AttnfuzzError(done.returncode, command, done.stdout, done.stderr)
    return command, done


def _backends_arg(backends):
    if backends is None:
        return []
    if isinstance(backends, str):
        backends = [backends]
    return ["--backends", ",".join(backends)]


def _fresh_out(cwd) -> Path:
    # The binary's own default, attnfuzz-runs/<UTC time>, made unique here so that the
    # directory is known before the run.
    base = Path(cwd or ".") / "attnfuzz-runs" / time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    out, n = base, 1
    while out.exists():
        n += 1
        out = base.with_name(f"{base.name}-{n}")
    return out


def _campaign_options(seed, tier, case_mix, jobs, timeout_per_case, known, minimize, quiet, extra_args):
    args = []
    for flag, value in (("--seed", seed), ("--tier", tier), ("--case-mix", case_mix), ("--jobs", jobs),
                        ("--timeout", timeout_per_case)):
        if value is not None:
            args += [flag, value]
    for path in known or ():
        args += ["--known", path]
    if not minimize:
        args.append("--no-minimize")
    if quiet:
        args.append("--quiet")
    return args + list(extra_args)


def _campaign_result(command, done, out):
    summary_path = out / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
    return CampaignResult(returncode=done.returncode, out=out, summary=summary, findings=load_findings(out),
                          command=command, stdout=done.stdout, stderr=done.stderr)


def campaign(backends=None, *, seconds=None, cases=None, seed=None, tier=None, case_mix=None, out=None, jobs=None,
             timeout_per_case=None, known=(), resume=False, minimize=True, quiet=True, extra_args=(),
             pythonpath=(), env=None, cwd=None, timeout=None) -> CampaignResult:
    """`attnfuzz campaign`: generated cases through `backends` (names or py:/plugin: specs) for
    `seconds` or `cases`; out defaults to a new attnfuzz-runs/<time> under cwd. `timeout` bounds
    the whole subprocess (seconds), `timeout_per_case` is the campaign's own watchdog."""
    out = Path(out) if out is not None else _fresh_out(cwd)
    args = ["campaign", *_backends_arg(backends), "--out", out]
    if seconds is not None:
        args += ["--seconds", seconds]
    if cases is not None:
        args += ["--cases", cases]
    if resume:
        args.append("--resume")
    args += _campaign_options(seed, tier, case_mix, jobs, timeout_per_case, known, minimize, quiet, extra_args)
    command, done = _execute(args, pythonpath, env, cwd, timeout)
    return _campaign_result(command, done, out if out.is_absolute() else Path(cwd or ".").absolute() / out)


def check(backends=None, *, cases=None, seed=None, tier=None, case_mix=None, out=None, timeout_per_case=None,
          known=(), minimize=True, quiet=True, extra_args=(), pythonpath=(), env=None, cwd=None,
          timeout=None) -> CampaignResult:
    """`attnfuzz check`: a deterministic campaign with a case budget (the binary's default 200) that
    exits 4 when a backend ran no case. `out` is emptied first if it holds a previous check (the
    binary refuses anything else); its junit.xml is `result.junit`."""
    out = Path(out) if out is not None else _fresh_out(cwd)
    args = ["check", *_backends_arg(backends), "--out", out]
    if cases is not None:
        args += ["--cases", cases]
    args += _campaign_options(seed, tier, case_mix, None, timeout_per_case, known, minimize, quiet, extra_args)
    command, done = _execute(args, pythonpath, env, cwd, timeout)
    return _campaign_result(command, done, out if out.is_absolute() else Path(cwd or ".").absolute() / out)


def run(case, backends=None, *, record=None, isolate=False, determinism_check=True, extra_args=(), pythonpath=(),
        env=None, cwd=None, timeout=None) -> RunResult:
    """`attnfuzz run CASE`: one case (or reproducer) through `backends`; `record` names a folder for
    one reproducer per finding (then parsed into `findings`)."""
    args = ["run", case, *_backends_arg(backends)]
    if record is not None:
        args += ["--record", record]
    if isolate:
        args.append("--isolate")
    if not determinism_check:
        args.append("--no-determinism-check")
    command, done = _execute([*args, *extra_args], pythonpath, env, cwd, timeout)
    record_dir = None if record is None else (Path(record) if Path(record).is_absolute() else Path(cwd or ".") / record)
    findings = [] if record_dir is None or not record_dir.is_dir() else [
        Finding.load(p) for p in sorted(record_dir.glob("*.json")) if not p.name.endswith(".min.json")]
    return RunResult(returncode=done.returncode, stdout=done.stdout, stderr=done.stderr,
                     signatures=_printed_signatures(done.stdout), findings=findings, command=command)


def _printed_signatures(stdout):
    """The signatures listed under run's "N finding(s)" line."""
    lines = stdout.splitlines()
    for i, line in enumerate(lines):
        if re.fullmatch(r"\d+ finding\(s\)", line.strip()):
            return [entry.split()[0] for entry in lines[i + 1:] if entry.startswith("  ") and entry.strip()]
    return []


_REPLAY_LINE = re.compile(r"^(FAILING|fixed|UNTESTED|not here|ERROR)\s+(.*)$")
_REPLAY_STATUS = {"FAILING": "failing", "fixed": "fixed", "UNTESTED": "untested", "not here": "not_here",
                  "ERROR": "error"}


def replay(paths, *, backends=None, junit=None, timeout_per_case=None, runnable_only=False, extra_args=(),
           pythonpath=(), env=None, cwd=None, timeout=None) -> ReplayResult:
    """`attnfuzz replay`: re-run reproducers (files or folders). returncode 0 all fixed, 1 some still
    fail, 4 some untested; a file that is no reproducer raises AttnfuzzError (exit 2)."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    args = ["replay", *paths, *_backends_arg(backends)]
    if junit is not None:
        args += ["--junit", junit]
    if timeout_per_case is not None:
        args += ["--timeout", timeout_per_case]
    if runnable_only:
        args.append("--runnable-only")
    command, done = _execute([*args, *extra_args], pythonpath, env, cwd, timeout)
    outcomes = []
    for line in done.stdout.splitlines():
        m = _REPLAY_LINE.match(line)
        if not m:
            continue
        status, rest = _REPLAY_STATUS[m.group(1)], m.group(2)
        if status == "error":
            outcomes.append(ReplayOutcome(status, path="", reason=rest))
            continue
        path, _, tail = rest.partition("  ")
        signature, _, reason = tail.partition(": ")
        outcomes.append(ReplayOutcome(status, path=path, signature=signature.strip(), reason=reason))
    return ReplayResult(returncode=done.returncode, outcomes=outcomes, stdout=done.stdout, stderr=done.stderr,
                        command=command)
