#!/usr/bin/env bash
# gpu-tier.sh — the GPU tier of lyco's tests (DESIGN.md §6), in one run on a machine with an
# NVIDIA GPU (written for the H200; about 5–8 minutes):
#   1. configure + build the `lyco` command for sm_90 with warnings as errors (build-gpu/;
#      LYCO_BUILD_DIR and LYCO_CUDA_ARCH override; LYCO_PREBUILT=path/to/lyco skips the build);
#   2. nvidia-smi;
#   3. `lyco check --backend cuda` over every algorithm and dtype row of the quick tier: every case
#      must pass; cases the backend declines run the eager twin on host copies (path report says
#      why) and must pass its budget; the families in LYCO_FUSED_ALGOS must never fall back;
#   4. determinism: the fused families' check twice with the same seed, tables compared (the
#      bench in step 6 also runs each row twice on the same inputs and compares outputs bit for
#      bit);
#   3c. the Python binding's tests (pytest) on the device when torch is there;
#   5. compute-sanitizer memcheck and racecheck on the fused families (16-bit rows);
#   6. `lyco bench --backend cuda --first-call` (ceilings, every fused family: ULP fused/eager,
#      time, floor, extra memory, first call in a fresh process) and PNG plots when matplotlib is
#      present (tools/plot_bench.py).
# Everything lands in $OUT (default ./gpu-tier-out): gpu-tier.log, check.txt, memcheck.txt,
# racecheck.txt, bench.txt, bench.csv, bench.json, plots/. Exit status 0 only when every step passed.
# LYCO_SKIP_CHECK=1 / LYCO_SKIP_SANITIZERS=1 / LYCO_SKIP_BENCH=1 leave those steps out (split runs);
# LYCO_SANITIZE_ALGOS narrows the sanitizer runs; LYCO_LEGACY_AB checks kept legacy paths too;
# LYCO_AB_ENV benches them side by side (step 7);
# LYCO_SKIP_PYTHON / LYCO_SKIP_DDP / LYCO_SKIP_MERGE leave those out. LYCO_WERROR=OFF builds without -Werror (a newer compiler there may warn where ours does not).
# The GPU image has no libjansson-dev: `bash tools/gpu-tier.sh --stage-deps` (on a machine that has
# it, e.g. the dev box) copies its header, shared library and a relocatable jansson.pc into
# build-deps/; carry that folder along and the build there uses it.
set -u
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--stage-deps" ]; then
    libdir="$(pkg-config --variable=libdir jansson)" || { echo "gpu-tier: pkg-config finds no jansson here"; exit 1; }
    incdir="$(pkg-config --variable=includedir jansson)"
    mkdir -p build-deps/include build-deps/lib/pkgconfig
    cp "$incdir"/jansson.h "$incdir"/jansson_config.h build-deps/include/
    cp -P "$libdir"/libjansson.so* build-deps/lib/
    cat >build-deps/lib/pkgconfig/jansson.pc <<'PC'
prefix=${pcfiledir}/../..
libdir=${prefix}/lib
includedir=${prefix}/include
Name: Jansson
Description: jansson staged for the GPU tier
Version: 2.14
Libs: -L${libdir} -ljansson
Cflags: -I${includedir}
PC
    echo "gpu-tier: staged jansson into build-deps/ (carry it to the GPU machine)"
    exit 0
