#!/usr/bin/env python3
"""ncu_summary.py — per-kernel summary of an `ncu --csv --page raw` file (tools/gpu-focus.sh with LYCO_FOCUS_NCU):
launches, median duration, and the median of each other metric, grouped by kernel name and grid size."""
import csv
import statistics
import sys
from collections import defaultdict


def main(path):
    rows = list(csv.reader(open(path, newline="")))
    head = next(i for i, r in enumerate(rows) if r and r[0] == "ID")
    cols = rows[head]
    data = [r for r in rows[head + 2:] if len(r) == len(cols)]  # skip the units row
    name = cols.index("Kernel Name")
    units = rows[head + 1] if len(rows) > head + 1 else [""] * len(cols)
    # the metrics asked for (ncu's raw page also lists every launch__/device__ attribute: not those)
    metrics = [c for c in cols if c.startswith(("gpu__", "dram__", "sm__", "smsp__", "l1tex__", "lts__"))]
    groups = defaultdict(list)
    for r in data:
        grid = r[cols.index("launch__grid_size")] if "launch__grid_size" in cols else ""
        groups[(r[name].split("(")[0][-60:], grid)].append(r)
    print("%-60s %8s %6s " % ("kernel", "grid", "n") + " ".join(
        "%14s" % ("%s [%s]" % (m.split("__")[1][:9], units[cols.index(m)][:4])) for m in metrics))
    for (k, grid), rs in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        vals = []
        for m in metrics:
            xs = []
            for r in rs:
                try:
                    xs.append(float(r[cols.index(m)].replace(",", "")))
                except ValueError:
                    pass
            vals.append("%14.1f" % statistics.median(xs) if xs else "%14s" % "-")
        print("%-60s %8s %6d " % (k, grid, len(rs)) + " ".join(vals))


if __name__ == "__main__":
    main(sys.argv[1])
