# session 24, call 5: Cayley elimination by every warp; diag-oft / boft figures
{
echo "== diag_oft / boft quick: default, GJ_WARP=1 (hash equal?), OFT_TC=0"
for v in "" 1; do
  LYCO_CUDA_CAY_GJ_WARP=$v timeout 60 $L check --backend cuda --algo diag_oft,boft --require-fused --seed 91 --hash > $OUT/h$v.txt 2>&1
  echo "GJ_WARP='$v': $(tail -1 $OUT/h$v.txt)  hash $(grep -o 'h=[0-9a-f]*' $OUT/h$v.txt | md5sum)"; grep " FAIL " $OUT/h$v.txt | head -5
done
r=$(LYCO_CUDA_OFT_TC=0 timeout 60 $L check --backend cuda --algo diag_oft,boft --require-fused --seed 92 2>&1); echo "OFT_TC=0: $(echo "$r" | tail -1)"
for sd in 93; do echo "== full tier diag_oft,boft seed $sd"; r=$(timeout 200 $L check --backend cuda --algo diag_oft,boft --tier full --require-fused --seed $sd 2>&1); echo "$r" | tail -1; echo "$r" | grep " FAIL " | head -5; done
echo "== racecheck / memcheck diag_oft,boft merge_fwd bf16"
timeout 120 compute-sanitizer --tool racecheck --print-limit 6 $L check --backend cuda --algo diag_oft,boft --dir merge_fwd --dtypes bf16 --seed 94 > $OUT/rc.txt 2>&1; grep -E "RACECHECK SUMMARY" $OUT/rc.txt; grep -E "Race reported" $OUT/rc.txt | head -3; tail -1 $OUT/rc.txt
timeout 120 compute-sanitizer --tool memcheck $L check --backend cuda --algo diag_oft,boft --dir merge_fwd,bypass_bwd --seed 94 > $OUT/rc.txt 2>&1; grep -E "ERROR SUMMARY" $OUT/rc.txt; tail -1 $OUT/rc.txt
echo "== whole quick tier seed 95"; timeout 150 $L check --backend cuda --require-fused --seed 95 2>&1 | tail -1
echo "== bench diag-oft, boft (default), then GJ_WARP=1"
timeout 90 $L bench --backend cuda --algo diag-oft,boft --dtypes bf16 > $OUT/bench.txt 2>&1; grep -E "^(diag|boft)" $OUT/bench.txt | cut -c1-175
LYCO_CUDA_CAY_GJ_WARP=1 timeout 60 $L bench --backend cuda --algo diag-oft --dtypes bf16 --dir merge_fwd,bypass_fwd 2>&1 | grep -E "^diag" | cut -c1-175
echo "== ncu diag-oft kernels"
for d in merge_fwd merge_bwd bypass_fwd bypass_bwd; do
timeout 60 ncu --clock-control none --csv --page raw --metrics gpu__time_duration.sum,launch__grid_size,dram__throughput.avg.pct_of_peak_sustained_elapsed \
    -k regex:'k_cay|k_doft|k_sum|k_copy' -c 12 $L bench --backend cuda --algo diag-oft --dir $d --dtypes bf16 --reps 2 > $OUT/ncu.csv 2> /dev/null
echo "-- $d"; python3 tools/ncu_rows.py $OUT/ncu.csv 2>&1 | tail -7
done
} 2>&1 | tee $OUT/summary.txt
rm -f $OUT/ncu.csv $OUT/rc.txt $OUT/h.txt $OUT/h1.txt
