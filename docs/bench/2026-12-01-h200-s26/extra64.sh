# session 26, call 3: the lean expand, a block per tile with the base through registers (3c…), against the landing binary (1152251)
mkdir -p /tmp/old && xz -dc build-carry/oldlyco.tar.xz | tar -xf - -C /tmp/old; O=/tmp/old/lyco
{
echo "== check, expand users, quick tier, --require-fused (new)"
r=$(timeout 100 $L check --backend cuda --algo locon,dylora,loha,glora,lokr --require-fused --seed 131 2>&1); echo "$(echo "$r" | tail -1)"; echo "$r" | grep " FAIL " | head -8
r=$(timeout 60 $L check --backend cuda --algo locon,loha --dir merge_fwd,bypass_fwd --tier full --require-fused --seed 132 2>&1); echo "full tier locon,loha merge_fwd,bypass_fwd: $(echo "$r" | tail -1)"; echo "$r" | grep " FAIL " | head -8
echo "== hashes old vs new: every direction of locon,dylora,loha,glora (seed 133)"
for b in $O $L; do timeout 100 $b check --backend cuda --algo locon,dylora,loha,glora --seed 133 --hash 2>&1 | awk '/h=/{print $1,$2,$3,$NF}' > $OUT/h_$(basename $(dirname $b)).txt; wc -l < $OUT/h_$(basename $(dirname $b)).txt; done
cmp $OUT/h_old.txt $OUT/h_build-gpu.txt && echo "HASHES EQUAL" || { echo "HASHES DIFFER"; diff $OUT/h_old.txt $OUT/h_build-gpu.txt | head -10; }
echo "== memcheck locon, loha merge_fwd, bypass_fwd bf16,fp16 (new)"
timeout 100 compute-sanitizer --tool memcheck --print-limit 10 $L check --backend cuda --algo locon,loha --dir merge_fwd,bypass_fwd --dtypes bf16,fp16 --seed 134 > $OUT/mc.txt 2>&1; grep -E "ERROR SUMMARY" $OUT/mc.txt; grep -E "passed" $OUT/mc.txt | tail -1
echo "== ncu k_expand, lora merge_fwd + bypass_fwd bf16: old, new"
for b in $O $L; do
timeout 60 ncu --clock-control none --csv --page raw --metrics gpu__time_duration.sum,launch__grid_size,dram__throughput.avg.pct_of_peak_sustained_elapsed \
    -k regex:k_expand -c 60 $b bench --backend cuda --algo lora --dir merge_fwd,bypass_fwd --dtypes bf16 --reps 2 > $OUT/ncu.csv 2> /dev/null
echo "-- $b"; python3 tools/ncu_rows.py $OUT/ncu.csv 2>&1 | tail -8
done
echo "== bench bf16 merge_fwd, bypass_fwd: old / new, three rounds"
for rd in 1 2 3; do for b in $O $L; do
  timeout 60 $b bench --backend cuda --algo lora,loha,dora --dir merge_fwd,bypass_fwd --dtypes bf16 > $OUT/b.txt 2>&1
  echo "-- $b round $rd"; grep -E "^(lora|loha|dora) " $OUT/b.txt | cut -c1-150
done; done
} 2>&1 | tee $OUT/summary.txt
rm -f $OUT/ncu.csv $OUT/b.txt $OUT/mc.txt
