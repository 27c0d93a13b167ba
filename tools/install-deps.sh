#!/bin/sh
# Installs what building lyco needs on a fresh Debian 12 machine: cmake, a C compiler, pkg-config,
# jansson (JSON for the safetensors header). Needs root (or sudo).
# --fuzz: also clang and libclang-rt-dev (libFuzzer and the sanitizer runtimes of the default
# clang), for the libFuzzer target of tests/fuzz.
set -e
PKGS="cmake gcc g++ make pkg-config libjansson-dev"
if [ "${1:-}" = "--fuzz" ]; then PKGS="$PKGS clang libclang-rt-dev"; fi
missing=""
for p in $PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
[ -z "$missing" ] && exit 0
echo "lyco: installing Debian packages:$missing"
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq $missing
