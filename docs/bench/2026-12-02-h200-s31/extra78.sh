# session 31, call 1: the stop-30 checks owed (locon one-pass merge backward at d347492's code: tier, conv test, racecheck)
# and LoHa's new one-pass merge backward (loha_grad_onepass.cu): correctness, tuning variants, hashes, sanitizers, bench A/B, ncu
{
echo "commit $(cat build-carry/prebuilt.commit 2>/dev/null)"; nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
r=$(timeout 240 $L check --backend cuda --require-fused --seed 311 2>&1); echo "whole quick tier, --require-fused: $(echo "$r" | tail -1)"; echo "$r" | grep " FAIL " | head -12
r=$(timeout 100 build-gpu/tests/test_cuda_locon_conv 2>&1); echo "test_cuda_locon_conv: $(echo "$r" | tail -1)"; echo "$r" | grep -E "FAIL" | head -8
r=$(timeout 100 build-gpu/tests/test_cuda_device 2>&1); echo "test_cuda_device: $(echo "$r" | tail -1)"; echo "$r" | grep -E "FAIL" | head -8
for v in "LYCO_CUDA_LOHA_MB1_NS=3" "LYCO_CUDA_LOHA_MB1_NC=1" "LYCO_CUDA_LOHA_MB1_S=2" "LYCO_CUDA_LOHA_MB1=0"; do
  r=$(env $v timeout 60 $L check --backend cuda --algo loha --dir merge_bwd --require-fused --seed 312 2>&1); echo "loha merge_bwd $v: $(echo "$r" | tail -1)"; echo "$r" | grep " FAIL " | head -6
done
r=$(timeout 120 $L check --backend cuda --algo loha --dir merge_bwd --tier full --require-fused --seed 313 2>&1); echo "full tier loha merge_bwd: $(echo "$r" | tail -1)"; echo "$r" | grep " FAIL " | head -6
h() { timeout 60 $L check --backend cuda --algo loha --dir merge_bwd --seed 314 --hash 2>&1 | awk '/h=/{print $1,$2,$3,$NF}'; }
h > $OUT/a.txt; LYCO_CUDA_LOHA_MB1=0 h > $OUT/b.txt; echo "== hashes loha merge_bwd one-pass vs MB1=0 (rows that differ = rows the kernel took):"; diff $OUT/a.txt $OUT/b.txt | grep "^<" | head -30; wc -l < $OUT/a.txt
h > $OUT/b.txt; cmp -s $OUT/a.txt $OUT/b.txt && echo "REPEATABLE" || echo "NOT REPEATABLE"
timeout 90 compute-sanitizer --tool memcheck --print-limit 10 $L check --backend cuda --algo loha,locon --dir merge_bwd --dtypes bf16,fp16 --seed 315 > $OUT/mc.txt 2>&1; grep -E "ERROR SUMMARY" $OUT/mc.txt; grep -E "passed" $OUT/mc.txt | tail -1
timeout 120 compute-sanitizer --tool racecheck --print-limit 10 $L check --backend cuda --algo loha,locon --dir merge_bwd --dtypes bf16 --seed 316 > $OUT/rc.txt 2>&1; grep -E "RACECHECK SUMMARY|ERROR SUMMARY" $OUT/rc.txt; grep -E "passed" $OUT/rc.txt | tail -1
echo "== bench bf16 loha merge_fwd,merge_bwd: default / MB1=0 / S=3 / NC=1 / NS=2, two rounds"
for rd in 1 2; do for v in "X=1" "LYCO_CUDA_LOHA_MB1=0" "LYCO_CUDA_LOHA_MB1_S=3" "LYCO_CUDA_LOHA_MB1_NC=1" "LYCO_CUDA_LOHA_MB1_NS=2"; do
  env $v timeout 40 $L bench --backend cuda --algo loha --dir merge_fwd,merge_bwd --quick > $OUT/b.txt 2>&1
  echo "-- $v round $rd"; grep -E "^loha " $OUT/b.txt | cut -c1-150
done; done
echo "== kernel times (ncu): loha merge_bwd default and MB1=0"
for v in "X=1" "LYCO_CUDA_LOHA_MB1=0"; do echo "-- $v"; env $v timeout 60 ncu --clock-control none --csv --page raw --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size $L bench --backend cuda --algo loha --dir merge_bwd --quick --reps 3 > $OUT/ncu.csv 2> $OUT/ncu.err; python3 tools/ncu_summary.py $OUT/ncu.csv 2>&1 | head -12; done
timeout 90 ncu --clock-control none -k regex:k_loha_grad_onepass -c 1 --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section InstructionStats $L bench --backend cuda --algo loha --dir merge_bwd --quick --reps 2 > $OUT/ncu2.txt 2>&1
grep -vE "^==PROF|^ *-+ *$" $OUT/ncu2.txt | grep -A200 "k_loha_grad_onepass" | grep -vE "^\s*$" | head -70
} 2>&1 | tee $OUT/summary.txt
rm -f $OUT/a.txt $OUT/b.txt $OUT/mc.txt $OUT/rc.txt $OUT/ncu.err
