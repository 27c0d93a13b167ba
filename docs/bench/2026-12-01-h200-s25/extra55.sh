# session 25, call 3: streaming access patterns on this GPU (tools/stream_probe.cu), and the expand kernels' profiles
{
chmod +x build-carry/stream_probe
build-carry/stream_probe 4096 4096
build-carry/stream_probe 11008 4096
build-carry/stream_probe 8192 4096
keys="Duration|DRAM Throughput|Memory Throughput|Mem Busy|Max Bandwidth|Mem Pipes|L1/TEX Hit|L2 Hit|Achieved Occupancy|Theoretical Occupancy|Registers Per|Grid Size|Issue Slots Busy|Eligible Warps|No Eligible|Warp Cycles Per Issued|Executed Ipc A|Dynamic Shared|Executed Instructions  "
for kv in "k_expand_direct::" "k_expand_lean:LYCO_CUDA_EXPAND_DIRECT=0:"; do
  kn=${kv%%:*}; rest=${kv#*:}; e=${rest%%:*}
  env $e timeout 120 ncu --clock-control none --set full --metrics smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_drain_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio,smsp__average_warps_issue_stalled_dispatch_stall_per_issue_active.ratio,smsp__average_warps_issue_stalled_imc_miss_per_issue_active.ratio,smsp__average_warps_issue_stalled_membar_per_issue_active.ratio,smsp__average_warps_issue_stalled_tex_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_branch_resolving_per_issue_active.ratio,smsp__average_warps_issue_stalled_sleeping_per_issue_active.ratio -k regex:"$kn" --launch-skip 2 -c 1 $L bench --backend cuda --algo lora --dir merge_fwd --dtypes bf16 --reps 3 > $OUT/full.txt 2>&1
  echo "== ncu --set full $kn $e (lora merge_fwd, 3rd launch)"; grep -E "k_expand|$keys|issue_stalled" $OUT/full.txt | grep -v "^ *OPT\|^ *INF\|==PROF==" | head -40
  grep -E "^    (Stall|smsp__pcsamp)|Warp State|stall" $OUT/full.txt | head -5
done
} 2>&1 | tee $OUT/summary.txt
rm -f $OUT/full.txt
