# session 31, call 2: loha.cu's FFMA gradient sums tiled (fp64 across tiles); loha_grad_onepass with two parts, hoisted factor fragments, two blocks per SM at rank tile 16, one sum launch:
# correctness (loha tier, variants, full tier merge_bwd, sanitizers, hashes), bench A/B rounds at r16 and r32, ncu, then the peers (loha_merge, lora_merge)
{
echo "commit $(cat build-carry/prebuilt.commit 2>/dev/null)"; nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
r=$(timeout 100 $L check --backend cuda --algo loha --require-fused --seed 321 2>&1); echo "loha quick tier, --require-fused: $(echo "$r" | tail -1)"; echo "$r" | grep " FAIL " | head -8
for v in "LYCO_CUDA_LOHA_MB1_NS=3" "LYCO_CUDA_LOHA_MB1_NC=1" "LYCO_CUDA_LOHA_MB1_S=2" "LYCO_CUDA_LOHA_MB1=0"; do
  r=$(env $v timeout 60 $L check --backend cuda --algo loha --dir merge_bwd,bypass_bwd --require-fused --seed 322 2>&1); echo "loha merge_bwd,bypass_bwd $v: $(echo "$r" | tail -1)"; echo "$r" | grep " FAIL " | head -6
done
r=$(timeout 100 $L check --backend cuda --algo loha --dir merge_bwd --tier full --require-fused --seed 323 2>&1); echo "full tier loha merge_bwd: $(echo "$r" | tail -1)"; echo "$r" | grep " FAIL " | head -6
r=$(timeout 100 $L check --backend cuda --algo loha --dir merge_bwd --dtypes fp32,fp16+fp32adapter --tier full --require-fused --seed 313 2>&1); echo "regression (call 1 failed 2 rows): full tier loha merge_bwd fp32,fp16+fp32adapter seed 313: $(echo "$r" | tail -1)"; echo "$r" | grep -E " FAIL |320_tucker" | head -6
h() { timeout 60 $L check --backend cuda --algo loha --dir merge_bwd --seed 324 --hash 2>&1 | awk '/h=/{print $1,$2,$3,$NF}'; }
h > $OUT/a.txt; LYCO_CUDA_LOHA_MB1=0 h > $OUT/b.txt; echo "== hashes loha merge_bwd one-pass vs MB1=0 (rows that differ):"; diff $OUT/a.txt $OUT/b.txt | grep "^<" | head -30; wc -l < $OUT/a.txt
h > $OUT/b.txt; cmp -s $OUT/a.txt $OUT/b.txt && echo "REPEATABLE" || echo "NOT REPEATABLE"
timeout 90 compute-sanitizer --tool memcheck --print-limit 10 $L check --backend cuda --algo loha --dir merge_bwd,bypass_bwd --dtypes bf16,fp16 --seed 325 > $OUT/mc.txt 2>&1; grep -E "ERROR SUMMARY" $OUT/mc.txt; grep -E "passed" $OUT/mc.txt | tail -1
timeout 90 compute-sanitizer --tool racecheck --print-limit 10 $L check --backend cuda --algo loha --dir merge_bwd --dtypes bf16,fp16 --seed 326 > $OUT/rc.txt 2>&1; grep -E "RACECHECK SUMMARY|ERROR SUMMARY" $OUT/rc.txt; grep -E "passed" $OUT/rc.txt | tail -1
echo "== bench bf16 loha merge_bwd (r16 quick row): default / MB1=0 / S=2 / NS=2, three rounds"
for rd in 1 2 3; do for v in "X=1" "LYCO_CUDA_LOHA_MB1=0" "LYCO_CUDA_LOHA_MB1_S=2" "LYCO_CUDA_LOHA_MB1_NS=2"; do
  env $v timeout 40 $L bench --backend cuda --algo loha --dir merge_bwd --quick > $OUT/b.txt 2>&1
  echo "-- $v round $rd"; grep -E "^loha " $OUT/b.txt | cut -c1-150
done; done
echo "== kernel times (ncu): loha merge_bwd r16 default"
timeout 60 ncu --clock-control none --csv --page raw --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size $L bench --backend cuda --algo loha --dir merge_bwd --quick --reps 3 > $OUT/ncu.csv 2> $OUT/ncu.err; python3 tools/ncu_summary.py $OUT/ncu.csv 2>&1 | head -8
timeout 90 ncu --clock-control none -k regex:k_loha_grad_onepass -s 6 -c 1 --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats --section InstructionStats $L bench --backend cuda --algo loha --dir merge_bwd --quick --reps 3 > $OUT/ncu2.txt 2>&1
grep -vE "^==PROF|^ *-+ *$" $OUT/ncu2.txt | grep -A200 "k_loha_grad_onepass" | grep -E "k_loha|Duration|Throughput|Eligible|Issued Warp|Active Warps|Registers|Achieved Occ|Theoretical Occ|Executed Instructions  |Stall|Cycles Per" | head -30
echo "== peers: loha_merge, lora_merge"
LYCO_PEERS_TIMEOUT=200 LYCO_PEERS_ARGS="--only loha_merge,lora_merge --no-first-call" LYCO_BUILD_DIR=build-gpu OUT=$OUT bash tools/gpu-peers.sh > $OUT/peers.log 2>&1; tail -3 $OUT/peers.log
ls $OUT; cat $OUT/peers/table.md 2>/dev/null | grep -E "^\| (row|loha|lora)" | head -20
} 2>&1 | tee $OUT/summary.txt
rm -f $OUT/a.txt $OUT/b.txt $OUT/mc.txt $OUT/rc.txt $OUT/ncu.err
