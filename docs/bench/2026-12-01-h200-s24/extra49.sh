# session 24, call 6: why k_doft_fwd_tc / k_doft_fwd_cf_tc are at 23-27 % of DRAM peak
keys="Duration|DRAM Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Size|Grid Size|No Eligible|Issue Slots Busy|Eligible Warps|Warp Cycles Per Issued|Dynamic Shared|L2 Hit|Executed Ipc A|Stall|Memory Throughput|Compute \(SM\)|Bank Conflicts|Block Limit"
{
for kd in k_doft_fwd_tc:merge_fwd k_doft_fwd_cf_tc:bypass_fwd; do
  kn=${kd%%:*}; d=${kd#*:}
  timeout 120 ncu --clock-control none --set full -k regex:"$kn" --launch-skip 6 -c 1 $L bench --backend cuda --algo diag-oft --dir $d --dtypes bf16 --reps 3 > $OUT/full.txt 2>&1
  echo "== ncu --set full $kn ($d)"; grep -E "$keys" $OUT/full.txt | grep -v "^ *OPT\|^ *INF" | head -60
done
} 2>&1 | tee $OUT/summary.txt
rm -f $OUT/full.txt
