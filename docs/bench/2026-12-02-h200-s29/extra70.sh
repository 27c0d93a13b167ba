# session 29, call 2: DoRA slab with clusters of up to 16 CTAs and the partials gathered 8 in flight; LoKr fused merge at ~4 blocks per SM
{
echo "commit $(cat build-carry/prebuilt.commit 2>/dev/null)"; nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
r=$(timeout 120 $L check --backend cuda --algo locon,lokr,loha,dylora --require-fused --seed 201 2>&1); echo "locon,lokr,loha,dylora quick tier, --require-fused: $(echo "$r" | tail -1)"; echo "$r" | grep " FAIL " | head -8
r=$(timeout 90 $L check --backend cuda --algo locon,lokr --dir merge_fwd --tier full --require-fused --seed 202 2>&1); echo "full tier locon,lokr merge_fwd: $(echo "$r" | tail -1)"; echo "$r" | grep " FAIL " | head -8
h() { timeout 60 $L check --backend cuda --algo $1 --dir merge_fwd --seed 203 --hash 2>&1 | awk '/h=/{print $1,$2,$3,$NF}'; }
ab() { cmp -s $OUT/a.txt $OUT/b.txt && echo "EQUAL ($(wc -l < $OUT/a.txt) rows)" || { echo "DIFFER"; diff $OUT/a.txt $OUT/b.txt | head -6; }; }
echo "== hashes locon merge_fwd (DoRA rows reach the slab): default vs DORA_SLAB=0, vs DORA_SLAB_CS=8"
h locon > $OUT/a.txt; LYCO_CUDA_DORA_SLAB=0 h locon > $OUT/b.txt; ab; LYCO_CUDA_DORA_SLAB_CS=8 h locon > $OUT/b.txt; ab
echo "== hashes lokr merge_fwd: default vs MF_FUSED=0, vs MF_BPS=8"
h lokr > $OUT/a.txt; LYCO_CUDA_LOKR_MF_FUSED=0 h lokr > $OUT/b.txt; ab; LYCO_CUDA_LOKR_MF_BPS=8 h lokr > $OUT/b.txt; ab
echo "== determinism: locon,lokr merge_fwd twice"
h locon,lokr > $OUT/b.txt; h locon,lokr > $OUT/c.txt; cmp -s $OUT/b.txt $OUT/c.txt && echo "REPEATABLE ($(wc -l < $OUT/b.txt) rows)" || echo "NOT REPEATABLE"
echo "== memcheck, racecheck: locon (DoRA rows), lokr merge_fwd"
timeout 80 compute-sanitizer --tool memcheck --print-limit 10 $L check --backend cuda --algo locon,lokr --dir merge_fwd --dtypes bf16,fp16 --seed 204 > $OUT/mc.txt 2>&1; grep -E "ERROR SUMMARY" $OUT/mc.txt; grep -E "passed" $OUT/mc.txt | tail -1
timeout 80 compute-sanitizer --tool racecheck --print-limit 10 $L check --backend cuda --algo locon --dir merge_fwd --dtypes bf16 --seed 205 > $OUT/rc.txt 2>&1; grep -E "RACECHECK SUMMARY|ERROR SUMMARY" $OUT/rc.txt; grep -E "passed" $OUT/rc.txt | tail -1
echo "== bench bf16 merge_fwd dora,lokr: default / DORA_SLAB_CS=8 / LOKR_MF_BPS=8 / DORA_SLAB=0, two rounds"
for rd in 1 2; do for v in "X=1" "LYCO_CUDA_DORA_SLAB_CS=8" "LYCO_CUDA_LOKR_MF_BPS=8" "LYCO_CUDA_DORA_SLAB=0"; do
  env $v timeout 40 $L bench --backend cuda --algo lokr,dora --dir merge_fwd --dtypes bf16 > $OUT/b.txt 2>&1
  echo "-- $v round $rd"; grep -E "^(lokr|dora) " $OUT/b.txt | cut -c1-150
done; done
echo "== ncu: k_dora_slab and k_lokr_merge_fwd_fused (bench rows), default"
timeout 90 ncu --clock-control none -k "regex:k_dora_slab|k_lokr_merge_fwd_fused" -c 4 --section SpeedOfLight --section Occupancy --section LaunchStats $L bench --backend cuda --algo dora,lokr --dir merge_fwd --dtypes bf16 --reps 3 > $OUT/ncu.txt 2>&1
grep -E "k_dora_slab|k_lokr_merge|Duration|DRAM Throughput|Compute \(SM\)|Cluster Size|Registers Per|Achieved Occupancy|Block Limit Shared|Waves|Grid Size|Max Active Clusters" $OUT/ncu.txt | head -60
echo "== DoRA rows of the whole bench, bf16 and fp16"
timeout 60 $L bench --backend cuda --quick --algo dora --dtypes bf16,fp16 > $OUT/b.txt 2>&1; grep -E "^dora" $OUT/b.txt | cut -c1-150
} 2>&1 | tee $OUT/summary.txt
rm -f $OUT/a.txt $OUT/b.txt $OUT/c.txt $OUT/mc.txt $OUT/rc.txt
