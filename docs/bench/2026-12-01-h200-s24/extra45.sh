# session 24, call 2: copy_round vectorised, gemm epilogue, lk_gemm_split, loha fs tc refinements
{
echo "== check loha bypass FS_TC default/1/0, seed 71"
for v in "" 1 0; do
  r=$(LYCO_CUDA_LOHA_FS_TC=$v timeout 60 $L check --backend cuda --algo loha --dir bypass_fwd,bypass_bwd --require-fused --seed 71 2>&1)
  echo "FS_TC='$v': $(echo "$r" | tail -1)"; echo "$r" | grep " FAIL " | head -8
done
echo "== diag_oft / boft, default and LYCO_CUDA_OFT_TC=0, seeds 75 76"
for sd in 75 76; do for v in "" 0; do
  r=$(LYCO_CUDA_OFT_TC=$v timeout 60 $L check --backend cuda --algo diag_oft,boft --require-fused --seed $sd 2>&1)
  echo "seed $sd OFT_TC='$v': $(echo "$r" | tail -1)"; echo "$r" | grep " FAIL " | head -8
done; done
echo "== diag_oft full tier merge_fwd"; timeout 60 $L check --backend cuda --algo diag_oft --dir merge_fwd --tier full --require-fused --seed 77 2>&1 | tail -1
echo "== memcheck+racecheck diag_oft merge_fwd"; timeout 60 compute-sanitizer --tool memcheck $L check --backend cuda --algo diag_oft --dir merge_fwd --seed 78 > $OUT/mc2.txt 2>&1; grep -E "ERROR SUMMARY" $OUT/mc2.txt; tail -1 $OUT/mc2.txt
timeout 60 compute-sanitizer --tool racecheck $L check --backend cuda --algo diag_oft --dir merge_fwd --dtypes bf16 --seed 78 > $OUT/rc2.txt 2>&1; grep -E "RACECHECK SUMMARY|ERROR SUMMARY" $OUT/rc2.txt; rm -f $OUT/mc2.txt $OUT/rc2.txt
echo "== bench diag_oft: default, then OFT_TC=0"
timeout 60 $L bench --backend cuda --algo diag_oft --dtypes bf16 2>&1 | grep -E "^diag" | cut -c1-175
LYCO_CUDA_OFT_TC=0 timeout 60 $L bench --backend cuda --algo diag_oft --dir merge_fwd --dtypes bf16 2>&1 | grep -E "^diag" | cut -c1-175
echo "== quick tier all, seed 72"; r=$(timeout 150 $L check --backend cuda --require-fused --seed 72 2>&1); echo "$r" | tail -1; echo "$r" | grep " FAIL " | head
echo "== test_cuda_device"; LYCO_SEED=73 timeout 100 build-gpu/tests/test_cuda_device 2>&1 | tail -1
echo "== memcheck loha+lokr bypass_bwd bf16 (copy_round8)"; timeout 150 compute-sanitizer --tool memcheck --print-limit 10 $L check --backend cuda --algo loha,lokr,dylora --dir bypass_bwd --dtypes bf16 --seed 74 > $OUT/mc.txt 2>&1; grep -E "ERROR SUMMARY" $OUT/mc.txt; grep -E "passed" $OUT/mc.txt | tail -1
echo "== bench (bf16): loha, lokr, dora, glora, lora"
timeout 200 $L bench --backend cuda --algo loha,lokr,dora,lora,glora --dtypes bf16 > $OUT/bench.txt 2>&1; grep -E "^(loha|lokr|dora|lora|glora) " $OUT/bench.txt | cut -c1-175; grep -A30 "^geomean" $OUT/bench.txt | head -30
echo "== ncu kernels of the fs-tc bypass (fwd, bwd)"
for d in bypass_fwd bypass_bwd; do
timeout 60 ncu --clock-control none --csv --page raw --metrics gpu__time_duration.sum,launch__grid_size,dram__throughput.avg.pct_of_peak_sustained_elapsed \
    -k regex:'k_fs|k_gemm|k_copy|k_tc|k_loha' -c 30 $L bench --backend cuda --algo loha --dir $d --dtypes bf16 --reps 2 > $OUT/ncu.csv 2> /dev/null
echo "-- $d"; python3 tools/ncu_rows.py $OUT/ncu.csv 2>&1 | tail -14
done
} 2>&1 | tee $OUT/summary.txt
rm -f $OUT/ncu.csv
{
echo "== ncu diag_oft merge_fwd kernels (default)"
timeout 60 ncu --clock-control none --csv --page raw --metrics gpu__time_duration.sum,launch__grid_size,dram__throughput.avg.pct_of_peak_sustained_elapsed \
    -k regex:'k_cay|k_doft|k_sum|k_copy|oft' -c 40 $L bench --backend cuda --algo diag_oft --dtypes bf16 --reps 2 > $OUT/ncu.csv 2> /dev/null
python3 tools/ncu_rows.py $OUT/ncu.csv 2>&1 | tail -10
echo "== boft bench"; timeout 60 $L bench --backend cuda --algo boft --dtypes bf16 2>&1 | grep -E "^boft" | cut -c1-175
} 2>&1 | tee -a $OUT/summary.txt
rm -f $OUT/ncu.csv
