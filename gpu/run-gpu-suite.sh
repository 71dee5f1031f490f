#!/usr/bin/env bash
# The GPU suite: every GPU check and measurement of the cuda transport in one run, on the GPU machine.
#
#   here:            gpu/prepare-device.sh          (builds .device/jre and .device/lib; nothing else is needed there)
#   on the GPU box:  gpu/run-gpu-suite.sh            (from the repository root; results go to $OUT or ./gpu-suite-out)
#
# Steps (each runs even if an earlier one failed; the exit code says whether all passed):
#   1. nvcc builds the PTX from gpu/src/main/cuda/kv_copy.cu and compares it with the committed one (the jar's);
#      the ptxas register/spill report of an sm_90 build is kept
#   2. GpuSuite info: driver, device, the kernels as the driver JIT-compiled them, one checked copy
#   3. GpuSuite ipc-check: two engine processes + one worker process sharing the pools through CUDA IPC; random page
#      tables, destinations poisoned before every push, every byte of the destination pool checked afterwards;
#      refused pushes (released lease, runs outside the pool, forged token) must leave the pool untouched
#   4. GpuSuite bench: 256 MiB in 16/32/128 KiB pages scattered through a 1 GiB pool, every kernel variant,
#      cuMemcpyBatchAsync, one copy per page and the whole transport push, against one contiguous copy of the same
#      bytes in the same run; per-order overhead. Prints the table last.
# Files under $OUT: suite.log, ptx-check.txt, ptxas.txt, ipc.json, ipc.txt, gpu.json, gpu.md (copy the last two to
# docs/bench/gpu.md and bench/results/gpu.json).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$PWD/gpu-suite-out}
mkdir -p "$out"
exec > >(tee -a "$out/suite.log") 2>&1
java=${JAVA:-.device/jre/bin/java}
run() { "$java" --enable-native-access=ALL-UNNAMED -Xmx4g -cp '.device/lib/*' io.orbitkv.pd.bench.gpu.GpuSuite "$@"; }
status=0
step() { echo; echo "== $* ($(date -u +%H:%M:%S))"; }

step "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem,temperature.gpu,utilization.gpu --format=csv 2>&1 | head -3
"$java" -version 2>&1 | head -1

step "1. PTX from source vs committed"
committed=gpu/src/main/resources/io/orbitkv/pd/gpu/kv_copy.ptx
if command -v nvcc >/dev/null; then
  gpu/build-ptx.sh "$out/kv_copy.ptx" > "$out/ptxas.txt" 2>&1 || { echo "nvcc build failed"; status=1; }
  cat "$out/ptxas.txt"
  if cmp -s "$out/kv_copy.ptx" "$committed"; then
    echo "PTX matches the committed one" | tee "$out/ptx-check.txt"
    rm -f "$out/kv_copy.ptx"
  else
    echo "PTX DIFFERS from the committed one (fresh copy in \$OUT/kv_copy.ptx; the run uses the committed one)" | tee "$out/ptx-check.txt"
    diff <(grep -v '^//' "$committed") <(grep -v '^//' "$out/kv_copy.ptx") | head -20
  fi
else
  echo "no nvcc here: skipped" | tee "$out/ptx-check.txt"
fi

step "2. info"
run info || status=1

step "3. ipc-check"
run ipc-check --out "$out" --rounds "${ROUNDS:-8}" || status=1

step "4. bench"
run bench --out "$out" ${QUICK:+--quick} || status=1

step "summary"
cat "$out/ptx-check.txt" 2>/dev/null
cat "$out/ipc.txt" 2>/dev/null || echo "ipc-check: no result"
echo
cat "$out/gpu.md" 2>/dev/null || echo "bench: no result"
echo "suite exit status: $status"
exit $status
