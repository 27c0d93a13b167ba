# session 25, call 11: the landing CUDA code (flat LoKr merge kernel, the general halves build; expand_direct removed)
{
r=$(timeout 40 $L check --backend cuda --algo lokr --require-fused --seed 111 2>&1); echo "lokr quick: $(echo "$r" | tail -1)"; echo "$r" | grep " FAIL " | head -5
echo "hash lokr merge_fwd seed 93 (call 9/10: f1864b07…): $(timeout 30 $L check --backend cuda --algo lokr --dir merge_fwd --seed 93 --hash 2>&1 | grep -o 'h=[0-9a-f]*' | md5sum)"
timeout 30 $L bench --backend cuda --algo lokr --dir merge_fwd --dtypes bf16 > $OUT/b.txt 2>&1; grep -E "^lokr" $OUT/b.txt | cut -c1-175
r=$(timeout 130 $L check --backend cuda --require-fused --seed 112 2>&1); echo "every family, quick tier: $(echo "$r" | tail -1)"; echo "$r" | grep " FAIL " | head -5
} 2>&1 | tee $OUT/summary.txt
rm -f $OUT/b.txt
