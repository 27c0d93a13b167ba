# session 32, call 4: the expand's 128-row tiles at rank tile 128 — bitwise check against LYCO_CUDA_EXPAND_BIG=0, quick tier, memcheck, ncu A/B, bench
{
echo "commit $(cat build-carry/prebuilt.commit 2>/dev/null)"; nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
t0=$(date +%s)
A="--algo locon,dylora,glora,lokr,loha --seed 381"
timeout 100 $L check --backend cuda $A --hash > $OUT/h1.txt 2>&1; LYCO_CUDA_EXPAND_BIG=0 timeout 100 $L check --backend cuda $A --hash > $OUT/h0.txt 2>&1
echo "quick tier hashes (default vs EXPAND_BIG=0): $(tail -1 $OUT/h1.txt) | $(tail -1 $OUT/h0.txt); rows with h=: $(grep -c 'h=' $OUT/h1.txt); differing: $(diff <(grep 'h=' $OUT/h1.txt | awk '{print $1,$2,$3,$NF}') <(grep 'h=' $OUT/h0.txt | awk '{print $1,$2,$3,$NF}') | grep -c '^<') ($(( $(date +%s)-t0 )) s)"
r=$(timeout 120 $L check --backend cuda --require-fused --seed 382 2>&1); echo "quick tier, every algo: $(echo "$r" | tail -1)"; echo "$r" | grep " FAIL " | head -8
timeout 90 compute-sanitizer --tool memcheck --print-limit 10 $L check --backend cuda --algo locon --dir merge_fwd,bypass_fwd,bypass_bwd --dtypes bf16,fp16 --seed 383 > $OUT/mc.txt 2>&1; echo "memcheck locon fwd/bypass bf16,fp16: $(grep -E 'ERROR SUMMARY' $OUT/mc.txt) $(grep -E 'passed' $OUT/mc.txt | tail -1) ($(( $(date +%s)-t0 )) s)"
for v in X=1 LYCO_CUDA_EXPAND_BIG=0; do
  echo "-- ncu k_expand_lean, $v ($(( $(date +%s)-t0 )) s)"
  env $v timeout 100 ncu --clock-control none -k regex:k_expand_lean --csv --page raw --metrics gpu__time_duration.sum,launch__grid_size,dram__throughput.avg.pct_of_peak_sustained_elapsed $L bench --backend cuda --algo lora --dir merge_fwd,bypass_fwd,bypass_bwd --dtypes bf16 --reps 2 > $OUT/ncu.csv 2> /dev/null
  python3 tools/ncu_rows.py $OUT/ncu.csv 2>&1 | awk '$2+0 > 100 || NR==1'; xz -9c $OUT/ncu.csv > $OUT/ncu-$v.csv.xz
done
echo "-- bench ($(( $(date +%s)-t0 )) s)"
timeout 80 $L bench --backend cuda --algo lora --dir merge_fwd,bypass_fwd,bypass_bwd --dtypes bf16 2>&1 | grep -E "^lora " | cut -c1-150
echo "($(( $(date +%s)-t0 )) s)"
} 2>&1 | tee $OUT/summary.txt
rm -f $OUT/mc.txt $OUT/ncu.csv
