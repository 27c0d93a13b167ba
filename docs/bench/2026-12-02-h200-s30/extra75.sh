# session 30, call 2: the one-pass / resident kernels with a deep ring (≤ 8 stages, one block per SM)
{
echo "commit $(cat build-carry/prebuilt.commit 2>/dev/null)"; nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
r=$(timeout 150 $L check --backend cuda --algo locon,dylora,glora,lokr --require-fused --seed 311 2>&1); echo "locon,dylora,glora,lokr quick tier, --require-fused: $(echo "$r" | tail -1)"; echo "$r" | grep " FAIL " | head -8
r=$(LYCO_CUDA_RR=2 timeout 100 $L check --backend cuda --algo locon,glora --require-fused --seed 312 2>&1); echo "locon,glora quick tier, RR=2 (resident reduction forced on small grids): $(echo "$r" | tail -1)"; echo "$r" | grep " FAIL " | head -8
r=$(timeout 150 build-gpu/tests/test_cuda_locon_conv 2>&1); echo "test_cuda_locon_conv: $(echo "$r" | tail -1)"; echo "$r" | grep -E "FAIL|mb1" | grep -E "FAIL|merge_bwd" | head -24
LYCO_CUDA_RR=2 timeout 90 compute-sanitizer --tool memcheck --print-limit 10 $L check --backend cuda --algo locon --dir merge_bwd,bypass_bwd,bypass_fwd --dtypes bf16 --seed 313 > $OUT/mc.txt 2>&1; grep -E "ERROR SUMMARY" $OUT/mc.txt; grep -E "passed" $OUT/mc.txt | tail -1
echo "== bench bf16 merge_bwd: default / MB1=0 / MB1_S=4, bypass: default / RR=0; two rounds"
for rd in 1 2; do for v in "X=1" "LYCO_CUDA_MB1=0" "LYCO_CUDA_MB1_S=4"; do
  env $v timeout 40 $L bench --backend cuda --algo lora,dylora,lora-conv --dir merge_bwd --quick > $OUT/b.txt 2>&1
  echo "-- $v round $rd"; grep -E "^(lora|dylora|lora-conv) " $OUT/b.txt | cut -c1-150
done; for v in "X=1" "LYCO_CUDA_RR=0"; do
  env $v timeout 60 $L bench --backend cuda --algo lora,glora,dylora --dir bypass_fwd,bypass_bwd --quick > $OUT/b.txt 2>&1
  echo "-- $v round $rd"; grep -E "^(lora|glora|dylora) " $OUT/b.txt | cut -c1-150
done; done
echo "== kernel times (ncu): lora merge_bwd, bypass"
timeout 120 ncu --clock-control none --csv --page raw --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size $L bench --backend cuda --algo lora --dir merge_bwd,bypass_fwd,bypass_bwd --quick --reps 3 > $OUT/ncu.csv 2> $OUT/ncu.err; python3 tools/ncu_summary.py $OUT/ncu.csv 2>&1 | cut -c1-130 | head -30
} 2>&1 | tee $OUT/summary.txt
rm -f $OUT/a.txt $OUT/b.txt $OUT/mc.txt $OUT/rc.txt $OUT/ncu.err
