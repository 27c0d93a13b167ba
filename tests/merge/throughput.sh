#!/usr/bin/env bash
# throughput.sh — the merge tool's throughput target (docs/merge.md "Throughput"), in one run on
# one disk: a ≥ 2 GiB fp16 checkpoint + a LoRA (tests/merge/make_big.py), then
#   1. copy:     dd the checkpoint to a new file on the same disk, fsync'd (conv=fsync)
#   2. lyco:     lyco merge BASE LORA -o OUT (fsync, rename, directory fsync, re-read verification)
#   3. upstream: tests/merge/upstream_merge.py (load_file, create_lycoris_from_weights, merge_to,
#                save_file) followed by sync, since save_file does not fsync
# each under /usr/bin/time -v (wall time, peak RSS). The copy and lyco steps alternate three times
# (the disk of a shared VM is noisy) and their medians are compared; upstream runs once (it is the
# slow one). Page cache: the inputs were just written, so every step reads them from the cache
# alike; the writes go to disk (fsync/sync).
# Usage: tests/merge/throughput.sh LYCO_BINARY PYTHON [DIR]   (DIR default: out/bench-merge)
set -euo pipefail
LYCO=$1; PY=$2; DIR=${3:-$(dirname "$0")/../../out/bench-merge}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$DIR"
[ -f "$DIR/big_base.safetensors" ] || "$PY" "$HERE/make_big.py" "$DIR"
sync
BYTES=$(stat -c %s "$DIR/big_base.safetensors")
echo "filesystem: $(df -T "$DIR" | awk 'NR==2 {print $2, $1}'); base $BYTES bytes; $(nproc) cores; $(date -u +%FT%TZ)"
step() {   # name, command...
    local name=$1; shift
    rm -f "$DIR/step.time"
    /usr/bin/time -v -o "$DIR/step.time" "$@" > "$DIR/$name.log" 2>&1 || { echo "$name failed:"; tail -5 "$DIR/$name.log"; exit 1; }
    local wall rss
    wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {n=split($2,a,":"); s=0; for(i=1;i<=n;i++) s=s*60+a[i]; print s}' "$DIR/step.time")
    rss=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$DIR/step.time")
    awk -v n="$name" -v w="$wall" -v r="$rss" -v b="$BYTES" 'BEGIN {printf "%-9s wall %7.2f s  %7.1f MiB/s  peak RSS %7.1f MiB\n", n, w, b/w/1048576, r/1024}'
    echo "$wall" > "$DIR/$name.wall"
}
for r in 1 2 3; do
    rm -f "$DIR/copy.safetensors" "$DIR/merged.safetensors"
    sync
    step copy$r dd if="$DIR/big_base.safetensors" of="$DIR/copy.safetensors" bs=16M conv=fsync status=none
    rm -f "$DIR/copy.safetensors"
    sync
    step lyco$r "$LYCO" merge "$DIR/big_base.safetensors" "$DIR/big_lora.safetensors" -o "$DIR/merged.safetensors" --progress=none
done
rm -f "$DIR/upstream.safetensors"
sync
step upstream bash -c "'$PY' '$HERE/upstream_merge.py' '$DIR/big_base.safetensors' '$DIR/big_lora.safetensors' 1.0 '$DIR/upstream.safetensors' && sync"
C=$(cat "$DIR"/copy?.wall | tr ' ' '\n' | sort -g | sed -n 2p)
L=$(cat "$DIR"/lyco?.wall | tr ' ' '\n' | sort -g | sed -n 2p)
U=$(cat "$DIR/upstream.wall")
awk -v c="$C" -v l="$L" -v u="$U" -v b="$BYTES" 'BEGIN {printf "medians: copy %.2f s (%.1f MiB/s), lyco merge %.2f s (%.1f MiB/s): %.0f%% of the copy throughput; upstream %.2f s: lyco is %.2fx faster\n", c, b/c/1048576, l, b/l/1048576, 100*c/l, u, u/l}'
