"""``./orbitkv-pd bench vllm-connector``: what the vLLM connector adds on a request's handoff path over the engine API
alone, measured in this library as an engine sees it (docs/vllm.md, "Measured").

Two engines in this process join the same engine API server: one calls :class:`~orbitkv_pd.client.EngineApiClient`
itself (the engine API alone, as ``orbitkv_pd.sim_engine`` does), the other goes through
:class:`~orbitkv_pd.vllm.OrbitKVPdConnector` called as vLLM calls it (``orbitkv_pd.vllm_sim``: a scheduler-role and a
worker-role connector, vLLM's steps on the engine's step thread). Requests alternate between the two. The server is a
scripted engine API worker in a process of its own (so that it does not share this process's interpreter lock): it
acknowledges every fact, answers a decode-ready with ``kv_ready`` and a prefill-completed with its ``release``, and
stamps the wall clock of each (one host: one clock). Per request and path, in µs:

* **decode-ready**: the decode's blocks allocated → the worker has the fact (connector: ``update_state_after_alloc``,
  the step's ``build_connector_meta`` / ``bind_connector_metadata``, the report);
* **kv in**: the worker sends ``kv_ready`` → the engine may run the decode (alone: the waiting thread wakes with the
  signal; connector: the step thread's ``get_finished`` / ``update_connector_output`` made the request runnable, the
  point vLLM's next ``schedule`` runs it);
* **prefill-completed**: the prefill finished → the worker has the fact (connector: ``request_finished``, the next
  step's metadata, the report).

The engines are idle between requests, so a step comes as soon as the connector has work: on a busy vLLM a fact waits
for the running forward step to end (vLLM's cadence, the same for every connector), which this does not measure.

    python3 -m orbitkv_pd.bench_vllm_connector --requests 2000 --out docs/bench/vllm-connector.md \\
        --json bench/results/vllm-connector.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from types import SimpleNamespace
from typing import Any, Dict, List, Optional

from . import engine_model as em
from . import protocol as p
from .client import EngineApiClient, now_us
from .protocol import Decision, Layout, Registration, ShmPool

#: how long after a fact the scripted worker answers it
DECISION_DELAY_S = 0.003
#: a pause between a request's decode part and its prefill part: each path measured from a quiet process (the threads that
#: handled the KV's arrival done), in both engines alike
SETTLE_S = 0.002
LAYOUT = Layout(num_layers=4, num_blocks=4096, num_kv_heads=2, head_dim=64)
PATHS = ("decode-ready", "kv in", "prefill-completed")
#: a P/D handoff's critical path: the decode is ready while the prefill runs, so the prefill's fact completes the pair;
#: then the KV lands and the decode runs (a decode slower to get ready than the prefill puts its fact there instead)
CRITICAL = ("prefill-completed", "kv in")


# ---------------------------------------------------------------------------------------------------- the worker


def serve(path: str) -> None:
    """The scripted engine API worker: one thread per connection, every fact acknowledged with the wall clock it was read
    at (µs) as its event id; a decode-ready answered with ``kv_ready``, a prefill-completed with its ``release``."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen()
    print("SERVING", flush=True)

    def conn(c: socket.socket) -> None:
        c.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
        seq = 0
        engine = ""
        lock = threading.Lock()

        def send(frames: List[Dict[str, Any]]) -> None:
            with lock:
                try:
                    c.sendall(b"".join(p.encode(x) for x in frames))
                except OSError:
                    pass

        def later(m: Dict[str, Any]) -> None:
            # a decision comes a while after the fact (a real one waits for the other side, the decider, a push): sent on
            # its own, so that what the engine does right after the fact does not delay reading it
            def go() -> None:
                if m["kind"] == p.KV_READY:
                    m["timing"] = f"out={now_us()}"
                send([m])
            threading.Timer(DECISION_DELAY_S, go).start()
        while True:
            try:
                m = p.read_frame(c)
            except (OSError, p.ConnectionClosed):
                return
            if m is None:
                return
            at = now_us()
            op = m.get("op")
            out: List[Dict[str, Any]] = []
            if op == p.HELLO:
                engine = m["engine_id"]
                out.append({"op": p.WELCOME, "version": 1, "session": "bench", "engine_id": engine, "instance_epoch": m["instance_epoch"],
                            "last_seq": 0, "missed": 0, "new_instance": True, "endpoints": []})
            elif op == p.BYE:
                out.append({"op": p.BYE})
            elif "id" in m:
                out.append({"op": p.ACK, "id": m["id"], "event_id": str(at)})
                rid = m.get("request_id", "")
                if op == p.DECODE_READY:
                    seq += 1
                    later({"op": p.DECISION, "seq": seq, "decision_id": f"{rid}/kv", "request_id": rid, "kind": p.KV_READY,
                           "order_id": f"{rid}/a1", "bytes": 1 << 20, "fact_us": at, "worker_us": at})
                elif op == p.PREFILL_COMPLETED:
                    seq += 1
                    later({"op": p.DECISION, "seq": seq, "decision_id": f"{rid}/rel", "request_id": rid, "kind": p.RELEASE,
                           "side": "prefill", "engine_id": engine, "blocks": [], "reason": "transferred", "fact_us": at, "worker_us": at})
            if out:
                send(out)
            if op == p.BYE:
                c.close()
                return

    while True:
        try:
            c, _ = server.accept()
        except OSError:
            return
        threading.Thread(target=conn, args=(c,), daemon=True).start()


