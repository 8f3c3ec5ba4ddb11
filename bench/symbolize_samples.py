#!/usr/bin/env python3
"""Names the stacks of bench/wall_sampler.h and says where the wall time went.

    bench/symbolize_samples.py SAMPLES BINARY [--top N]

BINARY is the unstripped build of the sampled program (strip keeps addresses). Frames in
other objects (LibTorch, the CUDA driver, libc) are named by their file. Prints, per function,
the share of samples whose stack holds it (inclusive) and whose innermost frame of BINARY it
is (self: its own code and the libraries it called)."""
import bisect
import collections
import subprocess
import sys


def short(fn):
    """The name without its parameter list (the parentheses that close the name)."""
    if fn.endswith(")"):
        depth = 0
        for i in range(len(fn) - 1, -1, -1):
            depth += fn[i] == ")"
            depth -= fn[i] == "("
            if depth == 0:
                fn = fn[:i]
                break
    return fn[:120]


def main():
    path, binary = sys.argv[1], sys.argv[2]
    top = int(sys.argv[sys.argv.index("--top") + 1]) if "--top" in sys.argv else 40
    samples, maps = [], []
    for line in open(path):
        if line.startswith("S"):
            samples.append([int(x, 16) for x in line.split()[1:]])
        elif line.startswith("M "):
            parts = line[2:].split()
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            maps.append((lo, hi, int(parts[2], 16), parts[5] if len(parts) > 5 else "?"))
    maps.sort()
    starts = [m[0] for m in maps]
    name = binary.rsplit("/", 1)[-1]

    def where(a):
        i = bisect.bisect_right(starts, a) - 1
        if i < 0 or a >= maps[i][1]:
            return "?", 0
        lo, _, off, f = maps[i]
        return f, a - lo + off

    ours = {}
    for s in samples:
        for d, a in enumerate(s):
            f, off = where(a)
            if f.endswith("/" + name):
                ours.setdefault(off - (1 if d else 0), None)  # return address: the call is just before
    offsets = sorted(ours)
    out = subprocess.run(["addr2line", "-f", "-C", "-e", binary] + [hex(o) for o in offsets], capture_output=True, text=True).stdout
    lines = out.splitlines()
    for k, o in enumerate(offsets):
        fn = lines[2 * k] if 2 * k < len(lines) else "?"
        ours[o] = short(fn)

    inclusive, self_ = collections.Counter(), collections.Counter()
    for s in samples:
        seen, innermost = set(), None
        for d, a in enumerate(s):
            if d < 2:
                continue  # the signal handler and the kernel's return trampoline
            f, off = where(a)
            if f.endswith("/" + name):
                fn = ours.get(off - (1 if d else 0), "?")
                if innermost is None:
                    innermost = fn
            else:
                fn = "[" + f.rsplit("/", 1)[-1] + "]"
            if fn not in seen:
                seen.add(fn)
                inclusive[fn] += 1
        self_[innermost or "?"] += 1
    n = max(len(samples), 1)
    print(f"{len(samples)} samples")
    print("inclusive:")
    for fn, c in inclusive.most_common(top):
        print(f"  {100.0 * c / n:5.1f}%  {fn}")
    print("self (innermost frame of the binary):")
    for fn, c in self_.most_common(top):
        print(f"  {100.0 * c / n:5.1f}%  {fn}")


if __name__ == "__main__":
    main()
