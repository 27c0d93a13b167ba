# session 32, call 5: the landed expand choice (128-row tiles for the persistent no-base epilogues only) — quick tier, hashes against EXPAND_BIG=0, memcheck
{
echo "commit $(cat build-carry/prebuilt.commit 2>/dev/null)"; nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
t0=$(date +%s)
r=$(timeout 90 $L check --backend cuda --require-fused --seed 391 2>&1); echo "quick tier, every algo: $(echo "$r" | tail -1) ($(( $(date +%s)-t0 )) s)"; echo "$r" | grep " FAIL " | head -8
A="--algo locon,dylora,glora,lokr --seed 392"
timeout 60 $L check --backend cuda $A --hash > $OUT/h1.txt 2>&1; LYCO_CUDA_EXPAND_BIG=0 LYCO_CUDA_REDUCE_BIG=0 timeout 60 $L check --backend cuda $A --hash > $OUT/h0.txt 2>&1
echo "hashes (default vs EXPAND_BIG=0 REDUCE_BIG=0): $(tail -1 $OUT/h1.txt) | $(tail -1 $OUT/h0.txt); rows: $(grep -c 'h=' $OUT/h1.txt); differing: $(diff <(grep 'h=' $OUT/h1.txt | awk '{print $1,$2,$3,$NF}') <(grep 'h=' $OUT/h0.txt | awk '{print $1,$2,$3,$NF}') | grep -c '^<') ($(( $(date +%s)-t0 )) s)"
timeout 60 compute-sanitizer --tool memcheck --print-limit 10 $L check --backend cuda --algo locon --dir merge_fwd,bypass_fwd,bypass_bwd --dtypes bf16 --seed 393 > $OUT/mc.txt 2>&1; echo "memcheck locon bf16: $(grep -E 'ERROR SUMMARY' $OUT/mc.txt) $(grep -E 'passed' $OUT/mc.txt | tail -1) ($(( $(date +%s)-t0 )) s)"
} 2>&1 | tee $OUT/summary.txt
rm -f $OUT/mc.txt $OUT/h0.txt $OUT/h1.txt
