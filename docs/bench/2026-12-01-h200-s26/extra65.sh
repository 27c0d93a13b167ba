# session 26, call 4: the landing CUDA code (the plain merge's base tile through registers, a block per tile) against 1152251
mkdir -p /tmp/old && xz -dc build-carry/oldlyco.tar.xz | tar -xf - -C /tmp/old; O=/tmp/old/lyco
{
r=$(timeout 170 $L check --backend cuda --require-fused --seed 141 2>&1); echo "every family, quick tier, --require-fused: $(echo "$r" | tail -1)"; echo "$r" | grep " FAIL " | head -8
r=$(timeout 90 $L check --backend cuda --algo locon,dylora --dir merge_fwd,bypass_fwd --tier full --require-fused --seed 142 2>&1); echo "full tier locon,dylora merge_fwd,bypass_fwd: $(echo "$r" | tail -1)"; echo "$r" | grep " FAIL " | head -8
echo "== hashes old vs new: every direction of locon,dylora,loha,glora,lokr (seed 143)"
for b in $O $L; do timeout 80 $b check --backend cuda --algo locon,dylora,loha,glora,lokr --seed 143 --hash 2>&1 | awk '/h=/{print $1,$2,$3,$NF}' > $OUT/h_$(basename $(dirname $b)).txt; wc -l < $OUT/h_$(basename $(dirname $b)).txt; done
cmp $OUT/h_old.txt $OUT/h_build-gpu.txt && echo "HASHES EQUAL" || { echo "HASHES DIFFER"; diff $OUT/h_old.txt $OUT/h_build-gpu.txt | head -10; }
echo "== memcheck, racecheck: locon merge_fwd, bypass_fwd (new)"
timeout 60 compute-sanitizer --tool memcheck --print-limit 10 $L check --backend cuda --algo locon --dir merge_fwd,bypass_fwd --dtypes bf16,fp16 --seed 144 > $OUT/mc.txt 2>&1; grep -E "ERROR SUMMARY" $OUT/mc.txt; grep -E "passed" $OUT/mc.txt | tail -1
timeout 60 compute-sanitizer --tool racecheck --print-limit 10 $L check --backend cuda --algo locon --dir merge_fwd --dtypes bf16 --seed 145 > $OUT/rc.txt 2>&1; grep -E "RACECHECK SUMMARY|ERROR SUMMARY" $OUT/rc.txt; grep -E "passed" $OUT/rc.txt | tail -1
echo "== bench bf16: old / new, two rounds"
for rd in 1 2; do for b in $O $L; do
  timeout 50 $b bench --backend cuda --algo lora,loha,dora --dir merge_fwd,bypass_fwd --dtypes bf16 > $OUT/b.txt 2>&1
  echo "-- $b round $rd"; grep -E "^(lora|loha|dora) " $OUT/b.txt | cut -c1-150
done; done
} 2>&1 | tee $OUT/summary.txt
rm -f $OUT/b.txt $OUT/mc.txt $OUT/rc.txt
