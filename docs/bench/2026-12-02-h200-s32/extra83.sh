# session 32, call 1: verify a637b34's GPU code (quick tier, loha MB1 variants, locon conv test), then where LoRA r128 bypass / merge time goes
{
echo "commit $(cat build-carry/prebuilt.commit 2>/dev/null)"; nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
t0=$(date +%s)
r=$(timeout 240 $L check --backend cuda --require-fused --seed 361 2>&1); echo "quick tier, every algo: $(echo "$r" | tail -1) ($(( $(date +%s)-t0 )) s)"; echo "$r" | grep " FAIL " | head -8
r=$(LYCO_CUDA_LOHA_MB1_SH=0 timeout 40 $L check --backend cuda --algo loha --dir merge_bwd --require-fused --seed 362 2>&1); echo "loha merge_bwd SH=0: $(echo "$r" | tail -1)"
r=$(timeout 120 $B/tests/test_cuda_locon_conv 2>&1); echo "test_cuda_locon_conv: $(echo "$r" | tail -1) ($(( $(date +%s)-t0 )) s)"
timeout 60 $L bench --backend cuda --algo lora --dtypes bf16 2>&1 | grep -E "^lora " | cut -c1-160
echo "-- ncu, lora bf16 rows (ranks 8/32/128), merge_bwd bypass_fwd bypass_bwd ($(( $(date +%s)-t0 )) s)"
timeout 200 ncu --clock-control none -k regex:^k_ --csv --page raw --metrics gpu__time_duration.sum,launch__grid_size,dram__throughput.avg.pct_of_peak_sustained_elapsed $L bench --backend cuda --algo lora --dir merge_bwd,bypass_fwd,bypass_bwd --dtypes bf16 --reps 2 > $OUT/ncu.csv 2> /dev/null
python3 tools/ncu_rows.py $OUT/ncu.csv 2>&1 | head -80
echo "($(( $(date +%s)-t0 )) s)"
} 2>&1 | tee $OUT/summary.txt
xz -9 $OUT/ncu.csv
