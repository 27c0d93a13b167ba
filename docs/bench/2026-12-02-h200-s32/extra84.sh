# session 32, call 2: the 128-row reduction blocks (rank tiles 64/128) — bitwise check against LYCO_CUDA_REDUCE_BIG=0, quick tier, sanitizers, bench A/B, ncu
{
echo "commit $(cat build-carry/prebuilt.commit 2>/dev/null)"; nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
t0=$(date +%s)
A="--algo locon,dylora,glora,lokr,loha,dora --seed 371"
timeout 100 $L check --backend cuda $A --hash > $OUT/h1.txt 2>&1; LYCO_CUDA_REDUCE_BIG=0 timeout 100 $L check --backend cuda $A --hash > $OUT/h0.txt 2>&1
echo "quick tier hashes (default vs REDUCE_BIG=0): $(tail -1 $OUT/h1.txt) | $(tail -1 $OUT/h0.txt); rows with h=: $(grep -c 'h=' $OUT/h1.txt); differing: $(diff <(grep 'h=' $OUT/h1.txt | awk '{print $1,$2,$3,$NF}') <(grep 'h=' $OUT/h0.txt | awk '{print $1,$2,$3,$NF}') | grep -c '^<') ($(( $(date +%s)-t0 )) s)"
r=$(timeout 120 $L check --backend cuda --require-fused --seed 372 2>&1); echo "quick tier, every algo: $(echo "$r" | tail -1)"; echo "$r" | grep " FAIL " | head -8
r=$(timeout 60 $L check --backend cuda --algo locon --require-fused --seed 373 2>&1); echo "locon quick: $(echo "$r" | tail -1)"; echo "$r" | grep -E "r104_t300|r56_t129" | head -4 | cut -c1-160
timeout 120 compute-sanitizer --tool memcheck --print-limit 10 $L check --backend cuda --algo locon --dtypes bf16,fp16 --seed 374 > $OUT/mc.txt 2>&1; echo "memcheck locon bf16,fp16: $(grep -E 'ERROR SUMMARY' $OUT/mc.txt) $(grep -E 'passed' $OUT/mc.txt | tail -1) ($(( $(date +%s)-t0 )) s)"
timeout 150 compute-sanitizer --tool racecheck --print-limit 10 $L check --backend cuda --algo locon --dir bypass_fwd,bypass_bwd --dtypes bf16 --seed 375 > $OUT/rc.txt 2>&1; echo "racecheck locon bypass bf16: $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' $OUT/rc.txt) $(grep -E 'passed' $OUT/rc.txt | tail -1) ($(( $(date +%s)-t0 )) s)"
for v in X=1 LYCO_CUDA_REDUCE_BIG=0 X=2; do echo "-- bench $v"; env $v timeout 100 $L bench --backend cuda --algo lora --dir merge_bwd,bypass_fwd,bypass_bwd --dtypes bf16 2>&1 | grep -E "^lora " | cut -c1-150; done
echo "-- ncu ($(( $(date +%s)-t0 )) s)"
timeout 150 ncu --clock-control none -k regex:"k_reduce_lean|k_colreduce_lean" --csv --page raw --metrics gpu__time_duration.sum,launch__grid_size,dram__throughput.avg.pct_of_peak_sustained_elapsed $L bench --backend cuda --algo lora --dir merge_bwd,bypass_fwd,bypass_bwd --dtypes bf16 --reps 2 > $OUT/ncu.csv 2> /dev/null
python3 tools/ncu_rows.py $OUT/ncu.csv 2>&1 | awk '$2+0 > 100 || NR==1'
echo "($(( $(date +%s)-t0 )) s)"
} 2>&1 | tee $OUT/summary.txt
xz -9 $OUT/ncu.csv; rm -f $OUT/mc.txt; head -c 200000 $OUT/rc.txt > $OUT/rc-head.txt; rm -f $OUT/rc.txt
