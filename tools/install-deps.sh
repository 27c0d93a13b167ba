#!/bin/sh
# Installs what building lyco needs on a fresh Debian 12 machine: cmake, a C compiler, pkg-config,
# jansson (JSON for the safetensors header). Needs root (or sudo).
# --fuzz: also clang and libclang-rt-dev (libFuzzer and the sanitizer runtimes of the default
# clang), for the libFuzzer target of tests/fuzz.
# --cuda-tools: where nvcc is on PATH without cuobjdump and nvdisasm next to it (the SASS check of
# tools/sass-lint.sh needs them), NVIDIA's PyPI wheels nvidia-cuda-cuobjdump and
# nvidia-cuda-nvdisasm (~5 MB) unpacked into .cuda-tools/bin (pip from Debian's python3-pip if absent).
set -e
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
if [ "${1:-}" = "--cuda-tools" ]; then
    command -v nvcc >/dev/null 2>&1 || { echo "lyco: no nvcc on PATH: no CUDA tools needed"; exit 0; }
    nv=$(dirname "$(command -v nvcc)")
    root=$(cd "$(dirname "$0")/.." && pwd)
    if { [ -x "$nv/cuobjdump" ] && [ -x "$nv/nvdisasm" ]; } || [ -x "$root/.cuda-tools/bin/nvdisasm" ]; then exit 0; fi
    if ! python3 -m pip --version >/dev/null 2>&1; then
        echo "lyco: installing Debian package python3-pip (to fetch cuobjdump/nvdisasm)"
        $SUDO apt-get update -qq && $SUDO apt-get install -y -qq python3-pip >/dev/null
    fi
    echo "lyco: fetching cuobjdump and nvdisasm from PyPI (nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm) into .cuda-tools/"
    tmp=$(mktemp -d)
    python3 -m pip download -q --no-deps --dest "$tmp" nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm
    mkdir -p "$root/.cuda-tools/bin"
    for w in "$tmp"/*.whl; do
        python3 - "$w" "$root/.cuda-tools/bin" <<'PY'
import os, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    for n in z.namelist():
        if "/bin/" in n and not n.endswith("/"):
            dst = os.path.join(sys.argv[2], os.path.basename(n))
            with z.open(n) as f, open(dst, "wb") as o:
                o.write(f.read())
            os.chmod(dst, 0o755)
PY
    done
    rm -rf "$tmp"
    ls "$root/.cuda-tools/bin"
    exit 0
fi
PKGS="cmake gcc g++ make pkg-config libjansson-dev"
if [ "${1:-}" = "--fuzz" ]; then PKGS="$PKGS clang libclang-rt-dev"; fi
missing=""
for p in $PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
[ -z "$missing" ] && exit 0
echo "lyco: installing Debian packages:$missing"
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq $missing
