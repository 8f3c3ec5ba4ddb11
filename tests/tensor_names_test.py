#!/usr/bin/env python3
"""The Python bridge names tensors as the C++ side does: python/attnfuzz_py/protocol.py's
TENSOR_NAMES[code] is the wire_name of the row of harness/tensors.def whose wire column is code,
for every row and every code. Exits 1 and says which disagree."""
import ast
import pathlib
import re
import sys

ROW = re.compile(r'^TENSOR\(\s*(\w+)\s*,\s*(\w+)\s*,\s*"([^"]*)"\s*,\s*"([^"]*)"\s*,\s*(\w+)\s*,\s*(\d+)\s*,\s*(\w+)\s*,\s*(\d+)\s*,\s*"([^"]*)"\s*\)')


def table_wire_names(defs: str) -> dict:
    names = {}
    for line in defs.splitlines():
        m = ROW.match(line)
        if m:
            names[int(m.group(8))] = m.group(9)
        elif line.startswith("TENSOR("):
            raise SystemExit("harness/tensors.def: a row this test cannot read: " + line)
    return names


def protocol_tensor_names(source: str) -> tuple:
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "TENSOR_NAMES" for t in node.targets):
            return tuple(ast.literal_eval(node.value))
    raise SystemExit("python/attnfuzz_py/protocol.py: no TENSOR_NAMES")


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
    table = table_wire_names((root / "harness/tensors.def").read_text())
    python = protocol_tensor_names((root / "python/attnfuzz_py/protocol.py").read_text())
    expected = tuple(table.get(code) for code in range(max(table) + 1)) if table else ()
    problems = []
    if None in expected:
        problems.append("harness/tensors.def: wire codes are not 0..%d without gaps: %s" % (max(table), sorted(table)))
    if python != expected:
        problems.append("protocol.py TENSOR_NAMES %s, harness/tensors.def says %s" % (python, expected))
    for p in problems:
        print(p)
    if not problems:
        print("%d tensor names agree" % len(python))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
