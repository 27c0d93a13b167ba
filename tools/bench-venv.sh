#!/bin/sh
# bench-venv.sh — prints (on stdout) the Python interpreter that runs the PyTorch-CPU peer arm of
# `make bench` (tools/bench_torch_cpu.py); every message goes to stderr.
#   1. $LYCO_TORCH_PYTHON when set;
#   2. .venv-bench/bin/python when it imports torch; python3 when it does;
#   3. otherwise it creates .venv-bench and installs torch + matplotlib from PyPI into it, saying so
#      first (one time: the PyPI torch wheel brings its CUDA libraries, about 5 GB; measured 6 min
#      on the 2-core CI-like machine). LYCO_BENCH_INSTALL=0 skips the install: the bench then
#      prints why the peer column is empty.
# Assumes the current directory is the repository root (the Makefile's).
V=.venv-bench
if [ -n "$LYCO_TORCH_PYTHON" ]; then echo "$LYCO_TORCH_PYTHON"; exit 0; fi
if [ -x "$V/bin/python" ] && "$V/bin/python" -c "import torch" 2>/dev/null; then echo "$V/bin/python"; exit 0; fi
if python3 -c "import torch" 2>/dev/null; then echo python3; exit 0; fi
if [ "${LYCO_BENCH_INSTALL:-1}" = 0 ]; then echo python3; exit 0; fi
echo "make bench: the PyTorch peer needs torch: installing it once into $V" >&2
echo "  python3 -m venv $V && $V/bin/pip install torch matplotlib   (PyPI; ~5 GB with torch's CUDA wheels;" >&2
echo "  LYCO_BENCH_INSTALL=0 skips this, LYCO_TORCH_PYTHON=/path/to/python uses an existing torch)" >&2
if python3 -m venv "$V" >&2 && "$V/bin/pip" install --progress-bar off torch matplotlib >&2; then
    echo "$V/bin/python"
else
    echo "make bench: installing torch failed; the bench runs without the peer column" >&2
    echo python3
fi
