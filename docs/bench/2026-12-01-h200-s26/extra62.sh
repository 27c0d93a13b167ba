# session 26, call 1: the stream probe's new patterns (column strips, row walks, 2-D tiles through registers);
# kernel tables of LoRA's bypass forward / backward and merge backward (bf16) at the landing code
{
for sz in "4096 4096" "8192 4096" "11008 4096"; do for rd in 1 2; do echo "== probe $sz round $rd"; timeout 30 build-carry/stream_probe $sz; done; done
for d in bypass_fwd bypass_bwd merge_bwd; do
echo "== ncu kernel table, lora $d bf16"
timeout 120 ncu --clock-control none --csv --page raw --metrics gpu__time_duration.sum,launch__grid_size,dram__throughput.avg.pct_of_peak_sustained_elapsed \
    -c 80 $L bench --backend cuda --algo lora --dir $d --dtypes bf16 --reps 2 > $OUT/ncu.csv 2> /dev/null
python3 tools/ncu_rows.py $OUT/ncu.csv 2>&1 | tail -30
done
} 2>&1 | tee $OUT/summary.txt
rm -f $OUT/ncu.csv
