# session 24, call 9: the review refactor (doft_epi, LoKr dy0 through lk_copy_round)
{
r=$(timeout 40 $L check --backend cuda --algo diag_oft,lokr --require-fused --seed 99 2>&1); echo "diag_oft,lokr quick: $(echo "$r" | tail -1)"; echo "$r" | grep " FAIL " | head -3
r=$(LYCO_CUDA_OFT_TC=0 timeout 30 $L check --backend cuda --algo diag_oft --require-fused --seed 99 2>&1); echo "diag_oft OFT_TC=0: $(echo "$r" | tail -1)"
} 2>&1 | tee $OUT/summary.txt
