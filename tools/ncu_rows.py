#!/usr/bin/env python3
"""ncu_rows.py — per-kernel median device time from an Nsight Compute raw CSV (ncu --csv --page raw
--metrics gpu__time_duration.sum,launch__grid_size[,dram__throughput...]) of a lyco bench run, in
launch order of the first call, each kernel's median over its launches with the same grid, so one
row's kernel sequence reads as a table. Usage: python3 tools/ncu_rows.py ncu.csv [--skip REGEX]"""
import csv
import re
import statistics
import sys


def main():
    args = sys.argv[1:]
    skip = re.compile(r"fill_uniform|nvjet|k_ref|cutlass|gemm_kernel|at::|memset")
    if "--skip" in args:
        i = args.index("--skip")
        skip = re.compile(args[i + 1])
        del args[i:i + 2]
    lines = [l for l in open(args[0]) if l.startswith('"')]
    rows = list(csv.reader(lines))
    hdr = rows[0]
    ki, ti, gi = hdr.index("Kernel Name"), hdr.index("gpu__time_duration.sum"), hdr.index("launch__grid_size")
    di = hdr.index("dram__throughput.avg.pct_of_peak_sustained_elapsed") if "dram__throughput.avg.pct_of_peak_sustained_elapsed" in hdr else None
    order, times, dram = [], {}, {}
    for r in rows[2:]:
        name = r[ki].split("(")[0].replace("void ", "").replace("<unnamed>::", "")
        if skip.search(name):
            continue
        key = (name, r[gi])
        if key not in times:
            order.append(key)
            times[key], dram[key] = [], []
        times[key].append(float(r[ti].replace(",", "")) / 1000.0)
        if di is not None:
            dram[key].append(float(r[di].replace(",", "")))
    print("%-64s %8s %6s %10s %7s" % ("kernel", "grid", "n", "median us", "dram %"))
    for key in order:
        d = statistics.median(dram[key]) if dram[key] else float("nan")
        print("%-64s %8s %6d %10.1f %7.1f" % (key[0][:64], key[1], len(times[key]), statistics.median(times[key]), d))


if __name__ == "__main__":
    main()
