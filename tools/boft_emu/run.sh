#!/bin/bash
# tools/boft_emu/run.sh EMU < cases — one case per line:
#   b nb M ncol dtype ct layout delta rho [sms [want_dB]]
# dtype/ct: 0 fp16, 1 bf16, 2 fp32; layout: 0 columns fastest (merge), 1 rows fastest (bypass),
# 2 conv-like (N, O, 5 positions). Exit 1 if any case fails.
fail=0
while read -r line; do
  [ -z "$line" ] && continue
  out=$(timeout 900 "$1" $line 2>&1); rc=$?
  echo "[$line] rc=$rc $(echo "$out" | tr '\n' ' ')"
  [ $rc -ne 0 ] && fail=1
done
exit $fail