fi
if [ "${1:-}" = "--pack-prebuilt" ]; then
    # the binaries of a CUDA build (default build-gpu/) in one xz tarball under build-carry/, small
    # enough to carry to the GPU machine; LYCO_PREBUILT_TAR unpacks it. The four binaries carry the
    # same fatbins (~45 MB each), so a dictionary larger than one binary stores them once: 16 MB
    # instead of 62 MB at xz's default 8 MiB dictionary (decompression needs ~200 MB of memory)
    src="${2:-build-gpu}"
    mkdir -p build-carry
    tar -cf - -C "$src" lyco liblyco.so tests/test_cuda_locon_conv tests/test_cuda_device | xz -T1 --lzma2=preset=6,dict=192MiB >build-carry/prebuilt.tar.xz || exit 1
    # the commit the binaries were built from (the source tree of $src's parent), which the GPU
    # machine's copy of the checkout cannot tell: the tier, focus and peer scripts name it
    (cd "$src/.." && echo "$(git rev-parse --short HEAD 2>/dev/null || echo "?")$(git diff --quiet 2>/dev/null || echo "+local changes")") >build-carry/prebuilt.commit
    ls -la build-carry/prebuilt.tar.xz; echo "built from $(cat build-carry/prebuilt.commit)"
    exit 0
fi
OUT="${OUT:-$PWD/gpu-tier-out}"
mkdir -p "$OUT"
LOG="$OUT/gpu-tier.log"
: >"$LOG"
BUILD="${LYCO_BUILD_DIR:-build-gpu}"
ARCH="${LYCO_CUDA_ARCH:-90}"
SEED="${LYCO_SEED:-20261129}"
JOBS="$(nproc 2>/dev/null || echo 8)"
status=0
t_start=$(date +%s)

say() { echo "== $* ($(($(date +%s) - t_start)) s)" | tee -a "$LOG"; }
fail() { echo "!! $*" | tee -a "$LOG"; status=1; }

[ -z "${LYCO_GIT_COMMIT:-}" ] && [ -f build-carry/prebuilt.commit ] && [ -n "${LYCO_PREBUILT_TAR:-}" ] && LYCO_GIT_COMMIT="$(cat build-carry/prebuilt.commit) (prebuilt)"
say "lyco gpu tier: commit ${LYCO_GIT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo "?")$(git diff --quiet 2>/dev/null || echo "+local changes")}, seed $SEED"

# ---- 1. build ----
if ! pkg-config --exists jansson 2>/dev/null; then
    if [ -f build-deps/lib/pkgconfig/jansson.pc ]; then
        export PKG_CONFIG_PATH="$PWD/build-deps/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
        export LD_LIBRARY_PATH="$PWD/build-deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        say "jansson from build-deps/"
    else
        fail "jansson is missing: run 'bash tools/gpu-tier.sh --stage-deps' where libjansson-dev is installed and carry build-deps/"
        exit 1
    fi
fi
if [ -n "${LYCO_PREBUILT_TAR:-}" ]; then
    mkdir -p "$BUILD" && xz -dc "$LYCO_PREBUILT_TAR" | tar -xf - -C "$BUILD" || { fail "cannot unpack $LYCO_PREBUILT_TAR"; exit 1; }
    LYCO_PREBUILT="$BUILD/lyco"
fi
if [ -n "${LYCO_PREBUILT:-}" ]; then
    LYCO="$LYCO_PREBUILT"
    say "using prebuilt $LYCO"
else
    say "configure $BUILD (CUDA arch $ARCH, -DLYCO_WERROR=${LYCO_WERROR:-ON})"
    if ! cmake -S . -B "$BUILD" -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DLYCO_WERROR="${LYCO_WERROR:-ON}" -DLYCO_CUDA=ON >>"$LOG" 2>&1; then
        fail "configure failed (see $LOG)"
        exit 1
    fi
    say "build"
    if ! cmake --build "$BUILD" -j "$JOBS" --target lyco lyco_shared test_cuda_locon_conv test_cuda_device >>"$LOG" 2>&1; then
        fail "build failed (see $LOG)"
        grep -E "error|warning" "$LOG" | head -40
        exit 1
    fi
    LYCO="$BUILD/lyco"
fi
export LYCO_GIT_COMMIT="${LYCO_GIT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo "?")}"

# ---- 2. device ----
say "nvidia-smi"
nvidia-smi >>"$LOG" 2>&1 || fail "nvidia-smi failed"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1 | tee -a "$LOG"

