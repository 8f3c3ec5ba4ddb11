#!/usr/bin/env python3
"""No include crosses the layers the wrong way (README.md, "Layout"). Each folder may include
itself and the folders named for it here:

  harness/     the core: interfaces, case model, verdicts           (nothing above it)
  oracles/     the yardsticks: float64 reference, baselines, error terms (harness/)
  generators/  case generation                                        (harness/)
  kernels/     the project's kernels under test                       (harness/)
  backends/    the systems under test and the registry                (harness/, oracles/, kernels/)
  campaign/    campaigns, reproducers, reports: interfaces only       (harness/)
  cli/         the commands, on top                                   (everything)

Programs (tests/, bench/, generators/fuzz/) sit above everything. Prints every include that
breaks the rule and exits 1 when there is one."""
import pathlib
import re
import sys

MAY_INCLUDE = {
    "harness": set(),
    "oracles": {"harness"},
    "generators": {"harness"},
    "kernels": {"harness"},
    "backends": {"harness", "oracles", "kernels"},
    "campaign": {"harness"},
    "cli": {"harness", "oracles", "generators", "kernels", "backends", "campaign"},
}
root = pathlib.Path(sys.argv[1])
bad = []
for top, allowed in MAY_INCLUDE.items():
    for f in sorted((root / top).rglob("*")):
        if f.suffix not in {".h", ".cpp", ".cu", ".cuh"} or "fuzz" in f.relative_to(root).parts[1:2]:
            continue
        for n, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
            m = re.match(r'\s*#\s*include\s+"([a-z_]+)/', line)
            if m and m.group(1) in MAY_INCLUDE and m.group(1) != top and m.group(1) not in allowed:
                bad.append(f"{f.relative_to(root)}:{n}: {top}/ includes {m.group(1)}/")
for b in bad:
    print(b)
print(f"{len(bad)} include(s) across the layers the wrong way")
sys.exit(1 if bad else 0)
