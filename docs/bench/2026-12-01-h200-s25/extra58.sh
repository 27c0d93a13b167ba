# session 25, call 8: stream_probe at non-power-of-two row pitches (does the tile kernels' loss follow the 8 KB pitch?)
{
for s in "4096 5120" "8192 3072" "8192 4096" "6144 5120"; do build-carry/stream_probe $s; done
} 2>&1 | tee $OUT/summary.txt
