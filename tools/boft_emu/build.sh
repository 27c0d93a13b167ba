#!/bin/bash
# tools/boft_emu/build.sh [OUTDIR] — builds emu (BG_BUDGET as in the source) and emu_s (8192-float
# budget: many chunks) from the current src/cuda/boft_group.cu.
set -e
here=$(cd "$(dirname "$0")" && pwd); out=${1:-/tmp/boft_emu}; mkdir -p "$out"
F="-std=c++20 -O1 -ffp-contract=off -Wno-unknown-pragmas -I$here/shim -I$here/../../src"
python3 "$here/mk.py" "$out/bg_emu.cpp"; python3 "$here/mk.py" "$out/bg_emu_s.cpp" 8192
for f in bg_emu bg_emu_s; do g++ $F -c "$out/$f.cpp" -o "$out/$f.o"; done
g++ $F -c "$here/emu_rt.cpp" -o "$out/emu_rt.o"; g++ $F -c "$here/test.cpp" -o "$out/test.o"
g++ -o "$out/emu" "$out/test.o" "$out/bg_emu.o" "$out/emu_rt.o" -pthread
g++ -o "$out/emu_s" "$out/test.o" "$out/bg_emu_s.o" "$out/emu_rt.o" -pthread
echo "built $out/emu $out/emu_s"