if [ -z "${LYCO_SKIP_CHECK:-}" ]; then
# ---- 3. correctness: every case of the quick tier, every algorithm, on device tensors ----
# A case the CUDA backend declines runs the eager twin on host copies (path "eager: eager via host
# copies: <why>"); it must still pass the eager budget. Families listed in LYCO_FUSED_ALGOS must
# take the fused path on every case (a fallback there is a failure).
FUSED_ALGOS="${LYCO_FUSED_ALGOS:-locon,loha,lokr,diag_oft,boft,ia3,full,norm,glora,dylora}"
ALGOS="${LYCO_ALGOS:-}"
say "lyco check --backend cuda ${ALGOS:+--algo $ALGOS }--seed $SEED (all dtype rows)"
"$LYCO" check --backend cuda ${ALGOS:+--algo "$ALGOS"} --seed "$SEED" >"$OUT/check.txt" 2>&1
rc=$?
echo "   $(grep -c ' PASS ' "$OUT/check.txt") passed, $(grep -c ' FAIL ' "$OUT/check.txt") failed" | tee -a "$LOG"
if [ $rc != 0 ]; then
    fail "check: failures (see check.txt)"
    grep -E " FAIL " "$OUT/check.txt" | head -40 | tee -a "$LOG"
fi
echo "   path per algorithm (fused / eager fallback):" | tee -a "$LOG"
awk '/ PASS | FAIL /{split($1, n, "_"); a = n[1]; if (a == "diag") a = "diag_oft"; if ($0 ~ / PASS +fused| FAIL +fused/) f[a]++; else e[a]++; seen[a] = 1}
     END {for (a in seen) printf "     %-9s fused %4d   eager %4d\n", a, f[a], e[a]}' "$OUT/check.txt" | sort | tee -a "$LOG"
