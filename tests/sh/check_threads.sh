#!/bin/sh
# check_threads.sh LYCO [check args...] — the CPU backend's results do not depend on the thread
# count: `lyco check --backend cpu` at OMP_NUM_THREADS=1 and 3 on the same fresh seed must print the
# same table (every column but the time). The seed is printed; rerun with LYCO_SEED=<seed>.
set -u
lyco="$1"
shift
seed="${LYCO_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}"
echo "check_threads: seed $seed (rerun with LYCO_SEED=$seed)"
tmp="${TMPDIR:-/tmp}/lyco-check-threads.$$"
mkdir -p "$tmp" || exit 1
trap 'rm -rf "$tmp"' EXIT
for t in 1 3; do
    # drop the ms column (field 8) — the only one allowed to differ
    OMP_NUM_THREADS=$t "$lyco" check --backend cpu --seed "$seed" "$@" >"$tmp/raw$t" 2>&1
    rc=$?
    [ "$rc" -eq 0 ] || { echo "check_threads: lyco check failed at $t threads (exit $rc)"; tail -5 "$tmp/raw$t"; exit 1; }
    awk '$2 ~ /^(merge|bypass)_/ { $8 = ""; print }' "$tmp/raw$t" >"$tmp/t$t"
done
n=$(wc -l <"$tmp/t1")
[ "$n" -gt 0 ] || { echo "check_threads: no table rows"; exit 1; }
if ! cmp -s "$tmp/t1" "$tmp/t3"; then
    echo "check_threads: results differ between 1 and 3 threads:"
    diff "$tmp/t1" "$tmp/t3" | head -20
    exit 1
fi
echo "check_threads: $n rows identical at 1 and 3 threads"
