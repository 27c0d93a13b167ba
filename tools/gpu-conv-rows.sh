#!/usr/bin/env bash
# gpu-conv-rows.sh — one device call that verifies and times conv LoCon's row-tile paths
# (locon_conv.cu rounds 3-4: k_h_rows for H, GH and dx, k_gp_rows for the d_down partials, the
# forward's expand) beside the kernels they replaced (LYCO_CUDA_CONV_HROWS=0
# LYCO_CUDA_CONV_YEXPAND=0):
#   1. (CR_TESTS=0 skips 1 and 2) test_cuda_locon_conv, every case (and with CR_OFF_TESTS=1 the rows_* cases switched off);
#   2. lyco check --backend cuda --algo locon,dylora --require-fused (CR_OFF_CHECK=1: switched off too);
#   3. Nsight Compute per-kernel device times of the bf16 conv bypass rows (ncu_rows.py), and with
#      CR_NCU_FULL=regex the full section set of the first timed launch of each matching kernel
#      (CR_NCU_SKIP launches skipped first, default 1: the accuracy proxy's; CR_NCU_COUNT profiled,
#      default 1 — e.g. CR_NCU_FULL=k_h_rows CR_NCU_SKIP=3 CR_NCU_COUNT=3 for GH, dx and H of the
#      backward's first timed call with CR_NCU_DIRS=bypass_bwd (the profiled directions); with
#      CR_NCU_STALL=regex the stall reasons per issued instruction of the same launches (e.g.
#      CR_NCU_STALL=k_dy_pass); CR_TAR=1 leaves $OUT as one archive $OUT.tgz;
#   4. lyco bench --algo lora-conv in the modes of CR_BENCH_MODES (default "default events off":
#      CUDA-graph replay, plain calls timed by events (LYCO_BENCH_GRAPH=0), graph replay switched
#      off; "none": no bench); CR_QUICK_ALL=1 then times every family's bf16 rows (--quick, 240 s at most);
#   5. compute-sanitizer memcheck and racecheck over the cases matching CR_SAN (default rows_;
#      racecheck over CR_RACE_CASES if set, stopped after CR_RACE_S seconds, default 200; CR_SAN=none: neither);
#   6. CR_TRY="VAR=value ...": a switched path (e.g. LYCO_CUDA_CONV_UPROWS=0) through the rows_* cases,
#      the locon,dylora check, the lora-conv bench and both sanitizers, beside the default above;
#   7. CR_AB_BIN=path: another lyco binary (an older commit's, carried in build-carry): the bf16
#      conv bypass rows by it and by this one, alternately, CR_AB_ROUNDS times (default 3), and
#      with CR_AB_NCU=1 its per-kernel ncu times as in 3; CR_AB_ENV="VAR=value ...": this binary
#      with those variables set (e.g. LYCO_CUDA_CONV_DYPASS=0) as another arm (with or without
#      CR_AB_BIN: up to three arms).
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
SEED=${LYCO_SEED:-3401}
S=$OUT/summary.txt; : >"$S"
t0=$(date +%s); say() { echo "== $* ($(($(date +%s) - t0)) s)" | tee -a "$S"; }
status=0
say "commit $(cat build-carry/prebuilt.commit 2>/dev/null || echo '?') (prebuilt); $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1); seed $SEED"

if [ "${CR_TESTS:-1}" = 1 ]; then   # CR_TESTS=0: no tests, no check (a bench- or sanitizer-only call)
say "test_cuda_locon_conv"
LYCO_SEED=$SEED $T >"$OUT/t-default.txt" 2>&1 || status=1
tail -n 1 "$OUT/t-default.txt" | tee -a "$S"; grep "FAIL" "$OUT/t-default.txt" | head -10 | tee -a "$S"
if [ "${CR_OFF_TESTS:-0}" = 1 ]; then
    say "test_cuda_locon_conv rows_* switched off"
    env $OFF LYCO_CASES=rows LYCO_SEED=$SEED $T >"$OUT/t-off.txt" 2>&1 || status=1
    tail -n 1 "$OUT/t-off.txt" | tee -a "$S"; grep "FAIL" "$OUT/t-off.txt" | head -10 | tee -a "$S"
fi

say "check locon,dylora --require-fused"
$L check --backend cuda --algo locon,dylora --require-fused --seed $SEED >"$OUT/check-default.txt" 2>&1 || status=1
tail -n 1 "$OUT/check-default.txt" | tee -a "$S"; grep " FAIL " "$OUT/check-default.txt" | head -10 | tee -a "$S"
if [ "${CR_OFF_CHECK:-0}" = 1 ]; then
    say "check locon,dylora --require-fused, switched off"
    env $OFF $L check --backend cuda --algo locon,dylora --require-fused --seed $SEED >"$OUT/check-off.txt" 2>&1 || status=1
    tail -n 1 "$OUT/check-off.txt" | tee -a "$S"; grep " FAIL " "$OUT/check-off.txt" | head -10 | tee -a "$S"
