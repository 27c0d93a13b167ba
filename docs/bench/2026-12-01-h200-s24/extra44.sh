# session 24, call 1: LoHa's face-splitting bypass on the tensor cores (loha_fs.cu), correctness and A/B
{
echo "== check loha bypass, default rule, FS_TC=1 (pinned), FS_TC=0 (dense), two seeds"
for sd in 61 62; do
  for v in "" 1 0; do
    r=$(LYCO_CUDA_LOHA_FS_TC=$v timeout 60 $L check --backend cuda --algo loha --dir bypass_fwd,bypass_bwd --require-fused --seed $sd 2>&1)
    echo "seed $sd FS_TC='$v': $(echo "$r" | tail -1)"; echo "$r" | grep " FAIL " | head -8
  done
done
echo "== whole loha tier (all dirs) default, seed 63"; timeout 60 $L check --backend cuda --algo loha --require-fused --seed 63 2>&1 | tail -1
echo "== full tier loha bypass FS_TC=1"; LYCO_CUDA_LOHA_FS_TC=1 timeout 90 $L check --backend cuda --algo loha --dir bypass_fwd,bypass_bwd --tier full --require-fused --seed 64 2>&1 | tail -1
echo "== determinism (hash twice, FS_TC=1)"
for i in 1 2; do LYCO_CUDA_LOHA_FS_TC=1 timeout 60 $L check --backend cuda --algo loha --dir bypass_fwd,bypass_bwd --seed 65 --hash 2>&1 | grep -o 'h=[0-9a-f]*' | md5sum; done
echo "== memcheck FS_TC=1 bf16"; LYCO_CUDA_LOHA_FS_TC=1 timeout 120 compute-sanitizer --tool memcheck --print-limit 10 $L check --backend cuda --algo loha --dir bypass_fwd,bypass_bwd --dtypes bf16 --seed 66 > $OUT/mc.txt 2>&1; grep -E "ERROR SUMMARY" $OUT/mc.txt; grep -E "passed" $OUT/mc.txt | tail -1
echo "== bench loha bypass bf16: default (fs tc) then FS_TC=0 (dense), same process order"
timeout 90 $L bench --backend cuda --algo loha --dtypes bf16 > $OUT/bench-fs.txt 2>&1; grep -E "^loha" $OUT/bench-fs.txt | cut -c1-175
LYCO_CUDA_LOHA_FS_TC=0 timeout 90 $L bench --backend cuda --algo loha --dir bypass_fwd,bypass_bwd --dtypes bf16 > $OUT/bench-dense.txt 2>&1; grep -E "^loha" $OUT/bench-dense.txt | cut -c1-175
echo "== ncu kernels of the fs-tc bypass (fwd, bwd)"
for d in bypass_fwd bypass_bwd; do
timeout 60 ncu --clock-control none --csv --page raw --metrics gpu__time_duration.sum,launch__grid_size,dram__throughput.avg.pct_of_peak_sustained_elapsed \
    -c 40 $L bench --backend cuda --algo loha --dir $d --dtypes bf16 --reps 2 > $OUT/ncu.csv 2> /dev/null
echo "-- $d"; python3 tools/ncu_rows.py $OUT/ncu.csv 2>&1 | tail -14
done
echo "== quick tier all (default)"; timeout 120 $L check --backend cuda --require-fused --seed 67 2>&1 | tail -1
} 2>&1 | tee $OUT/summary.txt
rm -f $OUT/ncu.csv
