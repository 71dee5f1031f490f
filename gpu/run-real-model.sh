#!/usr/bin/env bash
# The real-model run on the GPU machine (docs/gpu.md, "The real-model run"), from the repository root, in two device
# calls made back to back (one call carries at most 64 MiB; files outside the tree stay while the machine is warm):
#   here:  gpu/prepare-real-model.sh                       builds .device/real/{jre,lib}.tar.xz
#   1. gpu/run-real-model.sh stage        carry .device/real/jre.tar.xz: unpacks the runtime under $ORBITKV_RT
#                                          (default ~/orbitkv-real) and runs the Python self-test of the paged model
#                                          (SKIP_SELFTEST=1: the runtime only)
#   2. gpu/run-real-model.sh run [args]   carry .device/real/lib.tar.xz: unpacks the jars and runs
#                                          `orbitkv-pd bench real-model [args]`; results and logs under $OUT
set -uo pipefail
cd "$(dirname "$0")/.."
rt=${ORBITKV_RT:-$HOME/orbitkv-real}
out=${OUT:-$PWD/real-model-out}
mkdir -p "$out" "$rt"
step() { echo; echo "== $* ($(date -u +%H:%M:%S))"; }
case "${1:-}" in
  stage)
    step "machine"
    nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv 2>&1 | head -3
    python3 -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__)'
    step "runtime"
    rm -rf "$rt/jre" && tar -C "$rt" -xJf .device/real/jre.tar.xz && "$rt/jre/bin/java" -version 2>&1 | head -1 || exit 2
    [ "${SKIP_SELFTEST:-0}" = 1 ] && exit 0  # the runtime only (a second stage of the same code within one session)
    step "self-test: pages against transformers' own cache, whole and layer by layer (tiny, then the 8B shape)"
    (cd python && python3 -m orbitkv_pd.real_model --self-test --shape tiny --lengths 128,1024) 2>&1 | grep -E "tokens:|Error|error" | tee "$out/selftest.txt"
    # the KV cache as vLLM's tensors (the connector's layout, engine.vllm-connector)
    (cd python && python3 -m orbitkv_pd.real_model --self-test --shape tiny --lengths 128,1024 --kv-layout vllm) 2>&1 | grep -E "tokens:|Error|error" \
      | sed 's/^/vllm layout: /' | tee -a "$out/selftest.txt"
    (cd python && python3 -m orbitkv_pd.real_model --self-test --shape "${SHAPE:-8b}" --lengths "${SELFTEST_LENGTHS:-128,8192}") 2>&1 | grep -E "tokens:|Error|error|model " \
      | tee -a "$out/selftest.txt"
    ;;
  run)
    shift
    [ -x "$rt/jre/bin/java" ] || { echo "no runtime at $rt: run 'gpu/run-real-model.sh stage' first (was the machine given back in between?)"; exit 3; }
    step "jars"
    if [ -f .device/real/lib.tar.xz ]; then
      rm -rf "$rt/lib" && tar -C "$rt" -xJf .device/real/lib.tar.xz || exit 2
    else
      [ -d "$rt/lib" ] || { echo "no jars: carry .device/real/lib.tar.xz"; exit 3; }
      echo "using the jars staged before at $rt/lib"
    fi
    step "bench real-model $*"
    outarg=(--out "$out/real-model.md")
    for a in "$@"; do case "$a" in --out|--out=*) outarg=() ;; esac; done  # a run's own --out (e.g. the connector's run)
    "$rt/jre/bin/java" --enable-native-access=ALL-UNNAMED -Xmx2g -Dorbitkv.home="$PWD" -cp "$rt/lib/*" io.orbitkv.pd.cli.Main \
      bench real-model "${outarg[@]}" "$@" 2>&1 | tee "$out/run.log"
    status=${PIPESTATUS[0]}
    for d in /tmp/orbitkv-bench-real-*/logs; do
      [ -d "$d" ] && mkdir -p "$out/logs" && cp "$d"/*.log "$d"/*.json "$out/logs/" 2>/dev/null
    done
    step "where each cuda push's time went (from the node worker's log)"
    python3 gpu/push-steps.py "$out"/logs/worker-node.log 2>&1 | tee "$out/push-steps.md"
    exit "$status"
    ;;
  *)
    echo "usage: gpu/run-real-model.sh stage | run [bench real-model options]"; exit 2 ;;
esac
