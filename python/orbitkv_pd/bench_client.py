"""The Python side of ``./orbitkv-pd bench engine-api``: the latency of one fact (call -> the worker says the broker has
it) and of one decision (the decider's ``out`` mark -> this process read it) through the engine API, measured in this
library as an engine would see them. Driven by the Java benchmark over standard input/output:

    READY <session>          (printed once registered)
    facts <n>                (read) -> runs n prefill_completed reports one after another, prints FACTS_DONE
    decisions <n>            (read) -> waits for n kv_ready decisions, prints DECISIONS_DONE
    result                   (read) -> prints one JSON line: {"fact_us": [...], "decision_us": [...], "ping_us": [...]}
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from typing import List

from .client import EngineApiClient, now_us
from .protocol import Decision, Layout, Registration, ShmPool


def main() -> int:
    ap = argparse.ArgumentParser(prog="python3 -m orbitkv_pd.bench_client")
    ap.add_argument("--socket", required=True)
    ap.add_argument("--engine", required=True)
    ap.add_argument("--epoch", type=int, required=True)
    ap.add_argument("--pool", required=True)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--blocks", type=int, default=64)
    args = ap.parse_args()
    decision_us: List[int] = []
    seen = threading.Condition()

    def on_decision(d: Decision) -> None:
        out = d.marks().get("out", 0)
        if d.kind == "kv_ready" and out > 0:
            with seen:
                decision_us.append(d.received_us - out)
                seen.notify_all()

    layout = Layout(num_layers=args.layers, num_blocks=args.blocks, num_kv_heads=2, head_dim=64)
    client = EngineApiClient.connect(args.socket, Registration(args.engine, args.epoch, "both", layout, ShmPool(args.pool), "bench", ""),
                                     on_decision=on_decision)
    print(f"READY {client.session}", flush=True)
    fact_us: List[int] = []
    ping_us: List[int] = []
    blocks = list(range(16))
    for line in sys.stdin:
        cmd = line.split()
        if not cmd:
            continue
        if cmd[0] == "facts":
            for i in range(int(cmd[1])):
                t0 = time.perf_counter_ns()
                client.prefill_completed(f"py-fact-{args.epoch}-{i}", blocks, 250, 7, marks={"in": now_us()}).result(30)
                fact_us.append((time.perf_counter_ns() - t0) // 1000)
                t0 = time.perf_counter_ns()
                client.ping().result(30)
                ping_us.append((time.perf_counter_ns() - t0) // 1000)
            print("FACTS_DONE", flush=True)
        elif cmd[0] == "decisions":
            want = int(cmd[1])
            with seen:
                seen.wait_for(lambda: len(decision_us) >= want, timeout=120)
            print("DECISIONS_DONE", flush=True)
        elif cmd[0] == "result":
            print(json.dumps({"fact_us": fact_us, "decision_us": decision_us, "ping_us": ping_us}), flush=True)
            break
    client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
