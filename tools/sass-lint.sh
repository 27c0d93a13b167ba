#!/bin/sh
# sass-lint.sh LIB — scans the machine code (SASS) of every kernel in LIB (liblyco.so built with the
# CUDA backend) for instruction patterns that are known miscompilations, and fails naming the
# kernels. Runs where the CUDA code is built; no GPU needed (ctest "sass_lint", quick tier).
#
# Pattern 1, F2I.U8 / F2I.S8: ptxas 13.0 compiles `st.u8 [p], %rs` of a 16-bit register holding a
# cvt.rn.bf16.f32 / cvt.rn.f16.f32 result as a numeric conversion of that bf16/fp16 value to an
# 8-bit integer instead of taking its low byte. lyco never converts a float to an 8-bit integer, so
# any such instruction is this bug (src/cuda/common.cuh st_elem, which wrote the unaligned 16-bit
# outputs of k_dx_halo and k_y<bf16> with wrong low bytes before the fix).
#
# Needs cuobjdump and nvdisasm: next to nvcc, on PATH, or in .cuda-tools/ (tools/install-deps.sh
# --cuda-tools fetches NVIDIA's two PyPI wheels there when nvcc comes without them). Without them it
# says so and exits 77 (ctest: skipped).
set -eu
lib=${1:?usage: sass-lint.sh path/to/liblyco.so}
root=$(cd "$(dirname "$0")/.." && pwd)
for d in "$(dirname "$(command -v nvcc 2>/dev/null || echo /nonexistent/nvcc)")" "$root/.cuda-tools/bin"; do
    [ -x "$d/cuobjdump" ] && [ -x "$d/nvdisasm" ] && PATH="$d:$PATH"
done
if ! command -v cuobjdump >/dev/null 2>&1 || ! command -v nvdisasm >/dev/null 2>&1; then
    echo "sass-lint: SKIP: cuobjdump/nvdisasm not found (tools/install-deps.sh --cuda-tools installs them)"
    exit 77
fi
[ -f "$lib" ] || { echo "sass-lint: $lib: no such file"; exit 2; }
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
if ! cuobjdump -sass "$lib" > "$tmp" 2>&1; then
    if grep -q "does not contain device code" "$tmp"; then
        echo "sass-lint: SKIP: $lib has no device code (built without CUDA)"
        exit 77
    fi
    cat "$tmp"; exit 2
fi
kernels=$(grep -c "Function :" "$tmp" || true)
bad=$(awk '/Function :/ { fn = $3 } /F2I\.(U8|S8)/ { n[fn]++ } END { for (f in n) print n[f], f }' "$tmp")
if [ -n "$bad" ]; then
    echo "sass-lint: FAIL: float → 8-bit integer conversions (the ptxas st.u8 miscompile, see this script's header) in:"
    echo "$bad"
    exit 1
fi
echo "sass-lint: $kernels kernels scanned, no known miscompilation pattern"
