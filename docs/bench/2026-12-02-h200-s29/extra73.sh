# session 29, call 5: LoKr's fused merge with the halves' loads in flight
{
echo "commit $(cat build-carry/prebuilt.commit 2>/dev/null)"; nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
r=$(timeout 60 $L check --backend cuda --algo lokr --require-fused --seed 231 2>&1); echo "lokr quick tier, --require-fused: $(echo "$r" | tail -1)"; echo "$r" | grep " FAIL " | head -8
r=$(timeout 60 $L check --backend cuda --algo lokr --dir merge_fwd --tier full --require-fused --seed 232 2>&1); echo "full tier lokr merge_fwd: $(echo "$r" | tail -1)"; echo "$r" | grep " FAIL " | head -8
h() { timeout 60 $L check --backend cuda --algo lokr --dir merge_fwd --seed 233 --hash 2>&1 | awk '/h=/{print $1,$2,$3,$NF}'; }
h > $OUT/a.txt; LYCO_CUDA_LOKR_MF_FUSED=0 h > $OUT/b.txt; echo "== hashes lokr merge_fwd default vs MF_FUSED=0:"; cmp -s $OUT/a.txt $OUT/b.txt && echo "EQUAL ($(wc -l < $OUT/a.txt) rows)" || { echo DIFFER; diff $OUT/a.txt $OUT/b.txt | head -6; }
h > $OUT/b.txt; cmp -s $OUT/a.txt $OUT/b.txt && echo "REPEATABLE" || echo "NOT REPEATABLE"
timeout 60 compute-sanitizer --tool memcheck --print-limit 10 $L check --backend cuda --algo lokr --dir merge_fwd --dtypes bf16,fp16 --seed 234 > $OUT/mc.txt 2>&1; grep -E "ERROR SUMMARY" $OUT/mc.txt; grep -E "passed" $OUT/mc.txt | tail -1
echo "== bench bf16 lokr merge_fwd: default / MF_FUSED=0, three rounds"
for rd in 1 2 3; do for v in "X=1" "LYCO_CUDA_LOKR_MF_FUSED=0"; do
  env $v timeout 30 $L bench --backend cuda --algo lokr --dir merge_fwd --dtypes bf16 > $OUT/b.txt 2>&1
  echo "-- $v round $rd"; grep -E "^lokr " $OUT/b.txt | cut -c1-150
done; done
timeout 60 ncu --clock-control none --csv --page raw --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size -k regex:k_lokr_merge_fwd_fused $L bench --backend cuda --algo lokr --dir merge_fwd --dtypes bf16 --reps 3 > $OUT/ncu.csv 2>/dev/null; python3 tools/ncu_summary.py $OUT/ncu.csv 2>&1 | head -8
} 2>&1 | tee $OUT/summary.txt
echo "== peers: lokr merge" | tee -a $OUT/summary.txt
LYCO_PEERS_TIMEOUT=150 LYCO_PEERS_ARGS="--only lokr_merge --no-first-call" LYCO_BUILD_DIR=build-gpu OUT=$OUT bash tools/gpu-peers.sh > $OUT/peers-run.log 2>&1; echo "peers rc=$?" | tee -a $OUT/summary.txt
grep -E "^\| lokr" $OUT/peers/table.md 2>/dev/null | tee -a $OUT/summary.txt
rm -f $OUT/a.txt $OUT/b.txt $OUT/mc.txt $OUT/peers/*.png
