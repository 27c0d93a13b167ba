#!/usr/bin/env bash
# gpu-peers.sh — the side-by-side peer bench (bench/peers.py, BENCH.md §5-§6) on the GPU machine,
# run from anywhere; works in the repository root. About 6 minutes on an H200 by default.
#   1. the prebuilt lyco: used as is when $LYCO_BUILD_DIR (default build-gpu/) already holds
#      liblyco.so (tools/gpu-tier.sh unpacked it earlier); otherwise tools/gpu-tier.sh itself
#      unpacks build-carry/prebuilt.tar.xz (LYCO_PREBUILT_TAR overrides) with every test step
#      skipped, so the unpacking and the jansson lookup live in one place;
#   2. lycoris-lora (and toml) from build-deps/wheels/ into build-deps/pylib/ when absent (the
#      device has no network; same pip command as gpu-tier.sh step 3c);
#   3. bench/peers.py --device cuda --out $OUT/peers ${LYCO_PEERS_ARGS} (e.g. "--full",
#      "--only lora_merge,ia3_bypass", "--arms lyco,eager"). LYCO_PEERS_TIMEOUT (default 570 s)
#      bounds this whole script: peers.py gets what is left (at most 360 s unless --full/--quick
#      is asked for; a --time-limit in LYCO_PEERS_ARGS wins) as --time-limit (it stops starting
#      rows and first-call processes in time, and its first-call processes carry their own
#      timeouts) and runs under `timeout` 15 s beyond that as the last resort; it rewrites
#      results.json and table.md after every row, so even a killed run keeps its rows.
# Output: $OUT/peers/{table.md,results.json,peers.log,*.png}; OUT defaults to ./gpu-peers-out.
# Exit status: peers.py's (0; 1 when a row's lyco and eager results disagree; 124 on timeout;
# 2 when the prerequisites are missing).
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-peers-out}"
P="$OUT/peers"
mkdir -p "$P"
BUILD="${LYCO_BUILD_DIR:-build-gpu}"
t0=$(date +%s)
say() { echo "== gpu-peers: $* ($(($(date +%s) - t0)) s)" | tee -a "$P/peers.log"; }
: >"$P/peers.log"

# ---- 1. the prebuilt library ----
if [ ! -f "$BUILD/liblyco.so" ]; then
    TAR="${LYCO_PREBUILT_TAR:-build-carry/prebuilt.tar.xz}"
    [ -f "$TAR" ] || { say "no $BUILD/liblyco.so and no $TAR: build or carry lyco first"; exit 2; }
    say "unpacking $TAR into $BUILD through tools/gpu-tier.sh (its test steps skipped)"
    OUT="$OUT/tier-unpack" LYCO_BUILD_DIR="$BUILD" LYCO_PREBUILT_TAR="$TAR" LYCO_SKIP_CHECK=1 \
        LYCO_SKIP_SANITIZERS=1 LYCO_SKIP_BENCH=1 LYCO_SKIP_DDP=1 LYCO_SKIP_PYTHON=1 \
        timeout -k 10 300 bash tools/gpu-tier.sh >>"$P/peers.log" 2>&1
    [ -f "$BUILD/liblyco.so" ] || { say "unpacking failed (see $P/peers.log)"; exit 2; }
fi
# liblyco.so needs libjansson: the GPU image has none, build-deps/ carries it (gpu-tier.sh --stage-deps)
if ! pkg-config --exists jansson 2>/dev/null && [ -d build-deps/lib ]; then
    export LD_LIBRARY_PATH="$PWD/build-deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
say "lyco library $BUILD/liblyco.so"

# ---- 2. lycoris-lora ----
if ls build-deps/wheels/*.whl >/dev/null 2>&1 && [ ! -d build-deps/pylib ]; then
    say "installing build-deps/wheels/*.whl into build-deps/pylib"
    timeout -k 10 300 python3 -m pip install -q --no-deps --no-index --target "$PWD/build-deps/pylib" \
        build-deps/wheels/*.whl >>"$P/peers.log" 2>&1 || say "the wheels did not install (see $P/peers.log)"
fi
export PYTHONPATH="$PWD/build-deps/pylib:$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
export LYCO_LIBRARY="$PWD/$BUILD/liblyco.so"
[ -z "${LYCO_GIT_COMMIT:-}" ] && [ -f build-carry/prebuilt.commit ] && LYCO_GIT_COMMIT="$(cat build-carry/prebuilt.commit) (prebuilt)"
export LYCO_GIT_COMMIT="${LYCO_GIT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo "?")$(git diff --quiet 2>/dev/null || echo "+local changes")}"
if ! timeout 120 python3 -c "import torch, lycoris, lyco; assert torch.cuda.is_available(), 'no CUDA device'" >>"$P/peers.log" 2>&1; then
    say "python3 cannot import torch + lycoris + lyco with a CUDA device (see $P/peers.log)"
    tail -n 5 "$P/peers.log"
    exit 2
fi
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1 | tee -a "$P/peers.log"

# ---- 3. the bench ----
# peers.py's own default limit for the default rows is 360 s; never more than this script has left
left=$(( ${LYCO_PEERS_TIMEOUT:-570} - ($(date +%s) - t0) - 20 ))
[ "$left" -lt 60 ] && left=60
tl=$left
case " ${LYCO_PEERS_ARGS:-} " in *" --full "*|*" --quick "*) ;; *) [ "$tl" -gt 360 ] && tl=360 ;; esac
say "bench/peers.py --device cuda --out $P --time-limit $tl ${LYCO_PEERS_ARGS:-}"
timeout -k 10 $((left + 15)) python3 -u bench/peers.py --device cuda --out "$P" --time-limit "$tl" ${LYCO_PEERS_ARGS:-} 2>&1 | tee -a "$P/peers.log"
rc=${PIPESTATUS[0]}
[ "$rc" = 124 ] && say "TIMED OUT after $((left + 15)) s: table.md/results.json hold the rows finished before"
python3 -c "import matplotlib" 2>/dev/null || say "no matplotlib here: plot later with 'bench/peers.py --plot $P/results.json'"
say "done: exit $rc; $P/table.md"
exit "$rc"
