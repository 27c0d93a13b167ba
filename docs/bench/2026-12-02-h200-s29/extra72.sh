# session 29, call 4: LoKr W2f formed first (A/B), DoRA slab cluster size A/B, kernel times of LoRA/LoKr merges, the peer bench on the merge families
{
echo "commit $(cat build-carry/prebuilt.commit 2>/dev/null)"; nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
r=$(timeout 90 $L check --backend cuda --algo locon,lokr --require-fused --seed 221 2>&1); echo "locon,lokr quick tier, --require-fused: $(echo "$r" | tail -1)"; echo "$r" | grep " FAIL " | head -8
r=$(timeout 60 $L check --backend cuda --algo lokr --dir merge_fwd --tier full --require-fused --seed 222 2>&1); echo "full tier lokr merge_fwd: $(echo "$r" | tail -1)"; echo "$r" | grep " FAIL " | head -8
h() { timeout 60 $L check --backend cuda --algo $1 --dir merge_fwd --seed 223 --hash 2>&1 | awk '/h=/{print $1,$2,$3,$NF}'; }
ab() { cmp -s $OUT/a.txt $OUT/b.txt && echo "EQUAL ($(wc -l < $OUT/a.txt) rows)" || { echo "DIFFER"; diff $OUT/a.txt $OUT/b.txt | head -6; }; }
echo "== hashes lokr: default vs MF_W2F=0, vs MF_FUSED=0"
h lokr > $OUT/a.txt; LYCO_CUDA_LOKR_MF_W2F=0 h lokr > $OUT/b.txt; ab; LYCO_CUDA_LOKR_MF_FUSED=0 h lokr > $OUT/b.txt; ab
echo "== hashes locon (DoRA rows): default vs DORA_SLAB_CS=4, vs DORA_SLAB=0"
h locon > $OUT/a.txt; LYCO_CUDA_DORA_SLAB_CS=4 h locon > $OUT/b.txt; ab; LYCO_CUDA_DORA_SLAB=0 h locon > $OUT/b.txt; ab
echo "== memcheck lokr merge_fwd; racecheck locon merge_fwd bf16 at DORA_SLAB_CS=4"
timeout 60 compute-sanitizer --tool memcheck --print-limit 10 $L check --backend cuda --algo lokr --dir merge_fwd --dtypes bf16,fp16 --seed 224 > $OUT/mc.txt 2>&1; grep -E "ERROR SUMMARY" $OUT/mc.txt; grep -E "passed" $OUT/mc.txt | tail -1
LYCO_CUDA_DORA_SLAB_CS=4 timeout 60 compute-sanitizer --tool racecheck --print-limit 10 $L check --backend cuda --algo locon --dir merge_fwd --dtypes bf16 --seed 225 > $OUT/rc.txt 2>&1; grep -E "RACECHECK SUMMARY|ERROR SUMMARY" $OUT/rc.txt; grep -E "passed" $OUT/rc.txt | tail -1
echo "== bench bf16 merge_fwd lokr,dora: default / LOKR_MF_W2F=0 / DORA_SLAB_CS=4, three rounds"
for rd in 1 2 3; do for v in "X=1" "LYCO_CUDA_LOKR_MF_W2F=0" "LYCO_CUDA_DORA_SLAB_CS=4"; do
  env $v timeout 40 $L bench --backend cuda --algo lokr,dora --dir merge_fwd --dtypes bf16 > $OUT/b.txt 2>&1
  echo "-- $v round $rd"; grep -E "^(lokr|dora) " $OUT/b.txt | cut -c1-150
done; done
echo "== kernel times (ncu gpu__time_duration, DRAM %): lora merge_bwd, lokr merge_fwd, dora merge_fwd at DORA_SLAB_CS=4"
timeout 100 ncu --clock-control none --csv --page raw --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size $L bench --backend cuda --algo lora,lokr --dir merge_bwd,merge_fwd --dtypes bf16 --reps 3 > $OUT/ncu.csv 2> $OUT/ncu.err; python3 tools/ncu_summary.py $OUT/ncu.csv 2>&1 | head -40
LYCO_CUDA_DORA_SLAB_CS=4 timeout 60 ncu --clock-control none -k regex:k_dora_slab -c 3 --section SpeedOfLight --section Occupancy --section LaunchStats $L bench --backend cuda --algo dora --dir merge_fwd --dtypes bf16 --reps 3 > $OUT/ncu2.txt 2>&1
grep -E "k_dora_slab|Duration|DRAM Throughput|Cluster Size|Achieved Occupancy|Block Limit Shared|Waves|Max Active Clusters" $OUT/ncu2.txt | head -30
} 2>&1 | tee $OUT/summary.txt
echo "== peers: lora, dora, lokr, loha merges" | tee -a $OUT/summary.txt
LYCO_PEERS_TIMEOUT=200 LYCO_PEERS_ARGS="--only lora_merge,dora_merge,lokr_merge,loha_merge --no-first-call" LYCO_BUILD_DIR=build-gpu OUT=$OUT bash tools/gpu-peers.sh > $OUT/peers-run.log 2>&1; echo "peers rc=$?" | tee -a $OUT/summary.txt
cat $OUT/peers/table.md 2>/dev/null | tee -a $OUT/summary.txt | head -60
rm -f $OUT/a.txt $OUT/b.txt $OUT/mc.txt $OUT/rc.txt $OUT/ncu.err $OUT/peers/*.png
