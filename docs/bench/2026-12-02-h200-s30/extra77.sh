# session 30, call 4: the streaming skeleton of the one-pass kernel (load shape / stagger, mma off), cp_wait up to 6, A/B bench, peers on the LoRA merge
{
echo "commit $(cat build-carry/prebuilt.commit 2>/dev/null)"; nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
r=$(timeout 100 $L check --backend cuda --algo locon,loha,lokr --require-fused --seed 321 2>&1); echo "locon,loha,lokr quick tier, --require-fused: $(echo "$r" | tail -1)"; echo "$r" | grep " FAIL " | head -8
echo "== ncu kernel time / DRAM %, lora merge_bwd + bypass_fwd (DBG 3: no mma; 7: no mma, 16×512 loads; 11: no mma, staggered chunk order)"
for v in "X=1" "LYCO_CUDA_MB1_DBG=3" "LYCO_CUDA_MB1_DBG=7" "LYCO_CUDA_MB1_DBG=11" "LYCO_CUDA_MB1_S=4"; do
  echo "-- $v"; env $v timeout 60 ncu --clock-control none --csv --page raw -k regex:k_merge_bwd_onepass --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size $L bench --backend cuda --algo lora --dir merge_bwd,bypass_fwd --quick --reps 2 > $OUT/ncu.csv 2> /dev/null; python3 tools/ncu_summary.py $OUT/ncu.csv 2>&1 | awk 'NR>1{print substr($0,1,70), substr($0,71,16), substr($0,131,16)}'
done
echo "== bench bf16: merge_bwd default / MB1=0, bypass default / RR=0; two rounds"
for rd in 1 2; do for v in "X=1" "LYCO_CUDA_MB1=0 LYCO_CUDA_RR=0"; do
  env $v timeout 60 $L bench --backend cuda --algo lora,dylora,lora-conv --dir merge_bwd,bypass_fwd,bypass_bwd --quick > $OUT/b.txt 2>&1
  echo "-- $v round $rd"; grep -E "^(lora|dylora|lora-conv) " $OUT/b.txt | cut -c1-150
done; done
} 2>&1 | tee $OUT/summary.txt
echo "== peers: lora merge and bypass (forward and forward+backward)" | tee -a $OUT/summary.txt
LYCO_PEERS_TIMEOUT=180 LYCO_PEERS_ARGS="--only lora_merge,lora_bypass --no-first-call" LYCO_BUILD_DIR=build-gpu OUT=$OUT bash tools/gpu-peers.sh > $OUT/peers-run.log 2>&1; echo "peers rc=$?" | tee -a $OUT/summary.txt
cat $OUT/peers/table.md 2>/dev/null | tee -a $OUT/summary.txt | head -30
rm -f $OUT/b.txt $OUT/peers/*.png
