#!/usr/bin/env python3
"""Plots bench_sensitivity CSVs as one SVG (docs/sensitivity.svg), with no library beyond Python.

    python3 bench/sensitivity/plot.py OUT.svg A.csv [B.csv ...]

One panel per dtype. The x axis lists the configurations (S, D, and the backend when a CSV's
name says `--backend`), the y axis the ratio planted error / natural error at the detection
threshold on a log scale, one marker per plant column (the worst tensor of that column, as the
tables of docs/verdicts.md group them), and the goal (8) as a line. A plant that was never
flagged up to its cap is drawn as a hollow marker at the top of the panel.
"""
import csv
import math
import os
import sys
from collections import OrderedDict

# Column of docs/verdicts.md's tables a (tensor, plant) row belongs to.
COLUMNS = OrderedDict([
    ("whole", ("O, dQ, dK, dV: scale, noise, tile, head", "#1f77b4", "circle")),
    ("lse", ("LSE: scale, noise, tile, head, shift", "#17becf", "square")),
    ("softmax_scale", ("softmax scale", "#2ca02c", "diamond")),
    ("dlse", ("dLSE term", "#9467bd", "circle")),
    ("row", ("one row (O, dQ, dK, dV)", "#d62728", "triangle")),
    ("lse_element", ("one LSE element", "#ff7f0e", "cross")),
])
GOAL = 8.0
Y_MIN, Y_MAX = 0.5, 64.0


def column_of(tensor, plant):
    if plant == "row":
        return "lse_element" if tensor == "LSE" else "row"
    if plant in ("dlse", "softmax_scale"):
        return plant
    return "lse" if tensor == "LSE" else "whole"


def read(paths):
    """{dtype: OrderedDict{(label): {column: (ratio, flagged)}}}"""
    panels = OrderedDict()
    for path in paths:
        backend = ""
        base = os.path.basename(path)
        if "--" in base:  # name--BACKEND.csv: the correct kernel was --backend BACKEND
            backend = base.split("--", 1)[1].rsplit(".", 1)[0]
        with open(path) as f:
            for r in csv.DictReader(f):
                label = "S=%s D=%s%s" % (r["seq"], r["dim"], (" " + backend) if backend else "")
                cell = panels.setdefault(r["dtype"], OrderedDict()).setdefault(label, {})
                col = column_of(r["tensor"], r["plant"])
                ratio = float(r["ratio"])
                flagged = float(r["threshold"]) > 0
                old = cell.get(col)
                worst = ratio if flagged else math.inf
                if old is None or worst > old:
                    cell[col] = worst
    # Configurations in order: the default kernel first, then by S and D.
    def key(label):
        parts = label.split(" ", 2)
        return (parts[2] if len(parts) > 2 else "", int(parts[0][2:]), int(parts[1][2:]))
    return OrderedDict((d, OrderedDict(sorted(cells.items(), key=lambda kv: key(kv[0])))) for d, cells in panels.items())


def y_of(ratio, top, height):
    r = min(max(ratio, Y_MIN), Y_MAX)
    return top + height * (1 - (math.log(r) - math.log(Y_MIN)) / (math.log(Y_MAX) - math.log(Y_MIN)))


def marker(shape, x, y, color, hollow):
    fill = "none" if hollow else color
    s = 4.5
    if shape == "circle":
        return '<circle cx="%.1f" cy="%.1f" r="%.1f" fill="%s" stroke="%s"/>' % (x, y, s, fill, color)
    if shape == "square":
        return '<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" stroke="%s"/>' % (x - s, y - s, 2 * s, 2 * s, fill, color)
    if shape == "diamond":
        pts = [(x, y - s * 1.3), (x + s * 1.3, y), (x, y + s * 1.3), (x - s * 1.3, y)]
    elif shape == "triangle":
        pts = [(x, y - s * 1.3), (x + s * 1.2, y + s), (x - s * 1.2, y + s)]
    else:  # cross
        return ('<path d="M%.1f %.1f L%.1f %.1f M%.1f %.1f L%.1f %.1f" stroke="%s" stroke-width="2"/>'
                % (x - s, y - s, x + s, y + s, x - s, y + s, x + s, y - s, color))
    return '<polygon points="%s" fill="%s" stroke="%s"/>' % (" ".join("%.1f,%.1f" % p for p in pts), fill, color)


def svg(panels):
    left, right, panel_h, gap, top0 = 60, 20, 220, 110, 70
    n = max(len(cells) for cells in panels.values())
    step = 34
    width = max(left + right + n * step, 1060)  # the legend needs 1060
    height = top0 + len(panels) * (panel_h + gap) + 40
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">' % (width, height),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%d" y="20" font-size="14">Detection threshold / natural error (goal &lt;= 8; hollow: not flagged up to the cap)</text>' % left]
    # Legend.
    lx = left
    for col, (name, color, shape) in COLUMNS.items():
        out.append(marker(shape, lx + 5, 36, color, False))
        out.append('<text x="%d" y="40">%s</text>' % (lx + 14, name))
        lx += 14 + 6 * len(name) + 16
    for p, (dtype, cells) in enumerate(panels.items()):
        top = top0 + 10 + p * (panel_h + gap)
        out.append('<text x="%d" y="%d" font-size="13" font-weight="bold">%s</text>' % (left + 4, top - 12, dtype))
        for tick in (0.5, 1, 2, 4, 8, 16, 32, 64):
            y = y_of(tick, top, panel_h)
            style = 'stroke="#c00" stroke-width="1.5"' if tick == GOAL else 'stroke="#ddd"'
            out.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" %s/>' % (left, width - right, y, y, style))
            out.append('<text x="%d" y="%.1f" text-anchor="end">%g</text>' % (left - 6, y + 4, tick))
        for i, (label, cols) in enumerate(cells.items()):
            x = left + step * (i + 0.5)
            for j, (col, (_, color, shape)) in enumerate(COLUMNS.items()):
                if col not in cols:
                    continue
                r = cols[col]
                xo = x + (j - 2.5) * 4
                out.append(marker(shape, xo, y_of(r if math.isfinite(r) else Y_MAX, top, panel_h), color, not math.isfinite(r)))
            ly = top + panel_h + 8
            out.append('<text transform="translate(%.1f,%d) rotate(55)" font-size="10">%s</text>' % (x - 4, ly, label))
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: plot.py OUT.svg A.csv [B.csv ...]")
    panels = read(sys.argv[2:])
    if not panels:
        sys.exit("plot.py: no rows in " + ", ".join(sys.argv[2:]))
    with open(sys.argv[1], "w") as f:
        f.write(svg(panels))


if __name__ == "__main__":
    main()
