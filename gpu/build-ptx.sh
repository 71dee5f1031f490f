#!/usr/bin/env bash
# Compiles the cuda transport's kernels (src/main/cuda/kv_copy.cu) to PTX for compute_90 (Hopper: H100, H200)
# and writes it where the jar picks it up. The PTX is committed, so the Java build never needs nvcc; run this
# after editing the .cu file and commit both.
#
# Usage: gpu/build-ptx.sh [OUT_PTX]       (default: gpu/src/main/resources/io/orbitkv/pd/gpu/kv_copy.ptx)
#
# Needs nvcc (CUDA 12.8 or newer; the committed PTX was made with CUDA 13.0). Also prints the register and
# spill report of an sm_90 build (ptxas -v) so that a change that spills shows up here, not on the GPU.
# The driver JIT-compiles the PTX for the GPU it runs on at module load (cached by the driver afterwards).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src="$here/src/main/cuda/kv_copy.cu"
out=${1:-$here/src/main/resources/io/orbitkv/pd/gpu/kv_copy.ptx}
nvcc=${NVCC:-nvcc}
command -v "$nvcc" >/dev/null || { echo "build-ptx.sh: nvcc not found (set NVCC=/path/to/nvcc)" >&2; exit 1; }
mkdir -p "$(dirname "$out")"
# -arch=compute_90: PTX for the virtual architecture; no machine code, the driver compiles it for sm_90.
"$nvcc" -arch=compute_90 -ptx -O3 -std=c++17 -o "$out" "$src"
echo "wrote $out ($(wc -c <"$out") bytes, $("$nvcc" --version | tail -n1))"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$nvcc" -arch=sm_90 -cubin -O3 -std=c++17 -Xptxas -v -o "$tmp/kv_copy.cubin" "$src" 2>&1 |
  grep -E "Compiling entry|registers|spill" | sed 's/^ptxas info *: */  /'
