"""The Python library against real transfer workers, a real decider and a real broker.

Run by the Java integration test cli/src/test/java/io/orbitkv/pd/cli/PythonEngineLibraryIT.java, which starts the
broker, the decider and one worker per engine (engine API on), passes their sockets in the environment, and admits
requests on this test's behalf (what the proxy does): this test prints ``ADMIT <request> <prefill> <decode>`` and
waits for ``OK <request>`` on its standard input. Each request here is a whole P/D handoff between two engines that
exist only as this library: pages written into a shared pool, pushed by the workers, checked byte for byte.
"""

from __future__ import annotations

import os
import sys
import time
import unittest
import uuid
from typing import List

from orbitkv_pd import EngineApiClient, KvSignal, Layout, Registration, ShmPool
from orbitkv_pd import sim_model as sm
from orbitkv_pd.pool import ShmKvPool

ENV = os.environ
LAYOUT = Layout(num_layers=2, num_blocks=64, block_size_tokens=16, num_kv_heads=1, head_dim=64, dtype="bf16")
MODEL = sm.SimModel(42)
LEASE_MS = 30_000


def admit(request_id: str) -> None:
    print(f"ADMIT {request_id} prefill-py decode-py", flush=True)
    line = sys.stdin.readline().strip()
    if line != f"OK {request_id}":
        raise AssertionError(f"the harness did not admit {request_id}: {line!r}")


