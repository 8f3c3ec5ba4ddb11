#!/usr/bin/env python3
"""The findings ledger (docs/findings/LEDGER.md) indexes every reproducer under docs/findings/:
each file is named in it, and each known deviation's id (campaign --known) is a row of it."""
import json
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1])
findings = root / "docs" / "findings"
ledger = (findings / "LEDGER.md").read_text()
row_ids = set(re.findall(r"^\| *([A-Za-z0-9_.-]+) *\|", ledger, re.M))
fail = 0
for f in sorted(findings.rglob("*.json")):
    rel = f.relative_to(findings).as_posix()
    if rel not in ledger:
        print(f"FAIL: {rel} is not in docs/findings/LEDGER.md")
        fail = 1
    try:
        j = json.loads(f.read_text())
    except (ValueError, UnicodeDecodeError):
        continue
    kid = (j.get("known") or {}).get("id") if isinstance(j, dict) else None
    if kid and kid not in row_ids:
        print(f"FAIL: {rel}: known id {kid} has no row in docs/findings/LEDGER.md")
        fail = 1
    for b in j.get("backends", []) if isinstance(j, dict) else []:
        if b.startswith("plugin:") and "/" in b:
            print(f"FAIL: {rel}: names a plugin by a path ({b}), not by its file name")
            fail = 1
print("ledger: ok" if not fail else "ledger: FAILED")
sys.exit(fail)
