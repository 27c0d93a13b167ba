# session 31, call 4: loha_grad_onepass with the G_Rt parts shared between its phases through shared memory (LYCO_CUDA_LOHA_MB1_SH=1, one block per SM) against the default
{
echo "commit $(cat build-carry/prebuilt.commit 2>/dev/null)"; nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
for v in "LYCO_CUDA_LOHA_MB1_SH=1" "LYCO_CUDA_LOHA_MB1_SH=1 LYCO_CUDA_LOHA_MB1_NC=1" "LYCO_CUDA_LOHA_MB1_SH=1 LYCO_CUDA_LOHA_MB1_NS=3"; do
  r=$(env $v timeout 60 $L check --backend cuda --algo loha --dir merge_bwd --require-fused --seed 341 2>&1); echo "loha merge_bwd $v: $(echo "$r" | tail -1)"; echo "$r" | grep " FAIL " | head -6
done
h() { timeout 60 $L check --backend cuda --algo loha --dir merge_bwd --seed 342 --hash 2>&1 | awk '/h=/{print $1,$2,$3,$NF}'; }
h > $OUT/a.txt; LYCO_CUDA_LOHA_MB1_SH=1 h > $OUT/b.txt; echo "== hashes SH=1 vs default (rows that differ):"; diff $OUT/a.txt $OUT/b.txt | grep -c "^<"
LYCO_CUDA_LOHA_MB1_SH=1 h > $OUT/a.txt; cmp -s $OUT/a.txt $OUT/b.txt && echo "SH=1 REPEATABLE" || echo "SH=1 NOT REPEATABLE"
timeout 60 compute-sanitizer --tool racecheck --print-limit 10 env LYCO_CUDA_LOHA_MB1_SH=1 $L check --backend cuda --algo loha --dir merge_bwd --dtypes bf16,fp16 --seed 343 > $OUT/rc.txt 2>&1; grep -E "RACECHECK SUMMARY" $OUT/rc.txt; grep -E "passed" $OUT/rc.txt | tail -1
echo "== bench bf16 loha merge_bwd r16: default / SH=1, three rounds"
for rd in 1 2 3; do for v in "X=1" "LYCO_CUDA_LOHA_MB1_SH=1"; do
  env $v timeout 40 $L bench --backend cuda --algo loha --dir merge_bwd --quick > $OUT/b.txt 2>&1
  echo "-- $v round $rd"; grep -E "^loha " $OUT/b.txt | cut -c1-150
done; done
for v in "X=1" "LYCO_CUDA_LOHA_MB1_SH=1"; do echo "-- ncu $v"; env $v timeout 60 ncu --clock-control none --csv --page raw --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size $L bench --backend cuda --algo loha --dir merge_bwd --quick --reps 3 > $OUT/ncu.csv 2> $OUT/ncu.err; python3 tools/ncu_summary.py $OUT/ncu.csv 2>&1 | head -3; done
echo "== peers loha_merge (r32): default and SH=1"
for v in "X=1" "LYCO_CUDA_LOHA_MB1_SH=1"; do
  env $v LYCO_PEERS_TIMEOUT=120 LYCO_PEERS_ARGS="--only loha_merge --no-first-call" LYCO_BUILD_DIR=build-gpu OUT=$OUT/peers_$(echo $v | cut -c1-3 | tr -d '=') bash tools/gpu-peers.sh > $OUT/peers.log 2>&1
  echo "-- $v"; grep -E "^\| loha_merge 4096" $OUT/peers_$(echo $v | cut -c1-3 | tr -d '=')/peers/table.md | head -2 | cut -c1-330
done
} 2>&1 | tee $OUT/summary.txt
rm -f $OUT/a.txt $OUT/b.txt $OUT/rc.txt $OUT/ncu.err