# ---------------------------------------------------------------------------------------------------- the engines


class _Backend:
    """What :class:`~orbitkv_pd.vllm_sim.VllmCallSites` needs of an engine: its layout, pool and step thread."""

    def __init__(self) -> None:
        from .sim_engine import Stepper
        self.layout = LAYOUT
        self.pool = None
        self.stepper = Stepper("both", em.Limits(8192, 256, 16, LAYOUT.num_blocks), em.per_token_costs(0.05, 2.0), name="bench", num_layers=4)


class Engines:
    def __init__(self, path: str) -> None:
        from .vllm_sim import VllmCallSites
        self.api = EngineApiClient.connect(path, Registration("bench-api", int(time.time() * 1000), "both", LAYOUT,
                                                              ShmPool("/dev/shm/bench-api.kv"), "bench", ""), on_decision=self._api_seen)
        self.api_released: Dict[str, None] = {}
        self.backend = _Backend()
        config = SimpleNamespace(role="both", model="bench", pool_path="/dev/shm/bench-vllm.kv")
        extra = {"engine_api_path": path, "engine_id": "bench-vllm", "http_url": "http://127.0.0.1:1", "lease_ms": 600_000}
        self.freed: List[str] = []
        self.pickups: List[int] = []
        self.vllm = VllmCallSites(config, self.backend, self.freed.append, extra).start()
        self.fact_us: Dict[str, int] = {}  # OrbitKV id + kind → when the worker read the fact
        self.out_us: Dict[str, int] = {}
        self.vllm.worker.worker_side.observers.append(self._seen)

    def _api_seen(self, d: Decision) -> None:
        if d.kind == p.RELEASE:
            self.api_released[d.request_id] = None

    @staticmethod
    def _until(what: str, done: Any) -> None:
        """Waits until ``done()``: each request ends with its release taken, so the next one (of the other engine) runs alone."""
        deadline = time.monotonic() + 10
        while not done():
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not happen within 10 s")
            time.sleep(0.0002)

    def _seen(self, d: Decision) -> None:
        self.fact_us[d.request_id + "/" + d.kind] = int(d.fields.get("fact_us", 0))
        self.out_us[d.request_id] = d.marks().get("out", 0)

    def api_request(self, rid: str, blocks: List[int]) -> Dict[str, float]:
        c = self.api
        t0 = now_us()
        kv = c.await_kv(rid)
        sent_at = time.monotonic()
        ready = c.decode_ready(rid, "lease-" + rid, 1, blocks, int(time.time() * 1000) + 600_000)
        # as an engine on the engine API does (orbitkv_pd.sim_engine): the lease is kept from the decode-ready on
        keeper = c.keep_lease(rid, "lease-" + rid, 1, 600_000, 200.0, sent_at, first=ready, waiting_interval_s=200.0)
        sig = kv.result(10)
        t1 = now_us()
        keeper.kv_in()
        decode_ready = int(ready.result(10)) - t0
        kv_in = t1 - sig.decided_us
        c.forget(rid)
        time.sleep(SETTLE_S)
        t2 = now_us()
        fact = int(c.prefill_completed(rid, blocks, len(blocks) * 16, 7).result(10)) - t2
        keeper.stop()  # after: stopping joins its thread, which would weigh on the prefill's report
        self._until(f"{rid}: the release", lambda: rid in self.api_released)
        return {"decode-ready": decode_ready, "kv in": kv_in, "prefill-completed": fact}

    def vllm_request(self, rid: str, blocks: List[int]) -> Dict[str, float]:
        v = self.vllm
        tokens = list(range(len(blocks) * 16))
        t = v.admit(rid, tokens, {"request_id": rid, "do_remote_prefill": True}, blocks, "D:" + rid, "decode")
        if v.wait_loaded(t, 10) is not True:
            raise RuntimeError(f"{rid}: the KV did not load")
        kv_in = t.loaded_us - self.out_us[rid]
        self.pickups.append(t.pickup_us)
        # from vLLM's allocation (update_state_after_alloc, on the engine's step thread): the request's way into the
        # engine loop before it is every engine's own, not the connector's
        decode_ready = self.fact_us[rid + "/kv_ready"] - t.admitted_us
        v.finish(t, "FINISHED_LENGTH_CAPPED", [1])
        time.sleep(SETTLE_S)
        pf = v.admit(rid, tokens, {"request_id": rid, "do_remote_decode": True}, blocks, "P:" + rid, "prefill")
        v.finish(pf, "FINISHED_LENGTH_CAPPED", [7])
        t2 = pf.finished_us  # request_finished, on the step thread
        self._until(f"{rid}: the release", lambda: rid + "/release" in self.fact_us)
        self._until(f"{rid}: its blocks freed", lambda: not v.kept_count())
        return {"decode-ready": decode_ready, "kv in": kv_in, "prefill-completed": self.fact_us[rid + "/release"] - t2}

    def close(self) -> None:
        self.vllm.close()
        self.backend.stepper.close()
        self.api.close()


