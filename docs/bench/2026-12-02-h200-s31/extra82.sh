# session 31, call 5: the landed default (shared parts) — loha quick tier, SH=0 variant, memcheck, one bench row
{
echo "commit $(cat build-carry/prebuilt.commit 2>/dev/null)"; nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
r=$(timeout 60 $L check --backend cuda --algo loha --require-fused --seed 351 2>&1); echo "loha quick tier (default = SH=1): $(echo "$r" | tail -1)"; echo "$r" | grep " FAIL " | head -6
r=$(LYCO_CUDA_LOHA_MB1_SH=0 timeout 40 $L check --backend cuda --algo loha --dir merge_bwd --require-fused --seed 351 2>&1); echo "loha merge_bwd SH=0: $(echo "$r" | tail -1)"
timeout 50 compute-sanitizer --tool memcheck --print-limit 10 $L check --backend cuda --algo loha --dir merge_bwd --dtypes bf16,fp16 --seed 352 > $OUT/mc.txt 2>&1; grep -E "ERROR SUMMARY" $OUT/mc.txt; grep -E "passed" $OUT/mc.txt | tail -1
timeout 30 $L bench --backend cuda --algo loha --dir merge_bwd --quick 2>&1 | grep -E "^loha " | cut -c1-150
} 2>&1 | tee $OUT/summary.txt
rm -f $OUT/mc.txt
