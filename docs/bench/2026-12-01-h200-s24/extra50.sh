# session 24, call 7: the GPU tier at the session's final CUDA code (prebuilt), bench tables kept
T=$OUT/tier
LYCO_PREBUILT_TAR=build-carry/prebuilt.tar.xz OUT=$T LYCO_SKIP_PYTHON=1 LYCO_SKIP_DDP=1 LYCO_SKIP_MERGE=1 timeout 520 bash tools/gpu-tier.sh > $OUT/tier-stdout.txt 2>&1
echo "tier exit $?" >> $OUT/tier-stdout.txt
cp $T/gpu-tier.log $OUT/ 2>/dev/null; cp $T/bench.txt $OUT/ 2>/dev/null; cp $T/bench.csv $OUT/ 2>/dev/null
grep -E " FAIL " $T/check.txt 2>/dev/null | head -20 > $OUT/fails.txt
tail -40 $OUT/tier-stdout.txt > $OUT/summary.txt
rm -rf $T
