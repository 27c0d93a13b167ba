# session 26, call 5: the CPU backend on the H200 host's 16 cores (CPU-only Release build of 47bdb46, carried)
C=build-carry/cpu16/lyco
{
lscpu | grep -E "Model name|^CPU\(s\)|L3" ; python3 -c "import torch; print('torch', torch.__version__)"
t0=$(date +%s); LYCO_TORCH_PYTHON=python3 timeout 260 $C bench --threads 1,2,16 --out $OUT/cpu16 > $OUT/cpu16-bench.txt 2>&1; echo "bench rc $? in $(( $(date +%s) - t0 )) s"
sed -n '/geomean\|summary\|Summary/,$p' $OUT/cpu16-bench.txt | head -80
r=$(OMP_NUM_THREADS=16 timeout 90 $C check --backend cpu --require-fused --seed 161 2>&1); echo "check cpu quick, 16 threads: $(echo "$r" | tail -1)"; echo "$r" | grep " FAIL " | head -5
} 2>&1 | tee $OUT/summary.txt
