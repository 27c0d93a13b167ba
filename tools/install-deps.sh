#!/bin/sh
# Installs what building lyco needs on a fresh Debian 12 machine: cmake, a C compiler, pkg-config,
# jansson (JSON for the safetensors header). Needs root (or sudo).
set -e
PKGS="cmake gcc g++ make pkg-config libjansson-dev"
missing=""
for p in $PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
[ -z "$missing" ] && exit 0
echo "lyco: installing Debian packages:$missing"
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq $missing
