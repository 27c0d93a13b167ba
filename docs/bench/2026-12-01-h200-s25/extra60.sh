# session 25, call 10: k_lokr_halves_fwd with pipelined loads — check, hash (= call 9's), bench old vs new, kernel table
{
r=$(timeout 60 $L check --backend cuda --algo lokr --require-fused --seed 101 2>&1); echo "lokr quick: $(echo "$r" | tail -1)"; echo "$r" | grep " FAIL " | head -5
echo "hash merge_fwd seed 93 (call 9: f1864b07…): $(timeout 60 $L check --backend cuda --algo lokr --dir merge_fwd --seed 93 --hash 2>&1 | grep -o 'h=[0-9a-f]*' | md5sum)"
echo "== bench lokr merge_fwd bf16,fp16: old (both switches 0) vs default, three rounds"
for rd in 1 2 3; do
for e in "LYCO_CUDA_LOKR_MF_VEC=0 LYCO_CUDA_LOKR_HALVES_FUSED=0" "LYCO_CUDA_NOTHING=0"; do
  env $e timeout 60 $L bench --backend cuda --algo lokr --dir merge_fwd --dtypes bf16,fp16 > $OUT/b.txt 2>&1
  echo "-- $e"; grep -E "^lokr" $OUT/b.txt | cut -c1-175
done; done
echo "== ncu kernel table (default)"
timeout 90 ncu --clock-control none --csv --page raw --metrics gpu__time_duration.sum,launch__grid_size,dram__throughput.avg.pct_of_peak_sustained_elapsed \
    -c 60 $L bench --backend cuda --algo lokr --dir merge_fwd --dtypes bf16 --reps 2 > $OUT/ncu.csv 2> /dev/null
python3 tools/ncu_rows.py $OUT/ncu.csv 2>&1 | tail -8
} 2>&1 | tee $OUT/summary.txt
rm -f $OUT/ncu.csv $OUT/b.txt
