# session 29, call 3: the landing CUDA code — every family quick tier, hashes, whole bench bf16 with first-call latency
{
echo "commit $(cat build-carry/prebuilt.commit 2>/dev/null)"; nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
r=$(timeout 200 $L check --backend cuda --require-fused --seed 211 2>&1); echo "every family, quick tier, --require-fused: $(echo "$r" | tail -1)"; echo "$r" | grep " FAIL " | head -8
h() { timeout 60 $L check --backend cuda --algo $1 --dir merge_fwd --seed 213 --hash 2>&1 | awk '/h=/{print $1,$2,$3,$NF}'; }
ab() { cmp -s $OUT/a.txt $OUT/b.txt && echo "EQUAL ($(wc -l < $OUT/a.txt) rows)" || { echo "DIFFER"; diff $OUT/a.txt $OUT/b.txt | head -6; }; }
echo "== hashes: locon (DoRA rows) default vs DORA_SLAB=0; lokr default vs MF_FUSED=0, MF_BPS=4, MF_BPS=8"
h locon > $OUT/a.txt; LYCO_CUDA_DORA_SLAB=0 h locon > $OUT/b.txt; ab
h lokr > $OUT/a.txt; for v in LYCO_CUDA_LOKR_MF_FUSED=0 LYCO_CUDA_LOKR_MF_BPS=4 LYCO_CUDA_LOKR_MF_BPS=8; do env $v bash -c "true"; export $v; h lokr > $OUT/b.txt; unset ${v%%=*}; ab; done
echo "== memcheck: lokr, locon merge_fwd"
timeout 80 compute-sanitizer --tool memcheck --print-limit 10 $L check --backend cuda --algo locon,lokr --dir merge_fwd --dtypes bf16,fp16 --seed 214 > $OUT/mc.txt 2>&1; grep -E "ERROR SUMMARY" $OUT/mc.txt; grep -E "passed" $OUT/mc.txt | tail -1
echo "== whole GPU bench, quick, bf16, first call"
timeout 240 $L bench --backend cuda --quick --first-call --dtypes bf16 --csv $OUT/bench-bf16.csv > $OUT/bench-bf16.txt 2>&1; echo "rc=$?"; grep -vE "^ *$" $OUT/bench-bf16.txt | cut -c1-170 | head -120
} 2>&1 | tee $OUT/summary.txt
rm -f $OUT/a.txt $OUT/b.txt $OUT/mc.txt
