# session 30, call 3: why the one-pass merge-backward kernel takes 48 µs at 4096² r32 (diagnostic switches: DBG 1 = no Uᵀ·Γ mma, 2 = no Γ·Dᵀ mma)
{
echo "commit $(cat build-carry/prebuilt.commit 2>/dev/null) + diagnostic switch"; nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
for v in "X=1" "LYCO_CUDA_MB1_DBG=1" "LYCO_CUDA_MB1_DBG=2" "LYCO_CUDA_MB1_DBG=3" "LYCO_CUDA_MB1_NC=2" "LYCO_CUDA_MB1_S=3"; do
  echo "-- $v"; env $v timeout 60 ncu --clock-control none --csv --page raw -k regex:k_merge_bwd_onepass --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size $L bench --backend cuda --algo lora --dir merge_bwd,bypass_fwd --quick --reps 2 > $OUT/ncu.csv 2> /dev/null; python3 tools/ncu_summary.py $OUT/ncu.csv 2>&1 | awk 'NR>1{print substr($0,1,70), substr($0,71,16), substr($0,131,16)}'
done
timeout 90 ncu --clock-control none -k regex:k_merge_bwd_onepass -c 1 --section WarpStateStats --section SchedulerStats --section InstructionStats --section MemoryWorkloadAnalysis $L bench --backend cuda --algo lora --dir merge_bwd --quick --reps 2 > $OUT/ncu2.txt 2>&1
grep -vE "^==PROF|^ *-+ *$" $OUT/ncu2.txt | grep -A200 "k_merge_bwd_onepass" | grep -vE "^\s*$" | head -90
} 2>&1 | tee $OUT/summary.txt