# ---------------------------------------------------------------------------------------------------- the run


def pct(v: List[float], q: float) -> float:
    s = sorted(v)
    return s[min(len(s) - 1, int(q / 100 * len(s)))]


def run(requests: int, warmup: int, blocks: int) -> Dict[str, Any]:
    d = tempfile.mkdtemp(prefix="orbitkv-bench-vllm-")
    path = os.path.join(d, "worker.sock")
    server = subprocess.Popen([sys.executable, "-m", "orbitkv_pd.bench_vllm_connector", "--serve", path], stdout=subprocess.PIPE,
                              cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        assert server.stdout is not None
        if server.stdout.readline().strip() != b"SERVING":
            raise RuntimeError("the scripted worker did not start")
        engines = Engines(path)
        got: Dict[str, Dict[str, List[float]]] = {"engine API alone": {k: [] for k in PATHS}, "vLLM connector": {k: [] for k in PATHS}}
        ids = list(range(blocks))
        try:
            for i in range(warmup + requests):
                for name, call in (("engine API alone", engines.api_request), ("vLLM connector", engines.vllm_request)) \
                        if i % 2 == 0 else (("vLLM connector", engines.vllm_request), ("engine API alone", engines.api_request)):
                    r = call(f"bench-{i}-{name[0]}", ids)
                    if i >= warmup:
                        for k in PATHS:
                            got[name][k].append(r[k])
            steps = engines.vllm.steps_without_forward
            pickups = engines.pickups[warmup:]
        finally:
            engines.close()
    finally:
        server.kill()
        server.wait()
    return {"requests": requests, "warmup": warmup, "blocks": blocks, "samples": got, "connector_steps": steps, "pickups": pickups}


def report(res: Dict[str, Any]) -> Dict[str, Any]:
    g = res["samples"]
    rows = []
    over = 0.0
    for k in PATHS:
        a, c = g["engine API alone"][k], g["vLLM connector"][k]
        row = {"path": k, "api_p50_us": statistics.median(a), "api_p99_us": pct(a, 99), "vllm_p50_us": statistics.median(c),
               "vllm_p99_us": pct(c, 99)}
        row["added_p50_us"] = row["vllm_p50_us"] - row["api_p50_us"]
        over += row["added_p50_us"]
        rows.append(row)
    path = sum(r["added_p50_us"] for r in rows if r["path"] in CRITICAL)
    return {"rows": rows, "added_p50_us_total": over, "added_p50_us_path": path, "pickup_p50_us": statistics.median(res["pickups"])}


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="orbitkv-pd bench vllm-connector", description=__doc__.split("\n\n")[0])
    ap.add_argument("--serve", help=argparse.SUPPRESS)
    ap.add_argument("--requests", type=int, default=2000, help="measured requests per engine (default: 2000)")
    ap.add_argument("--warmup", type=int, default=200, help="requests per engine before measuring (default: 200)")
    ap.add_argument("--blocks", type=int, default=64, help="pages a request holds (default: 64, 1,024 tokens)")
    ap.add_argument("--out", default="docs/bench/vllm-connector.md")
    ap.add_argument("--json", default="bench/results/vllm-connector.json")
    a = ap.parse_args(argv)
    if a.serve:
        serve(a.serve)
        return 0
    if a.requests < 10 or a.warmup < 0 or a.blocks < 1:
        ap.error("--requests >= 10, --warmup >= 0, --blocks >= 1")
    print(f"vLLM connector vs the engine API alone: {a.warmup} + {a.requests} requests each, alternating, {a.blocks} pages a request ...",
          flush=True)
    res = run(a.requests, a.warmup, a.blocks)
    rep = report(res)
    lines = ["| path | engine API alone p50 / p99 (µs) | vLLM connector p50 / p99 (µs) | added p50 (µs) |", "| --- | --- | --- | --- |"]
    for r in rep["rows"]:
        lines.append(f"| {r['path']} | {r['api_p50_us']:.0f} / {r['api_p99_us']:.0f} | {r['vllm_p50_us']:.0f} / {r['vllm_p99_us']:.0f} | "
                     f"{r['added_p50_us']:+.0f} |")
    lines.append(f"| **the handoff's path** (prefill-completed + kv in) | | | **{rep['added_p50_us_path']:+.0f}** |")
    lines.append(f"| all three | | | {rep['added_p50_us_total']:+.0f} |")
    table = "\n".join(lines)
    print(table)
    target = rep["added_p50_us_path"] <= 100
    verdict = (f"added on the handoff's path (p50: prefill-completed + kv in): {rep['added_p50_us_path']:.0f} µs; target <= 100 µs: "
               f"{'met' if target else 'NOT met'}; all three paths summed {rep['added_p50_us_total']:.0f} µs. Of kv in's, the engine "
               f"loop's pickup (the step thread waking for a step without a forward pass) {rep['pickup_p50_us']:.0f} µs p50")
    print(verdict)
    when = time.strftime("%Y-%m-%d")
    md = [f"# The vLLM connector's cost on the handoff's path ({when})", "",
          f"`./orbitkv-pd bench vllm-connector --requests {a.requests} --warmup {a.warmup} --blocks {a.blocks}` on {platform.node()} "
          f"({os.cpu_count()} cores, Python {platform.python_version()}). What is measured and how: `python/orbitkv_pd/bench_vllm_connector.py`"
          " (two engines in one process on one scripted engine API worker in another; requests alternate; the connector called as vLLM"
          " calls it by `orbitkv_pd.vllm_sim`, its steps coming as soon as it has work: an idle engine).", "", table, "",
          verdict + ".", "",
          f"The connector engine ran {res['connector_steps']} steps without a forward pass (vLLM's `kv_connector_no_forward`).", ""]
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        f.write("\n".join(md))
    os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
    with open(a.json, "w") as f:
        json.dump({"date": when, "requests": a.requests, "warmup": a.warmup, "blocks": a.blocks, **rep,
                   "connector_steps": res["connector_steps"]}, f, indent=1)
    print(f"wrote {a.out} and {a.json}")
    return 0 if target else 1


if __name__ == "__main__":
    sys.exit(main())
