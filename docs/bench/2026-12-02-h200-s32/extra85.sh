# session 32, call 3: Nsight Compute sections of the rank-128 kernels at 8192 tok × 4096² bf16 (h = x·Dᵀ, y = y0 + h·Uᵀ, d_up = dyᵀ·h)
{
echo "commit $(cat build-carry/prebuilt.commit 2>/dev/null)"; nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
t0=$(date +%s)
prof() { # kernel-regex dir
  echo "==== $1 over $2 ($(( $(date +%s)-t0 )) s)"
  timeout 150 ncu --clock-control none --kernel-name-base demangled -k "regex:$1" --launch-skip 2 -c 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats --section ComputeWorkloadAnalysis $L bench --backend cuda --algo lora --dir $2 --dtypes bf16 --reps 2 > $OUT/p.txt 2>&1
  grep -vE "^==PROF|^ *-+ *$|^\s*$|^lora |^family|^ *OPT|^ *INF|^ *WRN" $OUT/p.txt | grep -A300 "k_" | grep -E "Duration|Throughput|Busy|Pipe|Warp Cycles|Eligible|Issued|No Eligible|Active Warps|Occupancy|Registers|Shared Memory|Block Limit|Grid Size|Stall|Executed Ipc|Bank|L2 Hit|L1/TEX Hit|Mem Busy|Max Bandwidth|k_" | head -60
}
prof "k_reduce_lean<__nv_bfloat16, .int.128, .bool.0, .bool.0, .int.128>" bypass_fwd
prof "k_expand_lean<__nv_bfloat16, .int.128, .bool.1, .bool.0, .int.0>" bypass_fwd
prof "k_colreduce_lean<__nv_bfloat16, .int.128, .int.128, .int.64>" bypass_bwd
echo "-- warp stall breakdown, k_reduce_lean BR 128 ($(( $(date +%s)-t0 )) s)"
timeout 150 ncu --clock-control none --kernel-name-base demangled -k "regex:k_reduce_lean<__nv_bfloat16, .int.128, .bool.0, .bool.0, .int.128>" --launch-skip 2 -c 1 --metrics smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_dispatch_stall_per_issue_active.ratio,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_tex_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio,smsp__average_warps_issue_stalled_branch_resolving_per_issue_active.ratio,smsp__average_warps_issue_stalled_membar_per_issue_active.ratio,smsp__average_warps_issue_stalled_drain_per_issue_active.ratio,smsp__average_warps_issue_stalled_sleeping_per_issue_active.ratio,smsp__average_warps_issue_stalled_imc_miss_per_issue_active.ratio,smsp__average_warps_active_per_issue_active.ratio,smsp__issue_active.avg.per_cycle_active,smsp__inst_executed.sum,smsp__inst_executed_pipe_tensor.sum $L bench --backend cuda --algo lora --dir bypass_fwd --dtypes bf16 --reps 2 > $OUT/p2.txt 2>&1
grep -E "smsp__|k_reduce" $OUT/p2.txt | head -30
echo "($(( $(date +%s)-t0 )) s)"
} 2>&1 | tee $OUT/summary.txt
rm -f $OUT/p.txt
