# session 30, call 1: merge backward's one-pass kernel and the resident-factor row reduction (merge_bwd_onepass.cu) — correctness, A/B, NS sweep, kernel times
{
echo "commit $(cat build-carry/prebuilt.commit 2>/dev/null)"; nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
r=$(timeout 150 $L check --backend cuda --algo locon,dylora,glora,lokr --require-fused --seed 301 2>&1); echo "locon,dylora,glora,lokr quick tier, --require-fused: $(echo "$r" | tail -1)"; echo "$r" | grep " FAIL " | head -8
r=$(LYCO_CUDA_RR=2 timeout 150 $L check --backend cuda --algo locon,dylora,glora,lokr --require-fused --seed 306 2>&1); echo "the same, RR=2 (resident reduction forced on small grids): $(echo "$r" | tail -1)"; echo "$r" | grep " FAIL " | head -8
hb() { timeout 60 $L check --backend cuda --algo locon,dylora,glora --dir bypass_fwd,bypass_bwd --seed 307 --hash 2>&1 | awk '/h=/{print $1,$2,$3,$NF}'; }
LYCO_CUDA_RR=2 hb > $OUT/a.txt; LYCO_CUDA_RR=0 hb > $OUT/b.txt; echo "== hashes bypass RR=2 vs RR=0 (rows that differ):"; diff $OUT/a.txt $OUT/b.txt | grep -c "^<"; wc -l < $OUT/a.txt
LYCO_CUDA_RR=2 hb > $OUT/b.txt; cmp -s $OUT/a.txt $OUT/b.txt && echo "REPEATABLE" || echo "NOT REPEATABLE"
r=$(timeout 120 $L check --backend cuda --algo locon,dylora --dir merge_bwd --tier full --require-fused --seed 302 2>&1); echo "full tier locon,dylora merge_bwd: $(echo "$r" | tail -1)"; echo "$r" | grep " FAIL " | head -8
r=$(timeout 120 build-gpu/tests/test_cuda_locon_conv 2>&1); echo "test_cuda_locon_conv: $(echo "$r" | tail -1)"; echo "$r" | grep -E "FAIL|mb1" | grep -v "^ok.*merge_fwd\|^ok.*bypass" | head -24
h() { timeout 60 $L check --backend cuda --algo locon,dylora --dir merge_bwd --seed 303 --hash 2>&1 | awk '/h=/{print $1,$2,$3,$NF}'; }
h > $OUT/a.txt; LYCO_CUDA_MB1=0 h > $OUT/b.txt; echo "== hashes merge_bwd one-pass vs MB1=0 (rows that differ = rows the kernel took):"; diff $OUT/a.txt $OUT/b.txt | grep -c "^<"; wc -l < $OUT/a.txt
h > $OUT/b.txt; cmp -s $OUT/a.txt $OUT/b.txt && echo "REPEATABLE" || echo "NOT REPEATABLE"
for ns in 1 8; do r=$(LYCO_CUDA_MB1_NS=$ns timeout 60 $L check --backend cuda --algo locon --dir merge_bwd --require-fused --seed 303 2>&1 | tail -1); echo "NS=$ns: $r"; done
LYCO_CUDA_RR=2 timeout 90 compute-sanitizer --tool memcheck --print-limit 10 $L check --backend cuda --algo locon --dir merge_bwd,bypass_bwd --dtypes bf16 --seed 304 > $OUT/mc.txt 2>&1; grep -E "ERROR SUMMARY" $OUT/mc.txt; grep -E "passed" $OUT/mc.txt | tail -1
LYCO_CUDA_RR=2 timeout 90 compute-sanitizer --tool racecheck --print-limit 10 $L check --backend cuda --algo locon --dir bypass_bwd --dtypes bf16 --seed 309 > $OUT/rc.txt 2>&1; grep -E "RACECHECK SUMMARY|ERROR SUMMARY" $OUT/rc.txt; grep -E "passed" $OUT/rc.txt | tail -1
echo "== bench bf16 merge_bwd lora,dylora,conv: default / MB1=0 / NS=2 / NS=8 / NC=2, two rounds"
for rd in 1 2; do for v in "X=1" "LYCO_CUDA_MB1=0" "LYCO_CUDA_MB1_NS=2" "LYCO_CUDA_MB1_NC=2"; do
  env $v timeout 40 $L bench --backend cuda --algo lora,dylora,lora-conv --dir merge_bwd --quick > $OUT/b.txt 2>&1
  echo "-- $v round $rd"; grep -E "^(lora|dylora|lora-conv) " $OUT/b.txt | cut -c1-150
done; done
echo "== bench bf16 bypass lora,glora,dylora: default / RR=0 / RR_NS=2, two rounds"
for rd in 1 2; do for v in "X=1" "LYCO_CUDA_RR=0" "LYCO_CUDA_RR_NS=2"; do
  env $v timeout 60 $L bench --backend cuda --algo lora,glora,dylora --dir bypass_fwd,bypass_bwd --quick > $OUT/b.txt 2>&1
  echo "-- $v round $rd"; grep -E "^(lora|glora|dylora) " $OUT/b.txt | cut -c1-150
done; done
echo "== kernel times (ncu): lora bypass default and RR=0"
for v in "X=1"; do echo "-- $v"; env $v timeout 100 ncu --clock-control none --csv --page raw --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size $L bench --backend cuda --algo lora --dir bypass_fwd,bypass_bwd --quick --reps 3 > $OUT/ncu.csv 2> $OUT/ncu.err; python3 tools/ncu_summary.py $OUT/ncu.csv 2>&1 | head -24; done
echo "== kernel times (ncu): lora merge_bwd default and MB1=0"
for v in "X=1"; do echo "-- $v"; env $v timeout 100 ncu --clock-control none --csv --page raw --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size $L bench --backend cuda --algo lora --dir merge_bwd --dtypes bf16 --reps 3 > $OUT/ncu.csv 2> $OUT/ncu.err; python3 tools/ncu_summary.py $OUT/ncu.csv 2>&1 | head -20; done
timeout 90 ncu --clock-control none -k regex:k_merge_bwd_onepass -c 2 --section SpeedOfLight --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis $L bench --backend cuda --algo lora --dir merge_bwd --dtypes bf16 --reps 2 > $OUT/ncu2.txt 2>&1
grep -E "k_merge_bwd_onepass|Duration|DRAM Throughput|L2 Cache Throughput|L1/TEX Cache Throughput|Compute \(SM\)|Achieved Occupancy|Block Limit|Waves|Registers|Shared Memory Configuration Size|Dynamic Shared" $OUT/ncu2.txt | head -40
} 2>&1 | tee $OUT/summary.txt
rm -f $OUT/a.txt $OUT/b.txt $OUT/mc.txt $OUT/rc.txt $OUT/ncu.err
