#!/bin/sh
# ctest entry for the Python binding's tests (python/tests, pytest) against the liblyco.so just
# built (first argument). Without python3 or pytest it prints why and exits 77 (ctest: skipped);
# without torch/numpy, pytest runs the tests that need neither (ABI layout, dtype mapping, error
# messages) and prints a skip reason for the rest. LYCO_PYTHON picks the interpreter (e.g. a venv
# with torch and lycoris-lora: .venv-golden/bin/python).
lib="$1"
root="$(cd "$(dirname "$0")/../.." && pwd)"
# the first of LYCO_PYTHON, python3 on PATH, /usr/bin/python3 that has pytest
py=""
for cand in "${LYCO_PYTHON:-}" python3 /usr/bin/python3; do
    [ -n "$cand" ] && command -v "$cand" >/dev/null 2>&1 && "$cand" -c "import pytest" >/dev/null 2>&1 && { py="$cand"; break; }
done
if [ -z "$py" ]; then
    echo "python tests skipped: no python with pytest (tried ${LYCO_PYTHON:-<LYCO_PYTHON unset>}, python3, /usr/bin/python3; apt-get install python3-pytest, or set LYCO_PYTHON)"; exit 77
fi
echo "python tests: $py"
"$py" -c "import torch" >/dev/null 2>&1 || echo "note: $py has no torch: only the torch-free tests run (the torch tests run with LYCO_PYTHON=<a python with torch>, see docs/python.md)"
cd "$root" || exit 1
LYCO_LIBRARY="$lib" "$py" -m pytest -rs -p no:cacheprovider python/tests
rc=$?
# 5: pytest collected no test at all (e.g. every module skipped) — a skip, not a failure
[ "$rc" -eq 5 ] && { echo "python tests skipped: pytest collected no test"; exit 77; }
exit "$rc"
