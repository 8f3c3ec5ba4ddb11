#!/usr/bin/env python3
"""No include runs upward (README.md, "Layout"): cli/ on top, then campaign/, then oracles/,
generators/ and kernels/, then the core harness/. Programs (tests/, bench/, generators/fuzz/)
sit above everything. Prints every upward include and exits 1 when there is one."""
import pathlib
import re
import sys

LAYER = {"harness": 1, "oracles": 2, "generators": 2, "kernels": 2, "campaign": 3, "cli": 4}
root = pathlib.Path(sys.argv[1])
upward = []
for top, level in LAYER.items():
    for f in sorted((root / top).rglob("*")):
        if f.suffix not in {".h", ".cpp", ".cu", ".cuh"} or "fuzz" in f.relative_to(root).parts[1:2]:
            continue
        for n, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
            m = re.match(r'\s*#\s*include\s+"([a-z_]+)/', line)
            if m and LAYER.get(m.group(1), 0) > level:
                upward.append(f"{f.relative_to(root)}:{n}: {top}/ includes {m.group(1)}/")
for u in upward:
    print(u)
print(f"{len(upward)} upward include(s)")
sys.exit(1 if upward else 0)
