#!/bin/sh
# tests/fuzz/run.sh — runs one libFuzzer target time-boxed (FORMATS.md §1.5, CI).
#
# Usage: tests/fuzz/run.sh FUZZ_BINARY [SECONDS]   (default 60 s)
# Builds nothing: FUZZ_BINARY is fuzz_safetensors or fuzz_index from a LYCO_FUZZ=ON clang build
# (see tests/fuzz/README.md). Its committed seeds (tests/data/safetensors-corpus/*.safetensors
# and tests/data/safetensors-reference/*.safetensors, or tests/data/index-corpus/*.json) and dictionary (safetensors.dict or index.dict) seed a scratch
# corpus directory, so the repository is never written; crashes, leaks, timeouts and invariant
# violations make it exit non-zero, leaving the reproducer as crash-*/leak-*/timeout-* in
# $LYCO_FUZZ_ARTIFACTS (default: a scratch directory, printed). Needs: sh, mktemp, cp.
set -eu
bin=${1:?usage: tests/fuzz/run.sh FUZZ_BINARY [SECONDS]}
secs=${2:-60}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/lyco-fuzz.XXXXXX")
art=${LYCO_FUZZ_ARTIFACTS:-$work/artifacts}
mkdir -p "$work/corpus" "$art"
case "$(basename "$bin")" in
    fuzz_index*) cp "$root"/tests/data/index-corpus/*.json "$work/corpus/"; dict=index.dict ;;
    *) cp "$root"/tests/data/safetensors-corpus/*.safetensors \
          "$root"/tests/data/safetensors-reference/*.safetensors "$work/corpus/"
       dict=safetensors.dict ;;
esac
echo "lyco fuzz: $secs s of $bin; scratch corpus $work/corpus; artifacts $art"
rc=0
"$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=16384 \
    -dict="$here/$dict" -artifact_prefix="$art/" -print_final_stats=1 \
    "$work/corpus" || rc=$?
if [ "$rc" -ne 0 ]; then
    echo "lyco fuzz: FAILED (exit $rc); reproducers kept in $art:" >&2
    ls -l "$art" >&2 || true
    exit "$rc"
fi
rm -rf "$work"
echo "lyco fuzz: no crash in $secs s"
