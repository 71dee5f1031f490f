#!/usr/bin/env python3
"""The vLLM connector's GPU paths on a real GPU, without vLLM (it cannot be installed there) and without Java
(issue 36, part 3; docs/vllm.md, docs/gpu.md):

1. **register_kv_caches on real CUDA tensors**: per-layer KV caches allocated as vLLM allocates them at the pinned
   commit (one ``torch.zeros`` of int8 per layer, viewed as ``(num_blocks, num_kv_heads, block_size, 2 * head_size)``
   bf16), mapped by ``orbitkv_pd.vllm_worker.map_kv_caches`` with the CUDA driver's IPC handles
   (``cuMemGetAddressRange`` for the offset of each tensor in its allocation: refused unless 0);
2. **the handles open in another process** (as the transfer worker opens them): a child process maps every region with
   ``cuIpcOpenMemHandle`` and reads back pages written by this one; their digests must match;
3. **save_kv_layer waits for the GPU**: with each layer's "attention" a GPU kernel still running when vLLM would call
   ``save_kv_layer``, the call returns at once and the layer's report reaches the (recording) engine API client only
   after the kernel completed (an event of our own, recorded after the kernel, has completed when the report comes).

    python3 gpu/check-vllm-connector.py [--layers 32] [--blocks 2048] [--out DIR]   # prints a table, writes check.json
"""

from __future__ import annotations

import argparse
import base64
import ctypes
import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))


class _Handle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * 64)]


def child() -> int:
    """Opens each region's IPC handle and prints the digest of the pages asked for: ``{"regions": [{"handle", "length",
    "pages": [[offset, length], ...]}]}`` on stdin."""
    req = json.loads(sys.stdin.read())
    lib = ctypes.CDLL("libcuda.so.1")

    def check(rc: int, what: str) -> None:
        if rc != 0:
            raise RuntimeError(f"{what}: CUDA error {rc}")
    check(lib.cuInit(0), "cuInit")
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    check(lib.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    check(lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
    check(lib.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    lib.cuIpcOpenMemHandle_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), _Handle, ctypes.c_uint]
    lib.cuMemcpyDtoH_v2.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t]
    out = []
    for r in req["regions"]:
        h = _Handle.from_buffer_copy(base64.b64decode(r["handle"]))
        ptr = ctypes.c_uint64()
        check(lib.cuIpcOpenMemHandle_v2(ctypes.byref(ptr), h, 1), "cuIpcOpenMemHandle")
        digests = []
        for off, n in r["pages"]:
            buf = ctypes.create_string_buffer(n)
            check(lib.cuMemcpyDtoH_v2(buf, ptr.value + off, n), "cuMemcpyDtoH")
            digests.append(hashlib.sha256(buf.raw).hexdigest())
        out.append(digests)
    print(json.dumps(out))
    return 0


