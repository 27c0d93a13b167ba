# session 25, call 2: why expand_direct streams at ~2.3 TB/s like the lean kernel — profiles and switches
keys="Duration|DRAM Throughput|Memory Throughput|Mem Busy|Max Bandwidth|Mem Pipes|L1/TEX Hit|L2 Hit|Achieved Occupancy|Theoretical Occupancy|Registers Per|Grid Size|Issue Slots Busy|Eligible Warps|No Eligible|Warp Cycles Per Issued|Executed Ipc A|Stall|Dynamic Shared|Block Limit|Executed Instructions  "
{
echo "== bench lora merge_fwd + bypass_fwd bf16: DX_VAR 0 1 2 3 4, DIRECT=0; two rounds"
for rd in 1 2; do
for v in 0 1 2 3 4 lean; do
  if [ $v = lean ]; then e="LYCO_CUDA_EXPAND_DIRECT=0"; else e="LYCO_CUDA_DX_VAR=$v"; fi
  env $e timeout 60 $L bench --backend cuda --algo lora --dir merge_fwd,bypass_fwd --dtypes bf16 > $OUT/b.txt 2>&1
  echo "-- round $rd $e: $(grep -E '^lora' $OUT/b.txt | awk -F'|' '{printf "%s ", $3}' | tr -s ' ')"
done; done
echo "(columns: merge 4096 r8 r32 r128, 11008 r8 r32 r128, bypass 8192tok r8 r32 r128, 16384tok r8 r32 r128: median µs, min µs)"
for kv in "k_expand_direct<__nv_bfloat16, 2, 0, 0, 0>::merge_fwd" "k_expand_lean<__nv_bfloat16, 32, 0, 0, 0>:LYCO_CUDA_EXPAND_DIRECT=0:merge_fwd" "k_copy_round8::bypass_bwd"; do
  kn=${kv%%:*}; rest=${kv#*:}; e=${rest%%:*}; d=${rest#*:}
  al=lora; [ "$kn" = k_copy_round8 ] && al=loha
  env $e timeout 120 ncu --clock-control none --set full --kernel-name-base demangled -k regex:"$kn" --launch-skip 3 -c 1 $L bench --backend cuda --algo $al --dir $d --dtypes bf16 --reps 3 > $OUT/full.txt 2>&1
  echo "== ncu --set full $kn $e ($al $d)"; grep -E "$keys" $OUT/full.txt | grep -v "^ *OPT\|^ *INF" | head -60
done
} 2>&1 | tee $OUT/summary.txt
rm -f $OUT/full.txt $OUT/b.txt