echo "   fallback reasons:" | tee -a "$LOG"
grep -oE "eager via host copies: .*" "$OUT/check.txt" | sed 's/ *$//' | sort | uniq -c | sort -rn | head -30 | sed 's/^/     /' | tee -a "$LOG"
for a in ${FUSED_ALGOS//,/ }; do
    n=$(grep -E "^${a}_" "$OUT/check.txt" | grep -c "eager via host copies" || true)
    [ "$n" != 0 ] && fail "$a: $n cases fell back to the eager twin (expected fused)"
done

# ---- 3a. regressions pinned at the seeds that found them ----
# LoHa's merge backward formed Γs·R_t with five fp32 roundings: an fp32 row's G_B̄ at 21 ULP over
# its 17.2 budget at this seed (fixed: one fp64 product per term, loha.cu)
say "pinned-seed regressions"
"$LYCO" check --backend cuda --algo loha --dir merge_bwd --dtypes fp32 --require-fused --seed 20261204 >"$OUT/regress-loha.txt" 2>&1 \
    || fail "regression: loha merge_bwd fp32 at seed 20261204 (see regress-loha.txt)"
tail -n 1 "$OUT/regress-loha.txt" | tee -a "$LOG"
# LoHa's FFMA merge backward summed each G_Ā_t / G_B̄_t element in one fp32 chain over I·K (or O):
# the full tier's 320-channel Tucker conv case (I·K = 2 880) at 100–122 ULP on hada_w*_a against a
# 95.7 budget at this seed (fixed, session 31: 64-long fp32 tiles summed in fp64, loha.cu)
"$LYCO" check --backend cuda --algo loha --dir merge_bwd --dtypes fp32,fp16+fp32adapter --tier full --require-fused --seed 313 \
    >"$OUT/regress-loha-tucker.txt" 2>&1 || fail "regression: loha merge_bwd full tier at seed 313 (see regress-loha-tucker.txt)"
tail -n 1 "$OUT/regress-loha-tucker.txt" | tee -a "$LOG"
# LoHa's one-pass merge backward (loha_grad_onepass.cu) with several strips per region, one chunk
# column, two stages, its parts formed twice instead of shared (SH=0); and the per-tile kernel it
# replaces (LYCO_CUDA_LOHA_MB1=0)
for v in LYCO_CUDA_LOHA_MB1_NS=3 LYCO_CUDA_LOHA_MB1_NC=1 LYCO_CUDA_LOHA_MB1_S=2 LYCO_CUDA_LOHA_MB1_SH=0 LYCO_CUDA_LOHA_MB1=0; do
    env "$v" "$LYCO" check --backend cuda --algo loha --dir merge_bwd --require-fused --seed "$SEED" >"$OUT/loha-mb1.txt" 2>&1 \
        || fail "loha merge_bwd with $v (see loha-mb1.txt)"
    echo "$v: $(tail -n 1 "$OUT/loha-mb1.txt")" | tee -a "$LOG"
done
# the ptxas st.u8 miscompile (common.cuh st_elem, tools/sass-lint.sh): k_dx_halo wrote wrong low
# bytes into unaligned 16-bit dx (locon_conv1d_unaligned_r2/_r4, dylora_conv1d_unaligned_bs2_1of2);
# then dx through the halo path (default) and through k_dx_tc (LYCO_CUDA_CONV_DXHALO=0)
"$LYCO" check --backend cuda --algo locon,dylora --dir bypass_bwd --require-fused --seed "$SEED" >"$OUT/regress-dxhalo.txt" 2>&1 \
    || fail "regression: locon/dylora bypass_bwd with the dx halo path (see regress-dxhalo.txt)"
tail -n 1 "$OUT/regress-dxhalo.txt" | tee -a "$LOG"
LYCO_CUDA_CONV_DXHALO=0 "$LYCO" check --backend cuda --algo locon,dylora --dir bypass_bwd --require-fused --seed "$SEED" >"$OUT/regress-dxtc.txt" 2>&1 \
    || fail "locon/dylora bypass_bwd with LYCO_CUDA_CONV_DXHALO=0 (see regress-dxtc.txt)"
tail -n 1 "$OUT/regress-dxtc.txt" | tee -a "$LOG"

# LoHa's bf16 linear bypass: the face-splitting form on the tensor cores (loha_fs.cu) pinned on every
# row where it applies, then the dense route (loha_tc.cu) with it off
for v in 1 0; do
    LYCO_CUDA_LOHA_FS_TC=$v "$LYCO" check --backend cuda --algo loha --dir bypass_fwd,bypass_bwd --require-fused --seed "$SEED" \
        >"$OUT/loha-fs-tc$v.txt" 2>&1 || fail "loha bypass with LYCO_CUDA_LOHA_FS_TC=$v (see loha-fs-tc$v.txt)"
    tail -n 1 "$OUT/loha-fs-tc$v.txt" | tee -a "$LOG"
done

# Diag-OFT's forward rotation: the tensor-core kernels (default where they apply) and the FFMA
# kernels (LYCO_CUDA_OFT_TC=0)
LYCO_CUDA_OFT_TC=0 "$LYCO" check --backend cuda --algo diag_oft --require-fused --seed "$SEED" >"$OUT/oft-tc0.txt" 2>&1 \
    || fail "diag_oft with LYCO_CUDA_OFT_TC=0 (see oft-tc0.txt)"
tail -n 1 "$OUT/oft-tc0.txt" | tee -a "$LOG"
# the full tier's forward rows: diag_oft_linear_4096_bs16 (several column tiles per CUDA block) caught
# the first tensor-core kernel staging its tiles with half its threads' count (4028 ULP, racecheck)
"$LYCO" check --backend cuda --algo diag_oft --dir merge_fwd,bypass_fwd --tier full --require-fused --seed "$SEED" >"$OUT/oft-full-fwd.txt" 2>&1 \
    || fail "diag_oft forward, full tier (see oft-full-fwd.txt)"
tail -n 1 "$OUT/oft-full-fwd.txt" | tee -a "$LOG"

# ---- 3b. the ctest gpu label's tests (larger conv/Tucker shapes), when built here ----
GPU_TEST="${LYCO_BUILD_DIR:-build-gpu}/tests/test_cuda_locon_conv"
if [ -x "$GPU_TEST" ]; then
    say "test_cuda_locon_conv (seed $SEED)"
    LYCO_SEED="$SEED" "$GPU_TEST" >"$OUT/test_cuda_locon_conv.txt" 2>&1 || fail "test_cuda_locon_conv failed (see test_cuda_locon_conv.txt)"
    tail -n 2 "$OUT/test_cuda_locon_conv.txt" | tee -a "$LOG"
fi

GPU_TEST="${LYCO_BUILD_DIR:-build-gpu}/tests/test_cuda_device"
if [ -x "$GPU_TEST" ]; then
    say "test_cuda_device (stream capture of every fused call, device checks; seed $SEED)"
    LYCO_SEED="$SEED" "$GPU_TEST" >"$OUT/test_cuda_device.txt" 2>&1 || fail "test_cuda_device failed (see test_cuda_device.txt)"
    grep -E "^FAIL" "$OUT/test_cuda_device.txt" | head -20 | tee -a "$LOG"
    tail -n 2 "$OUT/test_cuda_device.txt" | tee -a "$LOG"
fi

# ---- 3d. `lyco merge --backend cuda` on the adapter fixtures of every algorithm: exit 0 (the
# merge re-reads and verifies its output against the fp64 oracle) and the same tensors as the
# CPU merge within a few fp32 ulp ----
if [ -z "${LYCO_SKIP_MERGE:-}" ] && [ -d tests/data/adapters ]; then
    say "lyco merge --backend cuda vs cpu (tests/data/adapters)"
    M="$OUT/merge"; mkdir -p "$M"; nm=0; nbad=0
    for a in tests/data/adapters/sd_*.safetensors tests/data/adapters/tf_*.safetensors; do
        case "$a" in *upstream*|*_base.*) continue ;; esac
        n=$(basename "$a" .safetensors); base="tests/data/adapters/${n%%_*}_base.safetensors"
        "$LYCO" merge "$base" "$a:0.8" -o "$M/$n.cpu.safetensors" --backend cpu >"$M/$n.cpu.log" 2>&1 || { fail "merge --backend cpu $n failed"; nbad=$((nbad + 1)); }
        "$LYCO" merge "$base" "$a:0.8" -o "$M/$n.cuda.safetensors" --backend cuda >"$M/$n.cuda.log" 2>&1 || { fail "merge --backend cuda $n failed: $(tail -1 "$M/$n.cuda.log")"; nbad=$((nbad + 1)); }
        nm=$((nm + 1))
    done
    echo "   $nm adapters merged on both backends, $nbad failures" | tee -a "$LOG"
    if python3 -c "import safetensors, torch" 2>/dev/null; then
        python3 - "$M" <<'PY' 2>&1 | tee -a "$LOG" || fail "merge outputs differ between cpu and cuda"
