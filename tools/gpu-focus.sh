#!/usr/bin/env bash
# gpu-focus.sh — a focused verification + bench of the kernels a change touched, on a GPU machine, in
# one call of a few minutes (the whole tier, sanitizers and Python included, is tools/gpu-tier.sh).
# Binaries come prebuilt from build-carry/prebuilt.tar.xz (gpu-tier.sh --pack-prebuilt); output in $OUT.
#
#   LYCO_FOCUS_ALGOS  check --algo list                       (default locon,dylora)
#   LYCO_FOCUS_AB     "VAR=1 VAR2=1": switches that select the other kernels (old or opt-in); the
#                     check and the bench run again under them, so both are verified and timed side
#                     by side in this one run                  (default: none)
#   LYCO_FOCUS_AB_CHECK=0  time the switches in the bench only (their kernels verified earlier)
#   LYCO_FOCUS_BENCH  lyco bench arguments                     (default --algo lora,dora --quick)
#   LYCO_FOCUS_NCU    kernel-name regex: profile those kernels (Nsight Compute, clocks left alone)
#                     over the bf16 rows of LYCO_FOCUS_BENCH into ncu.csv / ncu-summary.txt
#   LYCO_FOCUS_TESTS  test binaries under build-gpu/tests     (default test_cuda_locon_conv test_cuda_device)
#   LYCO_FOCUS_EXTRA  shell commands run last ($L is the lyco binary, $S the seed)
# Usage: OUT=dir LYCO_FOCUS_ALGOS=loha LYCO_FOCUS_AB="LYCO_CUDA_LOHA_NO_TC=1" bash tools/gpu-focus.sh
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/focus-out}"; mkdir -p "$OUT"
B=build-gpu; mkdir -p $B
[ -f build-carry/prebuilt.tar.xz ] && xz -dc build-carry/prebuilt.tar.xz | tar -xf - -C $B
export LD_LIBRARY_PATH="$PWD/build-deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
L=$B/lyco; S=${LYCO_SEED:-20261129}
ALGOS=${LYCO_FOCUS_ALGOS:-locon,dylora}
BENCH=${LYCO_FOCUS_BENCH:---algo lora,dora --quick}
t0=$(date +%s); say() { echo "== $* ($(($(date +%s) - t0)) s)"; }
status=0
row() { grep -E "^[a-z0-9-]+ +(merge|bypass)" "$1" | awk -F'|' '{print "   " $1 "|" $3 "|" $4}' | cut -c1-160; }

say "check --backend cuda --algo $ALGOS --seed $S"
$L check --backend cuda --algo "$ALGOS" --seed $S > $OUT/check.txt 2>&1 || status=1
tail -1 $OUT/check.txt; grep " FAIL " $OUT/check.txt | head -10
[ "${LYCO_FOCUS_AB_CHECK:-1}" = 0 ] || for ab in ${LYCO_FOCUS_AB:-}; do
    say "check with $ab"
    env "$ab" $L check --backend cuda --algo "$ALGOS" --seed $S > "$OUT/check-${ab%%=*}.txt" 2>&1 || status=1
    tail -1 "$OUT/check-${ab%%=*}.txt"; grep " FAIL " "$OUT/check-${ab%%=*}.txt" | head -5
done
for t in ${LYCO_FOCUS_TESTS:-test_cuda_locon_conv test_cuda_device}; do
    [ -x $B/tests/$t ] || continue
    LYCO_SEED=$S $B/tests/$t > $OUT/$t.txt 2>&1 || status=1
    echo "$t: $(tail -1 $OUT/$t.txt)"; grep "^FAIL" $OUT/$t.txt | head -5
done

say "bench $BENCH"
$L bench --backend cuda $BENCH --seed $S --json $OUT/bench.json > $OUT/bench.txt 2>&1 || status=1
row $OUT/bench.txt; sed -n '/^geomean/,$p' $OUT/bench.txt | head -30
if [ -n "${LYCO_FOCUS_AB:-}" ]; then
    say "bench $BENCH with ${LYCO_FOCUS_AB}"
    env ${LYCO_FOCUS_AB} $L bench --backend cuda $BENCH --seed $S > $OUT/bench-ab.txt 2>&1 || status=1
    row $OUT/bench-ab.txt
fi

if [ -n "${LYCO_FOCUS_NCU:-}" ] && command -v ncu >/dev/null; then
    say "ncu: kernels matching ${LYCO_FOCUS_NCU}"
    ncu --clock-control none --csv --page raw \
        --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active,launch__grid_size,launch__registers_per_thread,launch__occupancy_limit_registers,launch__occupancy_limit_shared_mem \
        -k "regex:${LYCO_FOCUS_NCU}" $L bench --backend cuda $BENCH --dtypes bf16 --seed $S > $OUT/ncu.csv 2> $OUT/ncu.err
    python3 tools/ncu_summary.py $OUT/ncu.csv > $OUT/ncu-summary.txt 2>&1; head -40 $OUT/ncu-summary.txt
fi

if [ -n "${LYCO_FOCUS_EXTRA:-}" ]; then
    say "extra: ${LYCO_FOCUS_EXTRA}"
    eval "${LYCO_FOCUS_EXTRA}" || status=1
fi
say "done (status $status)"
exit $status
