#!/usr/bin/env bash
# gpu-lowrank-profile.sh — where the LoRA kernels' time goes, on a GPU machine (one call, ~5 min):
#   1. the correctness gate for the changed paths: check --backend cuda --algo locon,dylora (+ the conv
#      and device tests when built);
#   2. per-kernel device time, DRAM throughput, occupancy and issue activity of every LoRA kernel in the
#      quick bf16 bench rows (Nsight Compute, clocks left alone) -> $OUT/ncu.csv, summarised by
#      tools/ncu_summary.py into $OUT/ncu-summary.txt;
#   3. the split reductions' blocks-per-SM knob (LYCO_CUDA_LR_BLOCKS_PER_SM) swept over the backward and
#      bypass rows -> $OUT/knob-*.txt;
#   4. the LoRA/DoRA bench (every rank and dtype row) -> $OUT/bench-lora.txt.
# Usage (prebuilt binaries carried as build-carry/prebuilt.tar.xz, see gpu-tier.sh --pack-prebuilt):
#   OUT=dir bash tools/gpu-lowrank-profile.sh
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/profile-out}"; mkdir -p "$OUT"
B=build-gpu; mkdir -p $B
[ -f build-carry/prebuilt.tar.xz ] && xz -dc build-carry/prebuilt.tar.xz | tar -xf - -C $B
export LD_LIBRARY_PATH="$PWD/build-deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
L=$B/lyco; S=${LYCO_SEED:-20261129}
t0=$(date +%s); say() { echo "== $* ($(($(date +%s) - t0)) s)"; }
say "check --algo locon,dylora"
$L check --backend cuda --algo locon,dylora --seed $S > $OUT/check.txt 2>&1; tail -1 $OUT/check.txt; grep " FAIL " $OUT/check.txt | head
for t in test_cuda_locon_conv test_cuda_device; do
    [ -x $B/tests/$t ] && { LYCO_SEED=$S $B/tests/$t > $OUT/$t.txt 2>&1; echo "$t: $(tail -1 $OUT/$t.txt)"; grep "^FAIL" $OUT/$t.txt | head -5; }
done
say "ncu: LoRA kernels in the quick bf16 rows"
ncu --clock-control none --csv --page raw \
    --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active,launch__grid_size,launch__registers_per_thread,launch__occupancy_limit_registers,launch__occupancy_limit_shared_mem \
    -k regex:'k_(expand|reduce|colreduce|hfin|bwd_fin|colfin|bb_dx|merge_fwd_small|fin_dup|sum|dora_finish)' \
    $L bench --backend cuda --algo lora,dora --quick --dtypes bf16 --seed $S > $OUT/ncu.csv 2> $OUT/ncu.err
python3 tools/ncu_summary.py $OUT/ncu.csv > $OUT/ncu-summary.txt 2>&1; cat $OUT/ncu-summary.txt | head -40
say "knob sweep"
for k in ${LYCO_KNOBS:-2 3 6 12}; do
    LYCO_CUDA_LR_BLOCKS_PER_SM=$k $L bench --backend cuda --algo lora --quick --dtypes bf16 --seed $S > $OUT/knob-$k.txt 2>&1
    echo "blocks/SM $k:"; grep -E "^lora " $OUT/knob-$k.txt | awk -F'|' '{print "   " $1 "|" $3 "|" $4}' | cut -c1-150
done
say "bench lora,dora (all rows)"
$L bench --backend cuda --algo lora,dora --seed $S > $OUT/bench-lora.txt 2>&1; sed -n '/^geomean/,$p' $OUT/bench-lora.txt
say done
