# session 29, call 1: LoKr fused merge with the halves' values formed once per block; LoHa pair back on the persistent kernel; DoRA slab profile
{
echo "commit $(cat build-carry/prebuilt.commit 2>/dev/null)"; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
r=$(timeout 200 $L check --backend cuda --require-fused --seed 191 2>&1); echo "every family, quick tier, --require-fused: $(echo "$r" | tail -1)"; echo "$r" | grep " FAIL " | head -8
r=$(timeout 60 $L check --backend cuda --algo lokr,loha --dir merge_fwd --tier full --require-fused --seed 192 2>&1); echo "full tier lokr,loha merge_fwd: $(echo "$r" | tail -1)"; echo "$r" | grep " FAIL " | head -8
h() { timeout 60 $L check --backend cuda --algo $1 --dir $2 --seed 193 --hash 2>&1 | awk '/h=/{print $1,$2,$3,$NF}'; }
echo "== hashes: lokr merge_fwd fused vs LYCO_CUDA_LOKR_MF_FUSED=0"
h lokr merge_fwd > $OUT/a.txt; LYCO_CUDA_LOKR_MF_FUSED=0 h lokr merge_fwd > $OUT/b.txt; wc -l < $OUT/a.txt; cmp -s $OUT/a.txt $OUT/b.txt && echo "EQUAL" || { echo "DIFFER"; diff $OUT/a.txt $OUT/b.txt | head -6; }
echo "== hashes: locon,dylora,loha merge_fwd default vs EXPAND_GENERAL=1 NO_SMALL_MERGE=1 (lean vs k_expand)"
h locon,dylora,loha merge_fwd > $OUT/a.txt; LYCO_CUDA_EXPAND_GENERAL=1 LYCO_CUDA_NO_SMALL_MERGE=1 h locon,dylora,loha merge_fwd > $OUT/b.txt; wc -l < $OUT/a.txt; cmp -s $OUT/a.txt $OUT/b.txt && echo "EQUAL" || { echo "DIFFER"; diff $OUT/a.txt $OUT/b.txt | head -6; }
echo "== hashes: same, EXPAND_GENERAL=1 only (r <= 16 then takes locon_merge_small: FFMA order, may differ)"
LYCO_CUDA_EXPAND_GENERAL=1 h locon,dylora,loha merge_fwd > $OUT/b.txt; cmp -s $OUT/a.txt $OUT/b.txt && echo "EQUAL" || { echo "DIFFER: $(diff $OUT/a.txt $OUT/b.txt | grep -c '^<') rows"; diff $OUT/a.txt $OUT/b.txt | head -6; }
echo "== determinism: lokr,loha merge_fwd twice"
h lokr,loha merge_fwd > $OUT/b.txt; h lokr,loha merge_fwd > $OUT/c.txt; cmp -s $OUT/b.txt $OUT/c.txt && echo "REPEATABLE ($(wc -l < $OUT/b.txt) rows)" || echo "NOT REPEATABLE"
echo "== memcheck, racecheck: lokr,loha merge_fwd"
timeout 60 compute-sanitizer --tool memcheck --print-limit 10 $L check --backend cuda --algo lokr,loha --dir merge_fwd --dtypes bf16,fp16 --seed 194 > $OUT/mc.txt 2>&1; grep -E "ERROR SUMMARY" $OUT/mc.txt; grep -E "passed" $OUT/mc.txt | tail -1
timeout 60 compute-sanitizer --tool racecheck --print-limit 10 $L check --backend cuda --algo lokr --dir merge_fwd --dtypes bf16 --seed 195 > $OUT/rc.txt 2>&1; grep -E "RACECHECK SUMMARY|ERROR SUMMARY" $OUT/rc.txt; grep -E "passed" $OUT/rc.txt | tail -1
echo "== bench bf16 merge_fwd: lokr,loha,dora; default / LOKR_MF_FUSED=0 / DORA_SLAB=0, two rounds"
for rd in 1 2; do for v in "X=1" "LYCO_CUDA_LOKR_MF_FUSED=0" "LYCO_CUDA_DORA_SLAB=0"; do
  env $v timeout 40 $L bench --backend cuda --algo lokr,loha,dora --dir merge_fwd --dtypes bf16 > $OUT/b.txt 2>&1
  echo "-- $v round $rd"; grep -E "^(lokr|loha|dora) " $OUT/b.txt | cut -c1-150
done; done
echo "== ncu: k_dora_slab (bench dora merge_fwd bf16), first 2 launches"
timeout 90 ncu --clock-control none -k regex:k_dora_slab -c 2 --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis $L bench --backend cuda --algo dora --dir merge_fwd --dtypes bf16 --reps 3 > $OUT/ncu.txt 2>&1
grep -E "k_dora_slab|Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|Cluster|Registers|Achieved Occupancy|Theoretical Occupancy|Block Limit|Waves|Stall|Grid Size|Shared Memory Config|Max Active Clusters|Warp Cycles|Issued" $OUT/ncu.txt | head -80
echo "== whole GPU bench, quick, bf16"
timeout 200 $L bench --backend cuda --quick --dtypes bf16 --csv $OUT/bench-bf16.csv > $OUT/bench-bf16.txt 2>&1; echo "rc=$?"; grep -E "^[a-z0-9-]+ +(merge|bypass)" $OUT/bench-bf16.txt | cut -c1-150
} 2>&1 | tee $OUT/summary.txt
rm -f $OUT/a.txt $OUT/b.txt $OUT/c.txt $OUT/mc.txt $OUT/rc.txt
