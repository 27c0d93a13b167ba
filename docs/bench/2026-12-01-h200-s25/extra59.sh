# session 25, call 9: LoKr merge forward on the flat kernel (k_lokr_merge_fwd_vec) and its halves in one launch — correctness, A/B, kernel table
{
echo "== check lokr quick --require-fused: default, LYCO_CUDA_LOKR_MF_VEC=0 LYCO_CUDA_LOKR_HALVES_FUSED=0"
for v in "" 0; do
  r=$(LYCO_CUDA_LOKR_MF_VEC=$v LYCO_CUDA_LOKR_HALVES_FUSED=$v timeout 60 $L check --backend cuda --algo lokr --require-fused --seed 91 2>&1)
  echo "switches='$v': $(echo "$r" | tail -1)"; echo "$r" | grep " FAIL " | head -8
done
echo "== full tier lokr merge_fwd"; r=$(timeout 60 $L check --backend cuda --algo lokr --dir merge_fwd --tier full --require-fused --seed 92 2>&1); echo "$(echo "$r" | tail -1)"; echo "$r" | grep " FAIL " | head -5
echo "== hashes: default twice, MF_VEC=0 once (merge_fwd)"
for v in "" "" 0; do LYCO_CUDA_LOKR_MF_VEC=$v LYCO_CUDA_LOKR_HALVES_FUSED=$v timeout 60 $L check --backend cuda --algo lokr --dir merge_fwd --seed 93 --hash 2>&1 | grep -o 'h=[0-9a-f]*' | md5sum; done
echo "== memcheck lokr merge_fwd bf16,fp16"
timeout 90 compute-sanitizer --tool memcheck --print-limit 10 $L check --backend cuda --algo lokr --dir merge_fwd --dtypes bf16,fp16 --seed 94 > $OUT/mc.txt 2>&1; grep -E "ERROR SUMMARY" $OUT/mc.txt; grep -E "passed" $OUT/mc.txt | tail -1
echo "== bench lokr merge_fwd bf16: old (both off), flat kernel only, both (default); two rounds"
for rd in 1 2; do
for e in "LYCO_CUDA_LOKR_MF_VEC=0 LYCO_CUDA_LOKR_HALVES_FUSED=0" "LYCO_CUDA_LOKR_HALVES_FUSED=0" "LYCO_CUDA_NOTHING=0"; do
  env $e timeout 60 $L bench --backend cuda --algo lokr --dir merge_fwd --dtypes bf16,fp16 > $OUT/b.txt 2>&1
  echo "-- $e"; grep -E "^lokr" $OUT/b.txt | cut -c1-175
done; done
echo "== ncu kernel table, lokr merge_fwd bf16 (default)"
timeout 90 ncu --clock-control none --csv --page raw --metrics gpu__time_duration.sum,launch__grid_size,dram__throughput.avg.pct_of_peak_sustained_elapsed \
    -c 60 $L bench --backend cuda --algo lokr --dir merge_fwd --dtypes bf16 --reps 2 > $OUT/ncu.csv 2> /dev/null
python3 tools/ncu_rows.py $OUT/ncu.csv 2>&1 | tail -16
echo "== ncu kernel table, old path (both switches 0)"
LYCO_CUDA_LOKR_MF_VEC=0 LYCO_CUDA_LOKR_HALVES_FUSED=0 timeout 90 ncu --clock-control none --csv --page raw --metrics gpu__time_duration.sum,launch__grid_size,dram__throughput.avg.pct_of_peak_sustained_elapsed \
    -c 60 $L bench --backend cuda --algo lokr --dir merge_fwd --dtypes bf16 --reps 2 > $OUT/ncu.csv 2> /dev/null
python3 tools/ncu_rows.py $OUT/ncu.csv 2>&1 | tail -16
} 2>&1 | tee $OUT/summary.txt
rm -f $OUT/ncu.csv $OUT/b.txt
