#!/bin/sh
# gemm_isa.sh TEST_GEMM — the CPU GEMM at every instruction-set level this machine has
# (LYCO_CPU_ISA=base, v3, v4; a level the CPU lacks runs the highest it has): each run passes
# test_gemm's own checks (error bound, split and thread invariance), and the v3 and v4 runs print
# the same digest of their nn/nt/tn results (both sum each element in one FMA chain over k; nt
# runs the same 8-lane dot products on both — v4's packed column pairs hold the same chains). One seed
# for all runs, printed; rerun with LYCO_SEED=<seed>.
set -u
t="$1"
seed="${LYCO_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}"
echo "gemm_isa: seed $seed (rerun with LYCO_SEED=$seed)"
for isa in base v3 v4; do
    out=$(LYCO_SEED=$seed LYCO_CPU_ISA=$isa "$t" 2>&1)
    rc=$?
    echo "$out" | grep -E '^(isa|nn/nt/tn|FAIL|[0-9]+ shapes)'
    [ "$rc" -eq 0 ] || { echo "gemm_isa: FAIL at LYCO_CPU_ISA=$isa (exit $rc)"; exit 1; }
    eval "ran_$isa=\$(echo \"\$out\" | sed -n 's/^isa: //p')"
    eval "dig_$isa=\$(echo \"\$out\" | sed -n 's/^nn\/nt\/tn digest: //p')"
done
# shellcheck disable=SC2154
if [ "$ran_v3" = v3 ] && [ "$dig_v3" != "$dig_v4" ]; then
    echo "gemm_isa: FAIL: nn/nt/tn results differ between $ran_v3 ($dig_v3) and $ran_v4 ($dig_v4)"
    exit 1
fi
echo "gemm_isa: ok (ran base, $ran_v3, $ran_v4)"
