# session 25, call 5: tools/stream_probe.cu with the tile shapes and the persistent two-stage structure
{
chmod +x build-carry/stream_probe
for s in "4096 4096" "8192 4096" "11008 4096"; do build-carry/stream_probe $s; done
} 2>&1 | tee $OUT/summary.txt
