#!/usr/bin/env bash
# gpu-conv-rows.sh — one device call that verifies and times the conv LoCon bypass's row-tile path
# (locon_conv.cu "Round 3": k_h_rows for H, lowrank.cu's expand for y = y0 + c·U·H) against the
# kernels it replaced (LYCO_CUDA_CONV_HROWS=0 LYCO_CUDA_CONV_YEXPAND=0), side by side:
#   1. test_cuda_locon_conv (every case; then the five rows_* cases with the switches off);
#   2. lyco check --backend cuda --algo locon,dylora --require-fused, default and switches off;
#   3. Nsight Compute per-kernel device times of the bf16 conv bypass rows, both ways (ncu_rows.py);
#   4. lyco bench --algo lora-conv, both ways;
#   5. compute-sanitizer memcheck and racecheck over the rows_* cases (150 s each at most).
# Binaries from build-carry/prebuilt.tar.xz (gpu-tier.sh --pack-prebuilt). Everything in $OUT;
# summary.txt is the digest. Usage: OUT=dir bash tools/gpu-conv-rows.sh
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/conv-rows-out}"; mkdir -p "$OUT"
B=build-gpu; mkdir -p $B
[ -f build-carry/prebuilt.tar.xz ] && xz -dc build-carry/prebuilt.tar.xz | tar -xf - -C $B
export LD_LIBRARY_PATH="$PWD/build-deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
L=$B/lyco; T=$B/tests/test_cuda_locon_conv
OFF="LYCO_CUDA_CONV_HROWS=0 LYCO_CUDA_CONV_YEXPAND=0"
S=$OUT/summary.txt; : >"$S"
t0=$(date +%s); say() { echo "== $* ($(($(date +%s) - t0)) s)" | tee -a "$S"; }
status=0
say "commit $(cat build-carry/prebuilt.commit 2>/dev/null || echo '?') (prebuilt); $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1)"

say "test_cuda_locon_conv (seed 3301)"
LYCO_SEED=3301 $T >"$OUT/t-default.txt" 2>&1 || status=1
tail -1 "$OUT/t-default.txt" | tee -a "$S"; grep "FAIL" "$OUT/t-default.txt" | head -10 | tee -a "$S"
say "test_cuda_locon_conv rows_* with the switches off"
env $OFF LYCO_CASES=rows LYCO_SEED=3301 $T >"$OUT/t-off.txt" 2>&1 || status=1
tail -1 "$OUT/t-off.txt" | tee -a "$S"; grep "FAIL" "$OUT/t-off.txt" | head -10 | tee -a "$S"

for mode in default off; do
    say "check locon,dylora --require-fused ($mode, seed 3302)"
    if [ $mode = default ]; then
        $L check --backend cuda --algo locon,dylora --require-fused --seed 3302 >"$OUT/check-$mode.txt" 2>&1 || status=1
    else
        env $OFF $L check --backend cuda --algo locon,dylora --require-fused --seed 3302 >"$OUT/check-$mode.txt" 2>&1 || status=1
    fi
    tail -1 "$OUT/check-$mode.txt" | tee -a "$S"; grep " FAIL " "$OUT/check-$mode.txt" | head -10 | tee -a "$S"
done

if command -v ncu >/dev/null; then
    for mode in default off; do
        say "ncu bf16 conv bypass rows ($mode)"
        cmd="$L bench --backend cuda --algo lora-conv --dir bypass_fwd,bypass_bwd --dtypes bf16 --quick --seed 3305"
        if [ $mode = default ]; then
            ncu -c 800 --clock-control none --csv --page raw --metrics gpu__time_duration.sum,launch__grid_size,dram__throughput.avg.pct_of_peak_sustained_elapsed \
                $cmd >"$OUT/ncu-$mode.csv" 2>"$OUT/ncu-$mode.err"
        else
            env $OFF ncu -c 800 --clock-control none --csv --page raw --metrics gpu__time_duration.sum,launch__grid_size,dram__throughput.avg.pct_of_peak_sustained_elapsed \
                $cmd >"$OUT/ncu-$mode.csv" 2>"$OUT/ncu-$mode.err"
        fi
        python3 tools/ncu_rows.py "$OUT/ncu-$mode.csv" >"$OUT/ncu-$mode.txt" 2>&1
        head -40 "$OUT/ncu-$mode.txt" | tee -a "$S"
    done
fi

for mode in default off; do
    say "bench --algo lora-conv ($mode)"
    if [ $mode = default ]; then
        $L bench --backend cuda --algo lora-conv --seed 3306 --json "$OUT/bench-$mode.json" >"$OUT/bench-$mode.txt" 2>&1 || status=1
    else
        env $OFF $L bench --backend cuda --algo lora-conv --seed 3306 >"$OUT/bench-$mode.txt" 2>&1 || status=1
    fi
    grep -E "^[a-z0-9-]+ +(merge|bypass)" "$OUT/bench-$mode.txt" | cut -c1-200 | tee -a "$S"
    sed -n '/^geomean/,$p' "$OUT/bench-$mode.txt" | head -12 | tee -a "$S"
done
if command -v compute-sanitizer >/dev/null; then
    say "memcheck LYCO_CASES=rows"
    LYCO_CASES=rows LYCO_SEED=3303 timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 $T >"$OUT/memcheck.txt" 2>&1 || status=1
    grep -E "ERROR SUMMARY|passed," "$OUT/memcheck.txt" | tail -2 | tee -a "$S"
    say "racecheck LYCO_CASES=rows_"
    LYCO_CASES=rows_ LYCO_SEED=3304 timeout 150 compute-sanitizer --tool racecheck --racecheck-report hazard --error-exitcode 9 $T >"$OUT/racecheck.txt" 2>&1 || status=1
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|passed," "$OUT/racecheck.txt" | tail -2 | tee -a "$S"
fi

say "done (status $status)"
exit $status
