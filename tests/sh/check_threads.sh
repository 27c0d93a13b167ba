#!/bin/sh
# check_threads.sh LYCO [check args...] — the CPU backend's results do not depend on the thread
# count: `lyco check --backend cpu --hash` at OMP_NUM_THREADS=1 and 3 on the same fresh seed must
# print the same table (every column but the time; --hash adds each row's hash of the output values,
# so a difference in any bit fails, not only one the ULP columns show). The seed is printed; rerun
# with LYCO_SEED=<seed>. LYCO_CHECK_THREADS: the thread counts compared (default "1 3").
# LYCO_CHECK_VARY="VAR=a VAR=b …" compares those settings instead of thread counts (e.g. the
# instruction-set levels: LYCO_CHECK_VARY="LYCO_CPU_ISA=v3 LYCO_CPU_ISA=v4").
set -u
lyco="$1"
shift
seed="${LYCO_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}"
echo "check_threads: seed $seed (rerun with LYCO_SEED=$seed)"
tmp="${TMPDIR:-/tmp}/lyco-check-threads.$$"
mkdir -p "$tmp" || exit 1
trap 'rm -rf "$tmp"' EXIT
threads="${LYCO_CHECK_THREADS:-1 3}"
vary="${LYCO_CHECK_VARY:-}"
[ -n "$vary" ] && threads=$vary
for t in $threads; do
    # drop the ms column (field 8) — the only one allowed to differ
    if [ -n "$vary" ]; then
        env "$t" "$lyco" check --backend cpu --hash --seed "$seed" "$@" >"$tmp/raw$t" 2>&1
    else
        OMP_NUM_THREADS=$t "$lyco" check --backend cpu --hash --seed "$seed" "$@" >"$tmp/raw$t" 2>&1
    fi
    rc=$?
    [ "$rc" -eq 0 ] || { echo "check_threads: lyco check failed at $t threads (exit $rc)"; tail -5 "$tmp/raw$t"; exit 1; }
    awk '$2 ~ /^(merge|bypass)_/ { $8 = ""; print }' "$tmp/raw$t" >"$tmp/t$t"
done
first=${threads%% *}
n=$(wc -l <"$tmp/t$first")
[ "$n" -gt 0 ] || { echo "check_threads: no table rows"; exit 1; }
for t in $threads; do
    if ! cmp -s "$tmp/t$first" "$tmp/t$t"; then
        echo "check_threads: results differ between $first and $t threads:"
        diff "$tmp/t$first" "$tmp/t$t" | head -20
        exit 1
    fi
done
[ -n "$vary" ] && echo "check_threads: $n rows identical under $threads" || echo "check_threads: $n rows identical at $(echo $threads | sed "s/ /, /g") threads"
