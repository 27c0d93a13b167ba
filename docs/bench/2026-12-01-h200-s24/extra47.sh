# session 24, call 4: diag-oft tc kernels fixed (staging thread count, 3-stage ring); Cayley profile
{
echo "== diag_oft / boft quick, default and OFT_TC=0, seed 81"
for v in "" 0; do
  r=$(LYCO_CUDA_OFT_TC=$v timeout 60 $L check --backend cuda --algo diag_oft,boft --require-fused --seed 81 2>&1)
  echo "OFT_TC='$v': $(echo "$r" | tail -1)"; echo "$r" | grep " FAIL " | head -5
done
for sd in 82 83; do echo "== full tier diag_oft seed $sd"; r=$(timeout 120 $L check --backend cuda --algo diag_oft --tier full --require-fused --seed $sd 2>&1); echo "$r" | tail -1; echo "$r" | grep " FAIL " | head -5; done
echo "== determinism diag_oft (hash twice)"; for i in 1 2; do timeout 60 $L check --backend cuda --algo diag_oft --seed 84 --hash 2>&1 | grep -o 'h=[0-9a-f]*' | md5sum; done
for d in merge_fwd bypass_fwd; do
  echo "== racecheck diag_oft $d bf16"; timeout 90 compute-sanitizer --tool racecheck --print-limit 6 $L check --backend cuda --algo diag_oft --dir $d --dtypes bf16 --seed 85 > $OUT/rc.txt 2>&1
  grep -E "RACECHECK SUMMARY" $OUT/rc.txt; grep -E "Race reported" $OUT/rc.txt | head -3; tail -1 $OUT/rc.txt
  echo "== memcheck diag_oft $d"; timeout 90 compute-sanitizer --tool memcheck $L check --backend cuda --algo diag_oft --dir $d --seed 85 > $OUT/rc.txt 2>&1; grep -E "ERROR SUMMARY" $OUT/rc.txt; tail -1 $OUT/rc.txt
done
echo "== bench diag-oft: default, then OFT_TC=0"
timeout 60 $L bench --backend cuda --algo diag-oft --dtypes bf16 2>&1 | grep -E "^diag" | cut -c1-175
LYCO_CUDA_OFT_TC=0 timeout 60 $L bench --backend cuda --algo diag-oft --dtypes bf16 --dir merge_fwd,bypass_fwd 2>&1 | grep -E "^diag" | cut -c1-175
echo "== ncu diag-oft kernels (merge_fwd, bypass_fwd)"
for d in merge_fwd bypass_fwd; do
timeout 60 ncu --clock-control none --csv --page raw --metrics gpu__time_duration.sum,launch__grid_size,dram__throughput.avg.pct_of_peak_sustained_elapsed \
    -c 12 $L bench --backend cuda --algo diag-oft --dir $d --dtypes bf16 --reps 2 > $OUT/ncu.csv 2> /dev/null
echo "-- $d"; python3 tools/ncu_rows.py $OUT/ncu.csv 2>&1 | tail -5
done
echo "== ncu k_cay_fwd: warp states and stall sampling by SASS offset"
timeout 120 ncu --clock-control none --section WarpStateStats --section SourceCounters --section LaunchStats --section Occupancy --print-details all -k regex:k_cay_fwd --launch-skip 3 -c 1 \
    $L bench --backend cuda --algo diag-oft --dir merge_fwd --dtypes bf16 --reps 3 > $OUT/cay.txt 2>&1
grep -v "^==PROF\|^lyco\|^diag\|^ceil\|^timing\|^family\|^geomean\|^ *diag-oft\|rows," $OUT/cay.txt | head -120
} 2>&1 | tee $OUT/summary.txt
rm -f $OUT/ncu.csv $OUT/rc.txt
