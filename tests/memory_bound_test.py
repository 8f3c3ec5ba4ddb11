#!/usr/bin/env python3
"""The memory estimate is an upper bound (harness/case.h, estimate_host_bytes; docs/campaigns.md,
"Memory"): `attnfuzz run` of each case of a grid of shapes, with the default CPU backends and
--no-determinism-check, peaks at most the estimate above the baseline, the peak of a tiny case
through the same backends.

    memory_bound_test.py ATTNFUZZ_BINARY [--table]

The estimate is read from the refusal of `--memory-budget-mib 1`; the peak resident memory of
each run from wait4's rusage. Prints one row per shape (estimate, peak above the baseline, their
ratio) and exits 1 when a peak is over its estimate. --table runs the larger grid of
docs/campaigns.md instead (minutes)."""
import json
import os
import re
import subprocess
import sys
import tempfile

# B, Hq, Hkv, Sq, Skv, Dqk, Dv, composition: each kind of term of the estimate dominates one of
# them, in the heap regime (blocks under glibc's 32 MiB mmap threshold) that these sizes are in.
GRID = [
    (1, 1, 1, 64, 16384, 1, 1, "single"),    # a large Skv, D = 1: one head's matrices (the error terms)
    (1, 8, 8, 384, 384, 1, 1, "single"),     # every head's matrices (LibTorch's math graphs)
    (1, 8, 2, 256, 256, 64, 32, "single"),   # GQA, Dqk != Dv
    (1, 4, 4, 256, 512, 16, 16, "kv_split"),
    (1, 4, 4, 512, 256, 16, 16, "q_split"),
    (1, 4, 4, 128, 128, 128, 128, "single"),  # the float64 tensors
]
# docs/campaigns.md's table: the shapes of issue 26 and the grid's kinds at sizes past the mmap
# threshold (minutes on 2 cores).
TABLE = [
    (1, 1, 1, 512, 512, 64, 64, "single"),
    (1, 1, 1, 2048, 2048, 64, 64, "single"),
    (1, 1, 1, 4096, 4096, 1, 1, "single"),
    (2, 4, 4, 1024, 1024, 64, 64, "single"),
    (2, 4, 4, 2048, 2048, 16, 16, "single"),
    (1, 8, 8, 512, 512, 1, 1, "single"),
    (1, 8, 8, 512, 512, 1, 1, "mask_partition"),
    (1, 8, 2, 512, 512, 64, 32, "single"),
    (1, 8, 8, 128, 128, 256, 256, "kv_split"),
    (1, 8, 8, 128, 128, 256, 256, "q_split"),
    (1, 16, 1, 256, 256, 256, 256, "single"),
] + GRID


def case(b, hq, hkv, sq, skv, dqk, dv, comp):
    c = {"format": "attnfuzz-case/1", "seed": 7,
         "shape": {"batch": b, "heads_q": hq, "heads_kv": hkv, "seq_q": sq, "seq_kv": skv, "head_dim_qk": dqk, "head_dim_v": dv},
         "dtype": "fp32", "mask": {"kind": "causal", "align": "bottom_right"},
         "grads": {"d_out": {"dist": "normal"}, "d_lse": {"dist": "normal"}}}
    if comp == "kv_split":
        c["composition"] = {"kind": "kv_split", "bounds": [skv // 3, 2 * skv // 3]}
    elif comp == "q_split":
        c["composition"] = {"kind": "q_split", "bounds": [sq // 2]}
    elif comp == "mask_partition":
        c["composition"] = {"kind": "mask_partition", "window": {"left": 16, "right": 0, "align": "bottom_right"}}
    return c


def peak_kib(argv):
    """Runs argv; its exit status and peak resident memory (KiB) from wait4."""
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = p.stderr.read()
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    return p.returncode, usage.ru_maxrss, err.decode(errors="replace")


def estimate_mib(binary, path):
    r = subprocess.run([binary, "run", path, "--memory-budget-mib", "1"], capture_output=True, text=True)
    m = re.search(r"needs about (\d+) MiB", r.stderr)
    if r.returncode != 2 or not m:
        sys.exit(f"FAIL: no estimate for {path} (exit {r.returncode}): {r.stderr.strip()}")
    return int(m.group(1))


def main():
    binary = os.path.realpath(sys.argv[1])
    shapes = TABLE if "--table" in sys.argv[2:] else GRID
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        def write(shape, name):
            path = os.path.join(tmp, name + ".json")
            with open(path, "w") as f:
                json.dump(case(*shape), f)
            return path

        tiny = write((1, 1, 1, 4, 4, 4, 4, "single"), "tiny")
        rc, base, err = peak_kib([binary, "run", tiny, "--no-determinism-check"])
        if rc not in (0, 1):
            sys.exit(f"FAIL: the tiny case ended with exit {rc}: {err.strip()}")
        print(f"baseline: {base / 1024:.0f} MiB (the tiny case's peak)")
        print(f"{'B,Hq,Hkv,Sq,Skv,Dqk,Dv composition':<40} {'estimate':>9} {'peak-base':>10} {'ratio':>6}")
        for i, shape in enumerate(shapes):
            path = write(shape, f"c{i}")
            est = estimate_mib(binary, path)
            rc, peak, err = peak_kib([binary, "run", path, "--no-determinism-check"])
            if rc not in (0, 1):
                print(f"FAIL: {shape} ended with exit {rc}: {err.strip()}")
                failed = True
                continue
            above = (peak - base) / 1024
            ratio = est / above if above > 0 else float("inf")
            name = ",".join(map(str, shape[:7])) + " " + shape[7]
            verdict = "ok" if above <= est else "FAIL: over the estimate"
            print(f"{name:<40} {est:>6} MiB {above:>6.0f} MiB {ratio:>6.2f}  {verdict}")
            failed = failed or above > est
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
