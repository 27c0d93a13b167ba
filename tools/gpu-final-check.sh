#!/usr/bin/env bash
# gpu-final-check.sh — a short verification + bench of the LoRA / conv LoCon paths on a GPU machine
# (about 4 minutes; for the end of a session with little device time left; the whole tier is
# tools/gpu-tier.sh): check --algo locon,dylora, the conv and device tests, the opt-in conv dx
# halo path's check, and the quick LoRA / DoRA / conv bench with the conv A/B switches.
# Prebuilt binaries from build-carry/prebuilt.tar.xz (gpu-tier.sh --pack-prebuilt). Output in $OUT.
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/final-out}"; mkdir -p "$OUT"
B=build-gpu; mkdir -p $B; xz -dc build-carry/prebuilt.tar.xz | tar -xf - -C $B
export LD_LIBRARY_PATH="$PWD/build-deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
L=$B/lyco; S=${LYCO_SEED:-20261129}
$L check --backend cuda --algo locon,dylora --seed $S > $OUT/check.txt 2>&1; echo "check locon,dylora: $(tail -1 $OUT/check.txt)"; grep " FAIL " $OUT/check.txt | head -5
LYCO_SEED=$S $B/tests/test_cuda_locon_conv > $OUT/conv.txt 2>&1; echo "test_cuda_locon_conv: $(tail -1 $OUT/conv.txt)"; grep "^FAIL" $OUT/conv.txt | head -5
LYCO_SEED=$S $B/tests/test_cuda_device > $OUT/device.txt 2>&1; echo "test_cuda_device: $(tail -1 $OUT/device.txt)"; grep "^FAIL" $OUT/device.txt | head -5
LYCO_CUDA_CONV_DXHALO=1 $L check --backend cuda --algo locon --seed $S > $OUT/check-dxhalo.txt 2>&1; echo "check locon with LYCO_CUDA_CONV_DXHALO=1: $(tail -1 $OUT/check-dxhalo.txt)"
$L bench --backend cuda --algo lora,dora,lora-conv --quick --seed $S --json $OUT/bench.json > $OUT/bench.txt 2>&1
grep -E "^(lora|dora|lora-conv) " $OUT/bench.txt | awk -F'|' '{print $1 "|" $3 "|" $4}' | cut -c1-150
LYCO_CUDA_CONV_TC1=1 $L bench --backend cuda --algo lora-conv --quick --dir bypass_fwd,bypass_bwd --seed $S > $OUT/bench-conv-tc1.txt 2>&1
LYCO_CUDA_CONV_DXHALO=1 $L bench --backend cuda --algo lora-conv --quick --dir bypass_bwd --seed $S > $OUT/bench-conv-dxhalo.txt 2>&1
echo "conv, round 1 gathers (LYCO_CUDA_CONV_TC1=1) / dx halo (LYCO_CUDA_CONV_DXHALO=1):"
grep -hE "^lora-conv " $OUT/bench-conv-tc1.txt $OUT/bench-conv-dxhalo.txt | awk -F'|' '{print $1 "|" $3 "|" $4}' | cut -c1-150
$L bench --backend cuda --algo lora --dtypes bf16 --seed $S > $OUT/bench-lora-ranks.txt 2>&1
grep -E "^lora " $OUT/bench-lora-ranks.txt | awk -F'|' '{print $1 "|" $3 "|" $4}' | cut -c1-150
