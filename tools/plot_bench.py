#!/usr/bin/env python3
"""plot_bench.py — PNG plots of a `lyco bench --json` file (BENCH.md §7).

usage: plot_bench.py BENCH.json OUTDIR

Writes, per family: <family>_time_over_floor.png (time/floor of every row, one bar per
direction × shape × dtype row, the 1.0 line is the floor) and <family>_ulp.png (max ULP of the
fused kernel beside the eager twin's, per row); and summary.png (geomean time/floor per family
and direction). Needs matplotlib; reads nothing else.
"""
import json
import math
import os
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def label(r):
    rank = f" r{r['rank']}" if r.get("rank") else ""
    return f"{r['dir']} {r['shape']}{rank} {r['dtypes']}"


def bars(ax, names, values, title, ylabel, ref=None):
    ax.barh(range(len(values)), values, color="#4878a8")
    ax.set_yticks(range(len(values)))
    ax.set_yticklabels(names, fontsize=7)
    ax.invert_yaxis()
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(ylabel)
    if ref is not None:
        ax.axvline(ref, color="#c03030", lw=1)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    with open(sys.argv[1]) as f:
        bench = json.load(f)
    out = sys.argv[2]
    os.makedirs(out, exist_ok=True)
    device = bench.get("device", "?")
    by_family = defaultdict(list)
    for r in bench["rows"]:
        by_family[r["family"]].append(r)
    summary = {}
    for fam, rows in by_family.items():
        rows = [r for r in rows if r["time_over_floor"] > 0]
        if not rows:
            continue
        names = [label(r) for r in rows]
        h = 0.25 * len(rows) + 1.2
        fig, ax = plt.subplots(figsize=(9, h))
        bars(ax, names, [r["time_over_floor"] for r in rows], f"{fam}: time / floor ({device})", "time / floor (1 = at the floor)", 1.0)
        fig.tight_layout()
        fig.savefig(os.path.join(out, f"{fam}_time_over_floor.png"), dpi=110)
        plt.close(fig)
        fig, ax = plt.subplots(figsize=(9, h))
        y = range(len(rows))
        ax.barh([i - 0.2 for i in y], [r["ulp_fused"] for r in rows], height=0.4, label="fused", color="#4878a8")
        ax.barh([i + 0.2 for i in y], [r["ulp_eager"] for r in rows], height=0.4, label="eager twin", color="#d08040")
        ax.set_yticks(list(y))
        ax.set_yticklabels(names, fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel("max ULP vs the fp64 oracle (RMS-normalised)")
        ax.set_title(f"{fam}: accuracy, fused vs eager twin", fontsize=10)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(out, f"{fam}_ulp.png"), dpi=110)
        plt.close(fig)
        per_dir = defaultdict(list)
        for r in rows:
            per_dir[r["dir"]].append(math.log(r["time_over_floor"]))
        for d, v in per_dir.items():
            summary[f"{fam} {d}"] = math.exp(sum(v) / len(v))
    if summary:
        names = sorted(summary)
        fig, ax = plt.subplots(figsize=(8, 0.3 * len(names) + 1.2))
        bars(ax, names, [summary[n] for n in names], f"geomean time / floor per family and direction ({device})", "time / floor", 1.0)
        fig.tight_layout()
        fig.savefig(os.path.join(out, "summary.png"), dpi=110)
        plt.close(fig)
    print(f"plot_bench: wrote {len(by_family)} families' plots and summary.png to {out}")


if __name__ == "__main__":
    main()
