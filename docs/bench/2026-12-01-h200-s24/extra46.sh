# session 24, call 3: the diag_oft full-tier failure and racecheck hazards of call 2; diag-oft bench
{
for v in "" 0; do
  echo "== full tier diag_oft merge_fwd OFT_TC='$v' seed 77"
  LYCO_CUDA_OFT_TC=$v timeout 60 $L check --backend cuda --algo diag_oft --dir merge_fwd --tier full --require-fused --seed 77 > $OUT/full$v.txt 2>&1; tail -1 $OUT/full$v.txt; grep " FAIL " $OUT/full$v.txt | head -5
  grep "diag_oft_linear_4096_bs16\|diag_oft_linear_bs32_rescale_mult\|diag_oft_linear_640" $OUT/full$v.txt | head -24
done
echo "== full tier diag_oft all dirs default seed 79"; timeout 120 $L check --backend cuda --algo diag_oft --tier full --require-fused --seed 79 2>&1 | grep -E " FAIL |passed" | head -8
for v in "" 0; do
  echo "== racecheck diag_oft merge_fwd bf16 OFT_TC='$v'"
  LYCO_CUDA_OFT_TC=$v timeout 90 compute-sanitizer --tool racecheck --print-limit 12 $L check --backend cuda --algo diag_oft --dir merge_fwd --dtypes bf16 --seed 78 > $OUT/rc.txt 2>&1
  grep -E "RACECHECK SUMMARY|ERROR SUMMARY" $OUT/rc.txt; grep -E "Race reported|Write Thread|Read Thread|at .*0x|in .*k_" $OUT/rc.txt | head -16
done
echo "== bench diag-oft: default, then OFT_TC=0"
timeout 60 $L bench --backend cuda --algo diag-oft --dtypes bf16 2>&1 | grep -E "^diag" | cut -c1-175
LYCO_CUDA_OFT_TC=0 timeout 60 $L bench --backend cuda --algo diag-oft --dtypes bf16 --dir merge_fwd,bypass_fwd 2>&1 | grep -E "^diag" | cut -c1-175
echo "== ncu diag-oft kernels per direction (default)"
for d in merge_fwd merge_bwd bypass_fwd bypass_bwd; do
timeout 60 ncu --clock-control none --csv --page raw --metrics gpu__time_duration.sum,launch__grid_size,dram__throughput.avg.pct_of_peak_sustained_elapsed \
    -c 25 $L bench --backend cuda --algo diag-oft --dir $d --dtypes bf16 --reps 2 > $OUT/ncu.csv 2> /dev/null
echo "-- $d"; python3 tools/ncu_rows.py $OUT/ncu.csv 2>&1 | tail -9
done
} 2>&1 | tee $OUT/summary.txt
rm -f $OUT/ncu.csv $OUT/rc.txt