fi
fi   # CR_TESTS

BCMD="$L bench --backend cuda --algo lora-conv --dir ${CR_NCU_DIRS:-bypass_fwd,bypass_bwd} --dtypes bf16 --quick --seed $SEED"
if [ "${CR_NCU:-1}" = 1 ] && command -v ncu >/dev/null; then
    say "ncu bf16 conv bypass rows"
    ncu -c 800 --clock-control none --csv --page raw --metrics gpu__time_duration.sum,launch__grid_size,dram__throughput.avg.pct_of_peak_sustained_elapsed \
        $BCMD >"$OUT/ncu-default.csv" 2>"$OUT/ncu-default.err"
    python3 tools/ncu_rows.py "$OUT/ncu-default.csv" >"$OUT/ncu-default.txt" 2>&1
    head -40 "$OUT/ncu-default.txt" | tee -a "$S"
    # the full section set of the first timed launch (the second one: the first is the accuracy proxy's)
    # the stall reasons per issued instruction (and issue activity) of the matching kernels' launches
    STALLS=$(for r in barrier long_scoreboard short_scoreboard math_pipe_throttle mio_throttle wait not_selected selected \
        dispatch_stall lg_throttle tex_throttle no_instruction branch_resolving membar drain sleeping imc_miss; do
        printf 'smsp__average_warps_issue_stalled_%s_per_issue_active.ratio,' $r; done)
    for k in ${CR_NCU_STALL:-}; do
        say "ncu stall reasons: $k"
        ncu --clock-control none -k "regex:$k" --launch-skip ${CR_NCU_SKIP:-1} -c ${CR_NCU_COUNT:-1} \
            --metrics ${STALLS}smsp__average_warps_active_per_issue_active.ratio,smsp__issue_active.avg.per_cycle_active,smsp__inst_executed.sum,smsp__inst_executed_pipe_tensor.sum,gpu__time_duration.sum \
            $BCMD >"$OUT/ncu-stall-$k.txt" 2>&1
        grep -E "^  [a-z_]+<|k_[a-z_]+|stalled|issue_active|inst_executed|duration" "$OUT/ncu-stall-$k.txt" | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' | head -80 | tee -a "$S"
    done
    for k in ${CR_NCU_FULL:-}; do
        say "ncu --set full: $k"
        ncu --set full --clock-control none -k "regex:$k" --launch-skip ${CR_NCU_SKIP:-1} -c ${CR_NCU_COUNT:-1} $BCMD >"$OUT/ncu-full-$k.txt" 2>&1
        grep -E "Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|Issue Slots Busy|Memory Throughput|DRAM Throughput|L2 Hit|Block Limit|Stall|Warp Cycles Per Issued|Eligible Warps|No Eligible|Shared Memory Configuration|Dynamic Shared" "$OUT/ncu-full-$k.txt" | head -40 | tee -a "$S"
    done
fi

for mode in ${CR_BENCH_MODES:-default events off}; do
    [ "$mode" = none ] && continue
    say "bench --algo lora-conv ($mode)"
    case $mode in
        default) $L bench --backend cuda --algo lora-conv --seed $SEED --json "$OUT/bench-default.json" >"$OUT/bench-$mode.txt" 2>&1 || status=1 ;;
        events) LYCO_BENCH_GRAPH=0 $L bench --backend cuda --algo lora-conv --seed $SEED >"$OUT/bench-$mode.txt" 2>&1 || status=1 ;;
        off) env $OFF $L bench --backend cuda --algo lora-conv --seed $SEED >"$OUT/bench-$mode.txt" 2>&1 || status=1 ;;
    esac
    grep -E "^[a-z0-9-]+ +(merge|bypass)" "$OUT/bench-$mode.txt" | cut -c1-200 | tee -a "$S"
    sed -n '/^geomean/,$p' "$OUT/bench-$mode.txt" | head -12 | tee -a "$S"
    grep "graph capture failed" "$OUT/bench-$mode.txt" | head -3 | tee -a "$S"
done

if [ "${CR_QUICK_ALL:-0}" = 1 ]; then
    say "bench --quick --dtypes bf16, every family"
    timeout 240 $L bench --backend cuda --quick --dtypes bf16 --seed $SEED --json "$OUT/bench-quick.json" >"$OUT/bench-quick.txt" 2>&1 || status=1
    sed -n '/^geomean/,$p' "$OUT/bench-quick.txt" | head -60 | tee -a "$S"
    grep -E "graph capture failed|\[events\]" "$OUT/bench-quick.txt" | head -5 | tee -a "$S"
fi

