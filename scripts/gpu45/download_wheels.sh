#!/usr/bin/env bash
# Download every wheel of wheels.txt for the GPU machine (Python 3.12, x86_64), as
# /work/.library/device/README.md shows, into DEST (default /work/gpu_prep/wheels).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dest=${1:-$here/wheels}
mkdir -p "$dest"
plat=""
for n in 2_28 2_27 2_24 2_17 2014 1; do
  case $n in 2014) plat="$plat --platform manylinux2014_x86_64";; 1) plat="$plat --platform manylinux1_x86_64";;
    *) plat="$plat --platform manylinux_${n}_x86_64";; esac
done
for n in 5 12 31 34 35 39; do plat="$plat --platform manylinux_2_${n}_x86_64"; done
grep -v '^#' "$here/wheels.txt" | grep . | while read -r req; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    $plat --platform any -d "$dest" "$req" 2>&1 | grep -v '^WARNING: Location' || true
done
ls -la "$dest"
