# session 31, call 3: k_tc_sum with eight loads in flight; loha_grad_onepass at two blocks per SM for rank tile 32 (LYCO_CUDA_LOHA_MB1_OCC=2, A/B);
# then the quick bf16 bench of every family (the t/floor table at this commit)
{
echo "commit $(cat build-carry/prebuilt.commit 2>/dev/null)"; nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
for v in "X=1" "LYCO_CUDA_LOHA_MB1_OCC=2" "LYCO_CUDA_LOHA_MB1_OCC=1"; do
  r=$(env $v timeout 60 $L check --backend cuda --algo loha --require-fused --seed 331 2>&1); echo "loha quick tier $v: $(echo "$r" | tail -1)"; echo "$r" | grep " FAIL " | head -6
done
h() { timeout 60 $L check --backend cuda --algo loha --dir merge_bwd --seed 332 --hash 2>&1 | awk '/h=/{print $1,$2,$3,$NF}'; }
h > $OUT/a.txt; h > $OUT/b.txt; cmp -s $OUT/a.txt $OUT/b.txt && echo "REPEATABLE ($(wc -l < $OUT/a.txt) rows)" || echo "NOT REPEATABLE"
timeout 60 compute-sanitizer --tool racecheck --print-limit 10 env LYCO_CUDA_LOHA_MB1_OCC=2 $L check --backend cuda --algo loha --dir merge_bwd --dtypes bf16 --seed 333 > $OUT/rc.txt 2>&1; grep -E "RACECHECK SUMMARY" $OUT/rc.txt; grep -E "passed" $OUT/rc.txt | tail -1
echo "== bench bf16 loha merge_bwd r16: default / OCC=1, two rounds"
for rd in 1 2; do for v in "X=1" "LYCO_CUDA_LOHA_MB1_OCC=1"; do
  env $v timeout 40 $L bench --backend cuda --algo loha --dir merge_bwd --quick > $OUT/b.txt 2>&1
  echo "-- $v round $rd"; grep -E "^loha " $OUT/b.txt | cut -c1-150
done; done
timeout 60 ncu --clock-control none --csv --page raw --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size $L bench --backend cuda --algo loha --dir merge_bwd --quick --reps 3 > $OUT/ncu.csv 2> $OUT/ncu.err; python3 tools/ncu_summary.py $OUT/ncu.csv 2>&1 | head -4
echo "== peers loha_merge (r32): default (OCC=1 at rank tile 32) and OCC=2"
for v in "X=1" "LYCO_CUDA_LOHA_MB1_OCC=2"; do
  env $v LYCO_PEERS_TIMEOUT=120 LYCO_PEERS_ARGS="--only loha_merge --no-first-call" LYCO_BUILD_DIR=build-gpu OUT=$OUT/p$v bash tools/gpu-peers.sh > $OUT/peers.log 2>&1
  echo "-- $v"; grep -E "^\| loha_merge 4096" $OUT/p$v/peers/table.md | head -2 | cut -c1-200
done
echo "== quick bench, every family, bf16"
timeout 200 $L bench --backend cuda --quick --dtypes bf16 --csv $OUT/bench.csv > $OUT/bench.txt 2>&1; tail -60 $OUT/bench.txt
} 2>&1 | tee $OUT/summary.txt
rm -f $OUT/a.txt $OUT/b.txt $OUT/rc.txt $OUT/ncu.err
