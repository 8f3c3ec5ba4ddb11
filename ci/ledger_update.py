#!/usr/bin/env python3
"""Writes the machine-kept "last replay" table of docs/findings/LEDGER.md from a replay log.

    ci/ledger_update.py LOG COMMIT DATE [LEDGER]      (LEDGER: docs/findings/LEDGER.md)

LEDGER defaults to docs/findings/LEDGER.md; the reproducers are always those of this checkout's
docs/findings/. LOG holds `attnfuzz replay` lines (`FAILING|fixed|UNTESTED|ERROR  PATH  SIGNATURE...`), as
`ci/gpu_run.sh ledger` writes them. Every reproducer under docs/findings/ gets one row: its
result, the date and the harness commit, or "not in this replay". Paths are matched by their
place under docs/findings/ (a log written in another checkout matches too). The table sits
between the markers <!-- replay:begin --> and <!-- replay:end -->; nothing else is touched.
"""
import pathlib
import re
import sys

BEGIN, END = "<!-- replay:begin -->", "<!-- replay:end -->"


def main(argv):
    if len(argv) not in (4, 5):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    log, commit, date = pathlib.Path(argv[1]), argv[2], argv[3]
    findings = pathlib.Path(__file__).resolve().parent.parent / "docs/findings"
    ledger = pathlib.Path(argv[4]) if len(argv) == 5 else findings / "LEDGER.md"
    results = {}
    for line in log.read_text(errors="replace").splitlines():
        m = re.match(r"^(FAILING|fixed|UNTESTED|ERROR)\s+(?:known \S+\s+)?(\S+?)(?::)?(?:\s+(.*))?$", line)
        if not m:
            continue
        status, path, rest = m.group(1), m.group(2), (m.group(3) or "")
        key = path.split("docs/findings/", 1)[-1]
        results[key] = (status, rest.split(":", 1)[0].strip())
    rows = []
    for f in sorted(findings.rglob("*.json")):
        key = f.relative_to(findings).as_posix()
        status, sig = results.get(key, ("not in this replay", ""))
        rows.append(f"| `{key}` | {'**' + status + '**' if status in ('FAILING', 'fixed', 'UNTESTED', 'ERROR') else status} | {sig} |")
    table = "\n".join([BEGIN, f"Replay of {date}, harness `{commit}` (written by `ci/ledger_update.py`):", "",
                       "| reproducer | result | signature |", "|---|---|---|", *rows, END])
    text = ledger.read_text()
    if BEGIN in text and END in text:
        text = text[:text.index(BEGIN)] + table + text[text.index(END) + len(END):]
    else:
        text = text.rstrip("\n") + "\n\n## Last replay, per reproducer\n\n" + table + "\n"
    ledger.write_text(text)
    print(f"{ledger}: {sum(1 for r in rows if 'not in this replay' not in r)} of {len(rows)} reproducers from {log}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