import glob, os, sys
from safetensors.torch import load_file
worst = 0.0
for c in sorted(glob.glob(sys.argv[1] + "/*.cpu.safetensors")):
    g = c.replace(".cpu.", ".cuda.")
    if not os.path.exists(g):
        continue
    a, b = load_file(c), load_file(g)
    assert a.keys() == b.keys(), c
    for k in a:
        x, y = a[k].float(), b[k].float()
        worst = max(worst, (x - y).abs().max().item() / (x.abs().max().item() or 1.0))
print("   worst |cpu - cuda| / max|W| over every merged tensor: %.2e" % worst)
sys.exit(0 if worst < 1e-5 else 1)
PY
    fi
    rm -f "$M"/*.safetensors
fi

# ---- 3b'. the kept legacy paths (LYCO_LEGACY_AB="VAR:algo,algo VAR2:algo"): the same check with
# each switch set, so a new kernel and the one it replaces are both verified in one run ----
for ab in ${LYCO_LEGACY_AB:-}; do
    var="${ab%%:*}"; algos="${ab#*:}"
    say "check with $var=1 (--algo $algos)"
    env "$var=1" "$LYCO" check --backend cuda --algo "$algos" --seed "$SEED" >"$OUT/check-$var.txt" 2>&1 || fail "check with $var=1 failed (see check-$var.txt)"
    tail -n 1 "$OUT/check-$var.txt" | tee -a "$LOG"
done

# ---- 3c. the Python binding's tests on the device (torch there; lycoris-lora from wheels carried
# in build-deps/wheels/, installed into build-deps/pylib — the device has no network) ----
if ls build-deps/wheels/*.whl >/dev/null 2>&1 && [ ! -d build-deps/pylib ]; then
    python3 -m pip install -q --no-deps --no-index --target "$PWD/build-deps/pylib" build-deps/wheels/*.whl >>"$LOG" 2>&1 \
        || echo "   (wheels in build-deps/wheels did not install: the LyCORIS tests will skip)" | tee -a "$LOG"
fi
if [ -z "${LYCO_SKIP_PYTHON:-}" ] && python3 -c "import torch, pytest" 2>/dev/null && [ -f "${LYCO_BUILD_DIR:-build-gpu}/liblyco.so" ]; then
    say "python binding tests (pytest, torch $(python3 -c 'import torch; print(torch.__version__)'))"
    PYTHONPATH="$PWD/build-deps/pylib:$PWD/python${PYTHONPATH:+:$PYTHONPATH}" LYCO_LIBRARY="$PWD/${LYCO_BUILD_DIR:-build-gpu}/liblyco.so" \
        python3 -m pytest -rs -q -p no:cacheprovider python/tests >"$OUT/pytest.txt" 2>&1
    rc=$?
    tail -n 15 "$OUT/pytest.txt" | tee -a "$LOG"
    [ $rc != 0 ] && fail "python binding tests failed (see pytest.txt)"
fi

# ---- 4. determinism (the fused families) ----
say "determinism: the fused families' check again, tables compared"
"$LYCO" check --backend cuda --algo "$FUSED_ALGOS" --seed "$SEED" >"$OUT/.check2.txt" 2>&1
"$LYCO" check --backend cuda --algo "$FUSED_ALGOS" --seed "$SEED" >"$OUT/.check3.txt" 2>&1
# the tables must agree in every column except the wall-time one ("ms"), which is blanked
mscol=$(sed -n 2p "$OUT/.check2.txt" | awk '{for (i = 1; i <= NF; i++) if ($i == "ms") print i}')
strip() { awk -v c="${mscol:-0}" '{ if (c > 0 && NF >= c && $c ~ /^[0-9.]+$/) $c = "-"; print }' "$1"; }
if [ "$(strip "$OUT/.check2.txt")" = "$(strip "$OUT/.check3.txt")" ]; then
    echo "   identical (wall-time column ignored)" | tee -a "$LOG"
else
    fail "the two check runs differ:"
    diff <(strip "$OUT/.check2.txt") <(strip "$OUT/.check3.txt") | head -20 | tee -a "$LOG"
fi
rm -f "$OUT/.check2.txt" "$OUT/.check3.txt"

else
    say "check and determinism skipped (LYCO_SKIP_CHECK)"
fi

# ---- 5. sanitizers ----
if [ -n "${LYCO_SKIP_SANITIZERS:-}" ]; then
    say "sanitizers skipped (LYCO_SKIP_SANITIZERS)"
elif command -v compute-sanitizer >/dev/null 2>&1; then
    say "compute-sanitizer memcheck (bf16 and fp32+bf16adapter rows, the fused families)"
    compute-sanitizer --tool memcheck --error-exitcode 99 --print-limit 20 \
        "$LYCO" check --backend cuda --algo "${LYCO_SANITIZE_ALGOS:-$FUSED_ALGOS}" --dtypes bf16,fp32+bf16adapter --seed "$SEED" >"$OUT/memcheck.txt" 2>&1
    rc=$?
    tail -3 "$OUT/memcheck.txt" | tee -a "$LOG"
    [ $rc = 99 ] && fail "memcheck found errors (see memcheck.txt)"
    say "compute-sanitizer racecheck (bf16 rows, the fused families)"
    compute-sanitizer --tool racecheck --error-exitcode 99 --print-limit 20 \
        "$LYCO" check --backend cuda --algo "${LYCO_SANITIZE_ALGOS:-$FUSED_ALGOS}" --dtypes bf16 --seed "$SEED" >"$OUT/racecheck.txt" 2>&1
    rc=$?
    tail -3 "$OUT/racecheck.txt" | tee -a "$LOG"
    [ $rc = 99 ] && fail "racecheck found hazards (see racecheck.txt)"
    # the case table's conv shapes miss the conv row-tile kernels (k_h_rows, k_gp_rows: output
    # widths that are multiples of 8): test_cuda_locon_conv's rows_* cases reach them (session 34's
    # racecheck found a hazard there that no check row showed)
    CT_TEST="${LYCO_BUILD_DIR:-build-gpu}/tests/test_cuda_locon_conv"
    if [ -x "$CT_TEST" ]; then
        for tool in memcheck racecheck; do
            say "compute-sanitizer $tool (test_cuda_locon_conv, the row-tile cases)"
            LYCO_CASES=rows_ LYCO_SEED="$SEED" compute-sanitizer --tool $tool --error-exitcode 99 --print-limit 20 "$CT_TEST" >"$OUT/$tool-rows.txt" 2>&1
            rc=$?
            tail -2 "$OUT/$tool-rows.txt" | tee -a "$LOG"
            [ $rc != 0 ] && fail "$tool on the row-tile cases (see $tool-rows.txt)"
        done
    fi
else
    fail "compute-sanitizer not found"
fi

# ---- 5b. several GPUs (issue 8): the DDP script when the machine has two ----
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU")
if [ "${ngpu:-0}" -ge 2 ] && [ -f tests/python/ddp_lycoris.py ] && [ -z "${LYCO_SKIP_DDP:-}" ] && python3 -c "import torch" 2>/dev/null; then
    say "DDP on $ngpu GPUs: tests/python/ddp_lycoris.py ${LYCO_DDP_ARGS:-}"
    export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
    PYTHONPATH="$PWD/build-deps/pylib:$PWD/python${PYTHONPATH:+:$PYTHONPATH}" LYCO_LIBRARY="$PWD/${LYCO_BUILD_DIR:-build-gpu}/liblyco.so" \
        python3 tests/python/ddp_lycoris.py --device cuda ${LYCO_DDP_ARGS:-} >"$OUT/ddp.txt" 2>&1 || fail "DDP script failed (see ddp.txt)"
    tail -n 25 "$OUT/ddp.txt" | tee -a "$LOG"
fi

# ---- 6. bench ----
if [ -n "${LYCO_SKIP_BENCH:-}" ]; then
    say "bench skipped (LYCO_SKIP_BENCH)"
else
    say "lyco bench --backend cuda --first-call ${LYCO_BENCH_ARGS:-}"
    "$LYCO" bench --backend cuda --first-call --seed "$SEED" --csv "$OUT/bench.csv" --json "$OUT/bench.json" ${LYCO_BENCH_ARGS:-} >"$OUT/bench.txt" 2>&1
    rc=$?
    sed -n '/^geomean/,$p' "$OUT/bench.txt" | tee -a "$LOG"
    [ $rc != 0 ] && fail "bench: rows not fused, over budget, or not deterministic (see bench.txt)"
    if python3 -c "import matplotlib" 2>/dev/null; then
        python3 tools/plot_bench.py "$OUT/bench.json" "$OUT/plots" >>"$LOG" 2>&1 || fail "plots failed"
    else
        echo "   (no matplotlib: plots skipped)" | tee -a "$LOG"
    fi
fi

# ---- 7. optional: an A/B binary and a kernel profile ----
# LYCO_AB_BINARY=path: the same bench rows (LYCO_AB_ARGS, default the LoRA family) with another
# build, for a side-by-side of a kernel change (bench-ab.txt beside bench-a.txt from this build).
if [ -n "${LYCO_AB_BINARY:-}" ]; then
    AB_ARGS="${LYCO_AB_ARGS:---algo lora}"
    say "A/B: $LYCO vs $LYCO_AB_BINARY, bench $AB_ARGS"
    "$LYCO" bench --backend cuda --seed "$SEED" $AB_ARGS >"$OUT/bench-a.txt" 2>&1
    "$LYCO_AB_BINARY" bench --backend cuda --seed "$SEED" $AB_ARGS >"$OUT/bench-ab.txt" 2>&1
    sed -n '/^geomean/,$p' "$OUT/bench-a.txt" | sed 's/^/   A /' | tee -a "$LOG"
    sed -n '/^geomean/,$p' "$OUT/bench-ab.txt" | sed 's/^/   B /' | tee -a "$LOG"
fi
# LYCO_AB_ENV="VAR=1 VAR2=1": the same bench rows (LYCO_AB_ARGS) with this build as is and with those
# switches set (the kept legacy kernels), side by side: bench-new.txt and bench-legacy.txt.
if [ -n "${LYCO_AB_ENV:-}" ]; then
    AB_ARGS="${LYCO_AB_ARGS:---algo lora}"
    say "A/B: bench $AB_ARGS as built vs with $LYCO_AB_ENV"
    "$LYCO" bench --backend cuda --seed "$SEED" $AB_ARGS >"$OUT/bench-new.txt" 2>&1 || fail "bench (new kernels) failed"
    env $LYCO_AB_ENV "$LYCO" bench --backend cuda --seed "$SEED" $AB_ARGS >"$OUT/bench-legacy.txt" 2>&1 || fail "bench ($LYCO_AB_ENV) failed"
    sed -n '/^geomean/,$p' "$OUT/bench-new.txt" | sed 's/^/   new    /' | tee -a "$LOG"
    sed -n '/^geomean/,$p' "$OUT/bench-legacy.txt" | sed 's/^/   legacy /' | tee -a "$LOG"
fi
# LYCO_PROFILE=regex: Nsight Compute on the first launch of the matching kernel in the bench rows
# LYCO_PROFILE_ARGS selects (clocks left alone, METHOD.md).
if [ -n "${LYCO_PROFILE:-}" ] && command -v ncu >/dev/null 2>&1; then
    say "ncu: kernel ~ $LYCO_PROFILE, bench ${LYCO_PROFILE_ARGS:-}"
    ncu --clock-control none --set full -k "regex:$LYCO_PROFILE" -s 3 -c 1 \
        "$LYCO" bench --backend cuda --seed "$SEED" --reps 20 ${LYCO_PROFILE_ARGS:-} >"$OUT/ncu.txt" 2>&1 || fail "ncu failed (see ncu.txt)"
    grep -E "Duration|Memory Throughput|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per|Shared Memory Configuration Size|Block Limit|Bank Conflicts|Warp Cycles Per Issued|Issue Slots Busy|Executed Ipc" "$OUT/ncu.txt" | head -30 | tee -a "$LOG"
fi

say "done: status $status"
exit $status
