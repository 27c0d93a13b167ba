# session 25, call 1: expand_direct.cu (plain merges / bypass forward's expand) — correctness, A/B, profile
{
echo "== check quick, every expand user, --require-fused: direct (default) vs LYCO_CUDA_EXPAND_DIRECT=0"
for v in "" 0; do
  r=$(LYCO_CUDA_EXPAND_DIRECT=$v timeout 100 $L check --backend cuda --algo locon,dylora,loha,glora,lokr --require-fused --seed 71 2>&1)
  echo "DIRECT='$v': $(echo "$r" | tail -1)"; echo "$r" | grep " FAIL " | head -8
done
echo "== full tier merge_fwd,bypass_fwd (locon, dylora, loha)"
r=$(timeout 150 $L check --backend cuda --algo locon,dylora,loha --dir merge_fwd,bypass_fwd --tier full --require-fused --seed 72 2>&1); echo "$(echo "$r" | tail -1)"; echo "$r" | grep " FAIL " | head -8
echo "== determinism (hash twice)"
for i in 1 2; do timeout 60 $L check --backend cuda --algo locon,loha,dylora --dir merge_fwd,bypass_fwd --seed 73 --hash 2>&1 | grep -o 'h=[0-9a-f]*' | md5sum; done
echo "== memcheck / racecheck (bf16, fp16)"
timeout 150 compute-sanitizer --tool memcheck --print-limit 10 $L check --backend cuda --algo locon,loha,dylora --dir merge_fwd,bypass_fwd --dtypes bf16,fp16 --seed 74 > $OUT/mc.txt 2>&1; grep -E "ERROR SUMMARY" $OUT/mc.txt; grep -E "passed" $OUT/mc.txt | tail -1
timeout 150 compute-sanitizer --tool racecheck --print-limit 10 $L check --backend cuda --algo locon,loha --dir merge_fwd,bypass_fwd --dtypes bf16 --seed 75 > $OUT/rc.txt 2>&1; grep -E "RACECHECK SUMMARY|hazard" $OUT/rc.txt | head -3; grep -E "passed" $OUT/rc.txt | tail -1
echo "== bench bf16 A/B, interleaved: DIRECT=0, default, DIRECT=0, default"
for v in 0 "" 0 ""; do
  echo "-- DIRECT='$v'"
  LYCO_CUDA_EXPAND_DIRECT=$v timeout 120 $L bench --backend cuda --algo lora,dylora,loha,glora --dir merge_fwd,bypass_fwd --dtypes bf16 > $OUT/b.txt 2>&1
  grep -E "^(lora|dylora|loha|glora)" $OUT/b.txt | cut -c1-175
done
echo "== ncu: expand kernels (LoRA merge fwd, bypass fwd)"
for d in merge_fwd bypass_fwd; do
timeout 90 ncu --clock-control none --csv --page raw --metrics gpu__time_duration.sum,launch__grid_size,dram__throughput.avg.pct_of_peak_sustained_elapsed \
    -k regex:'expand|reduce|hfin' -c 40 $L bench --backend cuda --algo lora --dir $d --dtypes bf16 --reps 2 > $OUT/ncu.csv 2> /dev/null
echo "-- $d"; python3 tools/ncu_rows.py $OUT/ncu.csv 2>&1 | tail -14
done
} 2>&1 | tee $OUT/summary.txt
rm -f $OUT/ncu.csv $OUT/b.txt
