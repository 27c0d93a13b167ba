#!/usr/bin/env bash
# gpu-profile.sh — where a bench selection's device time goes, on a GPU machine, in one call:
#   1. per-kernel totals (Nsight Systems' cuda_gpu_kern_sum; Nsight Compute's gpu__time_duration
#      when nsys is absent) over `lyco bench --backend cuda $LYCO_PROF_BENCH --dtypes bf16`;
#   2. optionally, the full Nsight Compute section report (speed of light, memory workload,
#      warp states, instruction mix, source counters) of the kernels matching $LYCO_PROF_NCU_KERNEL
#      over $LYCO_PROF_NCU_BENCH, the first $LYCO_PROF_NCU_COUNT (default 2) launches.
# Binaries: build-gpu/ as tools/gpu-focus.sh leaves them (run that first, or LYCO_PREBUILT_TAR).
# Output in $OUT: kern-sum.txt, ncu-details.txt, *.nsys-rep / *.ncu-rep.
#   LYCO_PROF_BENCH      default "--algo boft,diag_oft --quick"
#   LYCO_PROF_NCU_KERNEL e.g. "k_expand"   LYCO_PROF_NCU_BENCH e.g. "--algo lora --dir merge_fwd --quick"
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/profile-out}"; mkdir -p "$OUT"
B=build-gpu; mkdir -p $B
[ -x $B/lyco ] || { [ -f "${LYCO_PREBUILT_TAR:-build-carry/prebuilt.tar.xz}" ] && xz -dc "${LYCO_PREBUILT_TAR:-build-carry/prebuilt.tar.xz}" | tar -xf - -C $B; }
export LD_LIBRARY_PATH="$PWD/build-deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
L=$B/lyco; S=${LYCO_SEED:-20261129}
BENCH=${LYCO_PROF_BENCH:---algo boft,diag_oft --quick}
t0=$(date +%s); say() { echo "== $* ($(($(date +%s) - t0)) s)"; }
status=0
say "kernel totals over: lyco bench --backend cuda $BENCH --dtypes bf16"
if command -v nsys >/dev/null; then
    nsys profile -q -t cuda -o "$OUT/bench" -f true $L bench --backend cuda $BENCH --dtypes bf16 --seed $S > "$OUT/bench.txt" 2>&1 || status=1
    nsys stats -q -r cuda_gpu_kern_sum -f csv "$OUT/bench.nsys-rep" > "$OUT/kern-sum.csv" 2> "$OUT/nsys.err" || status=1
    python3 - "$OUT/kern-sum.csv" > "$OUT/kern-sum.txt" <<'PY' || status=1
import csv, sys
rows = [r for r in csv.DictReader(l for l in open(sys.argv[1]) if l.strip() and not l.startswith("Processing") and not l.startswith("NOTICE"))]
tot = sum(float(r["Total Time (ns)"]) for r in rows)
print("%6s %10s %8s %10s  %s" % ("share", "total ms", "calls", "med us", "kernel"))
for r in rows[:40]:
    print("%5.1f%% %10.2f %8s %10.1f  %s" % (100 * float(r["Total Time (ns)"]) / tot, float(r["Total Time (ns)"]) / 1e6, r["Instances"], float(r["Med (ns)"]) / 1e3, r["Name"][:110]))
PY
else
    ncu --clock-control none --csv --page raw --metrics gpu__time_duration.sum,launch__grid_size \
        $L bench --backend cuda $BENCH --dtypes bf16 --seed $S --reps 3 > "$OUT/ncu-times.csv" 2> "$OUT/ncu.err" || status=1
    python3 tools/ncu_summary.py "$OUT/ncu-times.csv" > "$OUT/kern-sum.txt" 2>&1 || status=1
    grep -vE '^"' "$OUT/ncu-times.csv" > "$OUT/bench.txt"   # the bench's own lines (ncu's are quoted CSV)
fi
grep -E "^[a-z0-9_-]+ +(merge|bypass)" "$OUT/bench.txt" | cut -c1-150
head -30 "$OUT/kern-sum.txt"
if [ -n "${LYCO_PROF_NCU_KERNEL:-}" ]; then
    say "ncu sections of ${LYCO_PROF_NCU_KERNEL} over ${LYCO_PROF_NCU_BENCH:-$BENCH}"
    ncu --clock-control none --set full --import-source no -k "regex:${LYCO_PROF_NCU_KERNEL}" -c "${LYCO_PROF_NCU_COUNT:-2}" \
        --launch-skip "${LYCO_PROF_NCU_SKIP:-0}" \
        -o "$OUT/kernel" -f $L bench --backend cuda ${LYCO_PROF_NCU_BENCH:-$BENCH} --dtypes bf16 --seed $S --reps 1 > "$OUT/ncu-run.txt" 2>&1 || status=1
    ncu -i "$OUT/kernel.ncu-rep" --page details > "$OUT/ncu-details.txt" 2>&1 || status=1
    ncu -i "$OUT/kernel.ncu-rep" --page source --csv --print-source sass > "$OUT/ncu-sass.csv" 2>/dev/null || true
    grep -E "Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|Issue Slots Busy|Achieved Occupancy|Registers Per|Executed Ipc|No Eligible|Warp Cycles Per Issued|Stall|Executed Instructions" "$OUT/ncu-details.txt" | head -40
fi
say "done (status $status)"
exit $status
