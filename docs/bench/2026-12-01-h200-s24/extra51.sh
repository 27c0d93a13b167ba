# session 24, call 8: the committed state (cf kernel back at 2 blocks per SM)
{
r=$(timeout 60 $L check --backend cuda --algo diag_oft,loha --require-fused --seed 97 2>&1); echo "diag_oft,loha quick: $(echo "$r" | tail -1)"; echo "$r" | grep " FAIL " | head -3
timeout 60 $L check --backend cuda --algo diag_oft --dir bypass_fwd --tier full --require-fused --seed 98 2>&1 | tail -1
timeout 60 $L bench --backend cuda --algo diag-oft --dtypes bf16 2>&1 | grep -E "^diag" | cut -c1-175
} 2>&1 | tee $OUT/summary.txt
