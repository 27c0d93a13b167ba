# session 26, call 2: the lean expand's base through registers (b522cb0+) against the landing binary (1152251):
# correctness, hashes, bench A/B, kernel tables; the probe's register row walks
mkdir -p /tmp/old && xz -dc build-carry/oldlyco.tar.xz | tar -xf - -C /tmp/old; O=/tmp/old/lyco
{
for sz in "8192 4096" "11008 4096"; do echo "== probe $sz"; timeout 30 build-carry/stream_probe $sz | grep -E "memcpy|^flat |tile16x128|tile64x128|ps64x128|rw|rr"; done
echo "== check, every family, quick tier, --require-fused (new)"
r=$(timeout 170 $L check --backend cuda --require-fused --seed 121 2>&1); echo "$(echo "$r" | tail -1)"; echo "$r" | grep " FAIL " | head -8
echo "== hashes old vs new: every direction of locon,dylora,loha,glora (seed 122)"
for b in $O $L; do timeout 120 $b check --backend cuda --algo locon,dylora,loha,glora --seed 122 --hash 2>&1 | awk '/h=/{print $1,$2,$3,$NF}' > $OUT/h_$(basename $(dirname $b)).txt; wc -l < $OUT/h_$(basename $(dirname $b)).txt; done
cmp $OUT/h_old.txt $OUT/h_build-gpu.txt && echo "HASHES EQUAL" || { echo "HASHES DIFFER"; diff $OUT/h_old.txt $OUT/h_build-gpu.txt | head -10; }
echo "== memcheck locon, loha bf16,fp16 (new)"
timeout 150 compute-sanitizer --tool memcheck --print-limit 10 $L check --backend cuda --algo locon --dtypes bf16,fp16 --seed 123 > $OUT/mc.txt 2>&1; grep -E "ERROR SUMMARY" $OUT/mc.txt; grep -E "passed" $OUT/mc.txt | tail -1
echo "== bench bf16: old / new, two rounds"
for rd in 1 2; do for b in $O $L; do
  timeout 100 $b bench --backend cuda --algo lora,loha --dtypes bf16 > $OUT/b.txt 2>&1
  echo "-- $b round $rd"; grep -E "^(lora|loha) " $OUT/b.txt | cut -c1-150
done; done
for b in $O $L; do
echo "== ncu kernel table, lora bf16 every direction ($b)"
timeout 100 ncu --clock-control none --csv --page raw --metrics gpu__time_duration.sum,launch__grid_size,dram__throughput.avg.pct_of_peak_sustained_elapsed \
    -k regex:"k_expand|k_reduce|k_colreduce" -c 120 $b bench --backend cuda --algo lora --dtypes bf16 --reps 2 > $OUT/ncu.csv 2> /dev/null
python3 tools/ncu_rows.py $OUT/ncu.csv 2>&1 | tail -20
done
} 2>&1 | tee $OUT/summary.txt
rm -f $OUT/ncu.csv $OUT/b.txt $OUT/mc.txt
