# session 25, call 4: expand_direct with 64 columns per warp — correctness and A/B against the lean kernel
{
echo "== check quick, every expand user, --require-fused: direct (default) vs LYCO_CUDA_EXPAND_DIRECT=0"
for v in "" 0; do
  r=$(LYCO_CUDA_EXPAND_DIRECT=$v timeout 100 $L check --backend cuda --algo locon,dylora,loha,glora,lokr --require-fused --seed 81 2>&1)
  echo "DIRECT='$v': $(echo "$r" | tail -1)"; echo "$r" | grep " FAIL " | head -8
done
echo "== full tier merge_fwd,bypass_fwd (locon, dylora, loha)"
r=$(timeout 150 $L check --backend cuda --algo locon,dylora,loha --dir merge_fwd,bypass_fwd --tier full --require-fused --seed 82 2>&1); echo "$(echo "$r" | tail -1)"; echo "$r" | grep " FAIL " | head -8
echo "== determinism (hash twice)"
for i in 1 2; do timeout 60 $L check --backend cuda --algo locon,loha,dylora --dir merge_fwd,bypass_fwd --seed 83 --hash 2>&1 | grep -o 'h=[0-9a-f]*' | md5sum; done
echo "== memcheck / racecheck"
timeout 150 compute-sanitizer --tool memcheck --print-limit 10 $L check --backend cuda --algo locon,loha,dylora --dir merge_fwd,bypass_fwd --dtypes bf16,fp16 --seed 84 > $OUT/mc.txt 2>&1; grep -E "ERROR SUMMARY" $OUT/mc.txt; grep -E "passed" $OUT/mc.txt | tail -1
timeout 150 compute-sanitizer --tool racecheck --print-limit 10 $L check --backend cuda --algo locon,loha --dir merge_fwd,bypass_fwd --dtypes bf16 --seed 85 > $OUT/rc.txt 2>&1; grep -E "RACECHECK SUMMARY" $OUT/rc.txt | head -3; grep -E "passed" $OUT/rc.txt | tail -1
echo "== bench bf16 (median µs, min µs per row): lean, direct, direct VAR=4 (no prefetch), three rounds"
for rd in 1 2 3; do
for v in lean 0 4; do
  if [ $v = lean ]; then e="LYCO_CUDA_EXPAND_DIRECT=0"; else e="LYCO_CUDA_DX_VAR=$v"; fi
  env $e timeout 60 $L bench --backend cuda --algo lora,dylora,loha --dir merge_fwd,bypass_fwd --dtypes bf16 > $OUT/b.txt 2>&1
  echo "-- round $rd $e: $(grep -E '^(lora|dylora|loha)' $OUT/b.txt | awk -F'|' '{printf "%s ", $3}' | tr -s ' ')"
done; done
echo "(rows: lora merge 4096 r8 r32 r128, 11008 r8 r32 r128, lora bypass 8192tok r8 r32 r128, 16384tok r8 r32 r128, dylora merge, bypass, loha merge, bypass)"
grep -E "^(lora|dylora|loha)" $OUT/b.txt | cut -c1-60
} 2>&1 | tee $OUT/summary.txt
rm -f $OUT/b.txt