def wait_for(predicate, timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


class EngineApiIT(unittest.TestCase):
    prefill: EngineApiClient
    decode: EngineApiClient

    @classmethod
    def setUpClass(cls) -> None:
        shm = ENV["ORBITKV_IT_SHM_DIR"]
        tag = uuid.uuid4().hex[:8]
        cls.prefill_path = os.path.join(shm, f"orbitkv-pyit-{tag}-prefill.kv")
        cls.decode_path = os.path.join(shm, f"orbitkv-pyit-{tag}-decode.kv")
        cls.prefill_pool = ShmKvPool(LAYOUT, cls.prefill_path)
        cls.decode_pool = ShmKvPool(LAYOUT, cls.decode_path)
        epoch = int(time.time() * 1000)
        cls.decode_reg = Registration("decode-py", epoch + 1, "decode", LAYOUT, ShmPool(cls.decode_path), "sim-it", "")
        cls.released: List = []
        cls.prefill = EngineApiClient.connect(ENV["ORBITKV_IT_PREFILL_SOCKET"], Registration(
            "prefill-py", epoch, "prefill", LAYOUT, ShmPool(cls.prefill_path), "sim-it", ""), on_decision=cls.released.append)
        cls.decode = EngineApiClient.connect(ENV["ORBITKV_IT_DECODE_SOCKET"], cls.decode_reg)

    @classmethod
    def tearDownClass(cls) -> None:
        cls.prefill.close()
        cls.decode.close()
        cls.prefill_pool.close()
        cls.decode_pool.close()
        for p in (cls.prefill_path, cls.decode_path):
            if os.path.exists(p):
                os.unlink(p)

    def releases(self, request_id: str, side: str) -> List:
        return [d for d in self.released if d.request_id == request_id and d.kind == "release" and d.fields.get("side") == side]

    def prefill_request(self, rid: str, prompt: str, blocks: List[int]) -> List[int]:
        tokens = sm.tokenize(prompt)
        blocks = blocks[:sm.blocks_for(LAYOUT, len(tokens))]
        MODEL.write_kv(self.prefill_pool, blocks, tokens)
        first = MODEL.generate(tokens, 1)[0]
        self.assertEqual(self.prefill.prefill_completed(rid, blocks, len(tokens), first).result(20), f"{rid}/prefill-completed")
        return tokens

    def test_1_a_whole_handoff_moves_the_pages_and_releases_both_sides(self) -> None:
        rid = "py-handoff-" + uuid.uuid4().hex[:6]
        prompt = "disaggregated prefill and decode, with the KV cache handed over " * 3
        admit(rid)
        dst = [40, 41, 42, 43, 44, 45, 46][:sm.blocks_for(LAYOUT, len(sm.tokenize(prompt)))]
        kv = self.decode.await_kv(rid)
        self.decode.decode_ready(rid, f"lease/{rid}", 1, dst, int(time.time() * 1000) + LEASE_MS).result(20)
        lease = self.decode.keep_lease(rid, f"lease/{rid}", 1, LEASE_MS, interval_s=1.0)
        tokens = self.prefill_request(rid, prompt, [3, 4, 5, 6, 7, 8, 9])
        signal: KvSignal = kv.result(60)
        lease.stop()
        self.assertEqual(signal.kind, "ready", signal.reason)
        self.assertEqual(signal.bytes, sm.blocks_for(LAYOUT, len(tokens)) * LAYOUT.page * LAYOUT.region_count)
        self.assertGreater(signal.decided_us, 0, "the decider's timing mark travels with the decision")
        self.assertIsNone(MODEL.verify_kv(self.decode_pool, dst, tokens))
        self.decode.decode_completed(rid, 16).result(20)
        wait_for(lambda: self.releases(rid, "prefill"), what="the prefill pages' release")
        self.assertEqual(self.releases(rid, "prefill")[0].blocks(), [3, 4, 5, 6, 7, 8, 9][:len(dst)])

    def test_2_a_cancel_ends_the_wait_and_frees_the_pages(self) -> None:
        rid = "py-cancel-" + uuid.uuid4().hex[:6]
        admit(rid)
        kv = self.decode.await_kv(rid)
        self.decode.decode_ready(rid, f"lease/{rid}", 1, [50, 51], int(time.time() * 1000) + LEASE_MS).result(20)
        self.decode.cancel(rid, "the client went away").result(20)
        signal = kv.result(60)
        self.assertEqual(signal.kind, "ended")

    def test_3_a_lease_nobody_renews_expires_and_its_pages_are_released(self) -> None:
        rid = "py-lease-" + uuid.uuid4().hex[:6]
        admit(rid)
        kv = self.decode.await_kv(rid)
        # No heartbeats, and no prefill ever: the decider's lease timer ends it.
        self.decode.decode_ready(rid, f"lease/{rid}", 1, [55, 56], int(time.time() * 1000) + 1000).result(20)
        signal = kv.result(60)
        self.assertEqual(signal.kind, "ended")

    def test_4_an_engine_that_vanishes_mid_request_and_comes_back_misses_no_decision(self) -> None:
        rid = "py-reconnect-" + uuid.uuid4().hex[:6]
        prompt = "an engine that reconnects at the same instance epoch resumes its decisions " * 2
        admit(rid)
        dst = [57, 58, 59, 60, 61, 62, 63][:sm.blocks_for(LAYOUT, len(sm.tokenize(prompt)))]
        self.decode.decode_ready(rid, f"lease/{rid}", 1, dst, int(time.time() * 1000) + LEASE_MS).result(20)
        session, seen = self.decode.session, self.decode.last_seq
        self.decode.abandon()  # gone without a goodbye, mid-request
        tokens = self.prefill_request(rid, prompt, [20, 21, 22, 23, 24, 25, 26])
        # The transfer happens while the engine is away; its KvReady waits in the worker's buffer.
        time.sleep(1.0)
        back = EngineApiClient.connect(ENV["ORBITKV_IT_DECODE_SOCKET"], self.decode_reg, resume=(session, seen))
        type(self).decode = back
        self.assertFalse(back.welcome["new_instance"])
        self.assertEqual(back.welcome["missed"], 0)
        got = None
        for d in back.decisions(timeout=30):
            if d.request_id == rid and d.kind == "kv_ready":
                got = d
                break
        self.assertIsNotNone(got, "the KvReady decided while the engine was away")
        self.assertIsNone(MODEL.verify_kv(self.decode_pool, dst, tokens))
        back.decode_completed(rid, 4).result(20)
        print(f"DONE {rid}", flush=True)


if __name__ == "__main__":
    unittest.main()