if command -v compute-sanitizer >/dev/null && [ "${CR_SAN:-rows_}" != none ]; then   # CR_SAN=none: no sanitizer
    SAN=${CR_SAN:-rows_}
    say "memcheck LYCO_CASES=$SAN"
    LYCO_CASES=$SAN LYCO_SEED=$SEED timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 $T >"$OUT/memcheck.txt" 2>&1 || status=1
    grep -E "ERROR SUMMARY|passed," "$OUT/memcheck.txt" | tail -n 2 | tee -a "$S"
    RSAN=${CR_RACE_CASES:-$SAN}   # racecheck is slow: e.g. CR_RACE_CASES=dypass_o128 (rows_dypass_o300 does not finish in 90 s)
    say "racecheck LYCO_CASES=$RSAN"
    LYCO_CASES=$RSAN LYCO_SEED=$SEED timeout ${CR_RACE_S:-200} compute-sanitizer --tool racecheck --racecheck-report hazard --error-exitcode 9 $T >"$OUT/racecheck.txt" 2>&1 || status=1
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|passed," "$OUT/racecheck.txt" | tail -n 2 | tee -a "$S"
fi
if [ -n "${CR_TRY:-}" ]; then
    say "switched: $CR_TRY"
    env $CR_TRY LYCO_CASES=rows_ LYCO_SEED=$SEED $T >"$OUT/t-try.txt" 2>&1 || status=1
    tail -n 1 "$OUT/t-try.txt" | tee -a "$S"; grep "FAIL" "$OUT/t-try.txt" | head -10 | tee -a "$S"
    env $CR_TRY $L check --backend cuda --algo locon,dylora --require-fused --seed $SEED >"$OUT/check-try.txt" 2>&1 || status=1
    tail -n 1 "$OUT/check-try.txt" | tee -a "$S"; grep " FAIL " "$OUT/check-try.txt" | head -10 | tee -a "$S"
    env $CR_TRY $L bench --backend cuda --algo lora-conv --seed $SEED >"$OUT/bench-try.txt" 2>&1 || status=1
    grep -E "^[a-z0-9-]+ +(merge|bypass)" "$OUT/bench-try.txt" | cut -c1-200 | tee -a "$S"
    if command -v compute-sanitizer >/dev/null; then
        for tool in memcheck racecheck; do
            env $CR_TRY LYCO_CASES=rows_bwd LYCO_SEED=$SEED timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 $T >"$OUT/$tool-try.txt" 2>&1 || status=1
            grep -E "ERROR SUMMARY|RACECHECK SUMMARY|passed," "$OUT/$tool-try.txt" | tail -n 2 | tee -a "$S"
        done
    fi
fi
if [ -n "${CR_AB_BIN:-}${CR_AB_ENV:-}" ]; then
    ABCMD="bench --backend cuda --algo lora-conv --dir bypass_fwd,bypass_bwd --dtypes bf16 --no-scaling --seed $SEED"
    # the arms: the other binary (CR_AB_BIN), this binary with CR_AB_ENV set, this binary as it is
    ARMS=""
    [ -n "${CR_AB_BIN:-}" ] && ARMS="bin"
    [ -n "${CR_AB_ENV:-}" ] && ARMS="$ARMS env"
    ARMS="$ARMS lyco"
    arm_cmd() { case $1 in bin) echo "$CR_AB_BIN" ;; env) echo "env $CR_AB_ENV $L" ;; *) echo "$L" ;; esac; }
    for i in $(seq 1 "${CR_AB_ROUNDS:-3}"); do
        for arm in $ARMS; do
            cmd=$(arm_cmd $arm); name=$arm; [ $arm = bin ] && name=$(basename "$CR_AB_BIN")
            say "A/B round $i: $cmd"
            $cmd $ABCMD >"$OUT/ab-$i-$name.txt" 2>&1 || status=1
            grep -E "^[a-z0-9-]+ +(merge|bypass)" "$OUT/ab-$i-$name.txt" | awk -F'|' '{print $1 "|" $3 "|" $4}' | cut -c1-150 | tee -a "$S"
        done
    done
    if [ "${CR_AB_NCU:-0}" = 1 ] && command -v ncu >/dev/null; then
        for arm in $ARMS; do
            [ $arm = lyco ] && continue
            cmd=$(arm_cmd $arm)
            say "ncu bf16 conv bypass rows, $cmd"
            ncu -c 800 --clock-control none --csv --page raw --metrics gpu__time_duration.sum,launch__grid_size,dram__throughput.avg.pct_of_peak_sustained_elapsed \
                ${BCMD/#$L/$cmd} >"$OUT/ncu-ab-$arm.csv" 2>"$OUT/ncu-ab-$arm.err"
            python3 tools/ncu_rows.py "$OUT/ncu-ab-$arm.csv" >"$OUT/ncu-ab-$arm.txt" 2>&1
            head -40 "$OUT/ncu-ab-$arm.txt" | tee -a "$S"
        done
    fi
fi
say "done (status $status)"
# CR_TAR=1: $OUT as one archive $OUT.tgz (the device tool returns a limited number of files)
if [ "${CR_TAR:-0}" = 1 ]; then tar czf "$OUT.tgz" -C "$(dirname "$OUT")" "$(basename "$OUT")" && rm -rf "$OUT"; fi
exit $status