class RecordingClient:
    """The engine API client as far as ``save_kv_layer`` uses it: each report with the state of a check event."""

    def __init__(self, checks: dict) -> None:
        self.checks = checks
        self.reports = []
        self.lock = threading.Lock()

    def prefill_progress(self, rid, blocks, num_tokens, done, end, layers) -> None:
        ev = self.checks.get(layers)
        with self.lock:
            self.reports.append({"layers": layers, "done": done, "end": end, "at": time.perf_counter(),
                                 "gpu_done": ev.query() if ev is not None else None})

    def close(self) -> None:
        pass


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--blocks", type=int, default=2048)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    a = ap.parse_args()
    if a.child:
        return child()
    import torch
    from orbitkv_pd import vllm_worker as vw
    from orbitkv_pd.protocol import CudaIpcPool
    from orbitkv_pd.vllm_scheduler import OrbitKVPdMetadata, SaveChunk

    dev = torch.device("cuda", 0)
    heads, block, head = 8, 16, 128
    shape = (a.blocks, heads, block, 2 * head)
    nbytes = a.blocks * heads * block * 2 * head * 2
    names = [f"model.layers.{i}.self_attn.attn" for i in range(a.layers)]
    # as vLLM's GPU model runner allocates them (one int8 buffer per KV cache tensor, then viewed in the backend's shape)
    kv = {n: torch.zeros(nbytes, dtype=torch.int8, device=dev).view(torch.bfloat16).view(shape) for n in names}
    results = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "layers": a.layers, "blocks": a.blocks,
               "tensor_shape": list(shape), "bytes_per_layer": nbytes,
               "date": time.strftime("%Y-%m-%d"), "expandable_segments": "expandable_segments:True" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")}
    rows = []

    # 1. the mapping, with the driver's handles and offsets
    try:
        layout, pool = vw.map_kv_caches(kv, block, a.blocks)
        assert isinstance(pool, CudaIpcPool)
        results["mapped"] = {"num_layers": layout.num_layers, "kv_split": layout.kv_split, "page_bytes": layout.page,
                             "regions": len(pool.regions)}
        rows.append(("register_kv_caches maps vLLM's tensors", "yes", f"{layout.num_layers} regions of {layout.num_blocks} pages of {layout.page} B"))
    except vw.KvLayoutRefused as e:
        results["mapped"] = {"refused": str(e)}
        rows.append(("register_kv_caches maps vLLM's tensors", "REFUSED", str(e)))
        pool = None

    # 2. the handles in another process
    if pool is not None:
        g = torch.Generator(device=dev).manual_seed(7)
        probe = []
        for i, n in enumerate(names):
            t = kv[n]
            t[0].copy_(torch.randn(t[0].shape, generator=g, device=dev, dtype=torch.float32).to(torch.bfloat16))
            t[-1].copy_(torch.randn(t[-1].shape, generator=g, device=dev, dtype=torch.float32).to(torch.bfloat16))
        torch.cuda.synchronize()
        page = layout.page
        for i, n in enumerate(names):
            host = kv[n].view(torch.uint8).view(a.blocks, page).cpu()
            probe.append({"handle": base64.b64encode(pool.regions[i].ipc_handle).decode(), "length": pool.regions[i].length_bytes,
                          "pages": [[0, page], [(a.blocks - 1) * page, page]],
                          "want": [hashlib.sha256(host[0].numpy().tobytes()).hexdigest(),
                                   hashlib.sha256(host[-1].numpy().tobytes()).hexdigest()]})
        p = subprocess.run([sys.executable, os.path.abspath(__file__), "--child"], input=json.dumps({"regions": probe}),
                           capture_output=True, text=True, timeout=120)
        if p.returncode != 0:
            ok, detail = False, p.stderr.strip().splitlines()[-1] if p.stderr.strip() else f"exit {p.returncode}"
        else:
            got = json.loads(p.stdout)
            bad = [i for i, r in enumerate(probe) if got[i] != r["want"]]
            ok, detail = not bad, f"{len(probe)} regions, first and last page each" + (f"; differ: layers {bad[:8]}" if bad else "")
        results["ipc"] = {"ok": ok, "detail": detail}
        rows.append(("another process opens the handles, reads the same bytes", "yes" if ok else "NO", detail))

    # 3. save_kv_layer's report waits for the layer's kernels
    checks = {}
    rec = RecordingClient(checks)
    settings = vw.WorkerSettings(engine_api_path="/nonexistent", engine_id="gpu-check", http_url="http://127.0.0.1:1",
                                 min_report_interval_s=0.0)
    worker = vw.WorkerSide(settings, block, a.blocks, connect=lambda *x, **k: rec)
    if pool is not None:
        worker.register_kv_caches(kv)
    else:  # the check of the reports does not need the mapping
        worker.client, worker.layout = rec, SimpleNamespace(num_layers=a.layers)
        worker._layers = {n: i for i, n in enumerate(names)}
    worker.bind_connector_metadata(OrbitKVPdMetadata(saving=[SaveChunk("r1", "v1", (0, 1), 32, 0, 32)]))
    call_us, kernel_ms = [], 2.0
    cycles = int(kernel_ms * 1e-3 * torch.cuda.get_device_properties(0).clock_rate * 1e3)  # clock_rate in kHz
    t0 = time.perf_counter()
    for i, n in enumerate(names):
        torch.cuda._sleep(cycles)       # the layer's attention, still running
        kv[n][1].fill_(float(i))        # ... and its KV write
        ev = torch.cuda.Event()
        ev.record()
        checks[i + 1] = ev
        c0 = time.perf_counter()
        worker.save_kv_layer(n, kv[n], None)
        call_us.append((time.perf_counter() - c0) * 1e6)
    worker.wait_for_save()
    torch.cuda.synchronize()
    gpu_end = time.perf_counter()
    deadline = time.time() + 10
    while len(rec.reports) < a.layers and time.time() < deadline:
        time.sleep(0.01)
    early = [r for r in rec.reports if r["gpu_done"] is False]
    layers_reported = sorted({r["layers"] for r in rec.reports})
    call_us.sort()
    results["save_kv_layer"] = {"kernel_ms_per_layer": kernel_ms, "calls": len(call_us), "call_us_p50": call_us[len(call_us) // 2],
                                "call_us_max": call_us[-1], "reports": len(rec.reports), "reports_before_gpu_done": len(early),
                                "layers_reported": layers_reported, "loop_ms": (gpu_end - t0) * 1e3}
    ok3 = not early and layers_reported == list(range(1, a.layers + 1)) and call_us[len(call_us) // 2] < 500
    rows.append(("save_kv_layer reports a layer only once its kernels completed", "yes" if ok3 else "NO",
                 f"{len(rec.reports)} reports, {len(early)} before the GPU was done; the call returns in {call_us[len(call_us) // 2]:.0f} µs p50 "
                 f"(max {call_us[-1]:.0f}) with {kernel_ms:g} ms of GPU work queued per layer"))
    worker.shutdown()

    w = max(len(r[0]) for r in rows)
    print(f"\nvLLM connector on {results['gpu']} (torch {results['torch']}), {a.layers} layers of {shape} bf16:")
    for r in rows:
        print(f"  {r[0]:<{w}}  {r[1]:<8} {r[2]}")
    results["rows"] = [{"check": r[0], "result": r[1], "detail": r[2]} for r in rows]
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "vllm-connector-gpu.json"), "w") as f:
        json.dump(results, f, indent=1)
    return 0 if all(r[1] == "yes" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
