"""Does LibTorch's SDPA backward repeat bit for bit, per kernel and determinism mode? (N-1, docs/findings/README.md)

Standalone: plain PyTorch on a CUDA GPU, nothing from attnfuzz. B=2 H=8 S=2048 D=64 bf16, causal,
torch.nn.functional.scaled_dot_product_attention with one kernel enabled (flash, memory-efficient,
cuDNN; math as a control). For each kernel and each mode
  default        torch.use_deterministic_algorithms(False): nondeterminism is allowed and
                 documented; a differing dQ here is NOT a bug
  det            torch.use_deterministic_algorithms(True, warn_only=False): PyTorch's contract is
                 that an op without a deterministic implementation raises (or, here, the kernel is
                 not selected); running and giving a different dQ each time would be a violation
  det_warn_only  torch.use_deterministic_algorithms(True, warn_only=True): may warn and run
it runs the forward and backward five times on identical inputs, with the mode kept ON for all
five runs, records any exception and any warning, and compares O, dQ, dK, dV bitwise with the
first run (max abs difference if not identical). Each (kernel, mode) runs in its own process, so
a warn-once message or a mode is not carried from one to the next. (An earlier version of this
script switched the mode off before the five runs, so it only showed the default mode's
documented nondeterminism.)

    python3 sdpa_backward_determinism.py                     # all, ~30-60 s on an H200
    python3 sdpa_backward_determinism.py --one KERNEL MODE   # one, in this process

Result lines (grep '^RESULT'):
  RESULT kernel=K mode=M status=ran|raised warned=yes|no O=identical|<maxdiff> dQ=... dK=... dV=...
      verdict=...   warning="..." error="..."
  verdict: default_nondeterministic (documented) | deterministic | raised (contract kept) |
      warned_nondeterministic | VIOLATION_silent_nondeterministic (det mode, ran, no warning, some
      tensor differs) | child_failed
"""
import os

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import json  # noqa: E402
import re  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import warnings  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

KERNELS = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
           "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}
MODES = {"default": (False, False), "det": (True, False), "det_warn_only": (True, True)}
NAMES = ("O", "dQ", "dK", "dV")
RUNS = 5


def once(kernel, q, k, v, d_out):
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    with sdpa_kernel([kernel]):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    out.backward(d_out)
    torch.cuda.synchronize()
    return out.detach(), q.grad, k.grad, v.grad


def compare(a, b):
    if torch.equal(a.view(torch.int16), b.view(torch.int16)):
        return "identical"
    return f"{float((a.double() - b.double()).abs().max()):.3e}"


def short(s):
    return json.dumps(" ".join(str(s).split())[:220])


def one(kname, mode):
    det, warn_only = MODES[mode]
    g = torch.Generator(device="cuda").manual_seed(0)
    shape = (2, 8, 2048, 64)
    q, k, v, d_out = (torch.randn(shape, generator=g, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    torch.use_deterministic_algorithms(det, warn_only=warn_only)
    head = f"RESULT kernel={kname} mode={mode} deterministic={torch.are_deterministic_algorithms_enabled()} " \
           f"warn_only={torch.is_deterministic_algorithms_warn_only_enabled()}"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            runs = [once(KERNELS[kname], q, k, v, d_out) for _ in range(RUNS)]
            err = None
        except RuntimeError as e:
            runs, err = None, e
    msgs = []
    for w in caught:
        m = " ".join(str(w.message).split())
        if m not in msgs:
            msgs.append(m)
    warned = "yes" if msgs else "no"
    wtxt = short(" | ".join(msgs))
    if err is not None:
        print(f"{head} status=raised warned={warned} verdict=raised error={short(err)} warning={wtxt}")
        return
    diffs = {}
    for i, n in enumerate(NAMES):
        worst = "identical"
        for r in runs[1:]:
            c = compare(runs[0][i], r[i])
            if c != "identical" and (worst == "identical" or float(c) > float(worst)):
                worst = c
        diffs[n] = worst
    same = all(x == "identical" for x in diffs.values())
    if same:
        verdict = "deterministic"
    elif not det:
        verdict = "default_nondeterministic"
    elif msgs:
        verdict = "warned_nondeterministic"
    else:
        verdict = "VIOLATION_silent_nondeterministic"
    print(f"{head} status=ran warned={warned} " + " ".join(f"{n}={diffs[n]}" for n in NAMES)
          + f" verdict={verdict} warning={wtxt}")


def main():
    print("torch", torch.__version__, "CUDA", torch.version.cuda, "cuDNN", torch.backends.cudnn.version(),
          "GPU", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none")
    print(f"VERSIONS torch={torch.__version__} cuda={torch.version.cuda} cudnn={torch.backends.cudnn.version()} "
          f"gpu={json.dumps(torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none')} "
          f"CUBLAS_WORKSPACE_CONFIG={os.environ.get('CUBLAS_WORKSPACE_CONFIG')}")
    print(f"B=2 H=8 S=2048 D=64 bf16 causal; {RUNS} runs per (kernel, mode), each pair in its own process;"
          " O/dQ/dK/dV: 'identical' or the largest abs difference from run 1\n")
    table = []
    for kname in KERNELS:
        for mode in MODES:
            try:
                p = subprocess.run([sys.executable, __file__, "--one", kname, mode],
                                   capture_output=True, text=True, timeout=150)
                out, rc, err = p.stdout, p.returncode, p.stderr
            except subprocess.TimeoutExpired:
                out, rc, err = "", "timeout", ""
            lines = [x for x in out.splitlines() if x.startswith("RESULT")]
            if rc != 0 or not lines:
                tail = " ".join(" ".join(x.split()) for x in (err or "").strip().splitlines()[-3:])
                lines.append(f"RESULT kernel={kname} mode={mode} status=child_failed rc={rc} "
                             f"verdict=child_failed error={json.dumps(tail[-300:])}")
            for line in lines:
                print(line)
                table.append(dict((a, json.loads(b) if b.startswith('"') else b)
                                  for a, b in re.findall(r'(\w+)=("(?:[^"\\]|\\.)*"|\S+)', line)))
            sys.stdout.flush()
    print(f"\n{'kernel':10s} {'mode':14s} {'status':8s} {'warned':6s} {'O':>10s} {'dQ':>10s} {'dK':>10s} {'dV':>10s}  verdict")
    for r in table:
        print(f"{r.get('kernel', ''):10s} {r.get('mode', ''):14s} {r.get('status', ''):8s} {r.get('warned', '-'):6s} "
              f"{r.get('O', '-'):>10s} {r.get('dQ', '-'):>10s} {r.get('dK', '-'):>10s} {r.get('dV', '-'):>10s}  "
              f"{r.get('verdict', '')}")
    print("\nwarnings and errors:")
    for r in table:
        if r.get("warning") or r.get("error"):
            print(f"  {r.get('kernel')}/{r.get('mode')}: warning: {r.get('warning', '')} error: {r.get('error', '')}")
    print("\nReading: 'default_nondeterministic' is documented behaviour. Under mode det (warn_only=False)"
          " the contract is raised or deterministic; VIOLATION_silent_nondeterministic breaks it.")


if __name__ == "__main__":
    if "--one" in sys.argv:
        i = sys.argv.index("--one")
        one(sys.argv[i + 1], sys.argv[i + 2])
    else:
        main()
    sys.exit(0)
