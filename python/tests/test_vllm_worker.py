"""The worker half of the vLLM connector and the connector class, called as vLLM's model runner and scheduler call them
(docs/vllm.md, the pinned release), against a scripted engine API server: what goes to the worker, and what the
decisions turn into (finished sending / receiving, load errors). No vLLM: objects with the attributes vLLM passes."""

from __future__ import annotations

import os
import socket
import tempfile
import threading
import time
import unittest
from types import SimpleNamespace
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

from orbitkv_pd.protocol import CudaIpcPool, Layout, ShmPool
from orbitkv_pd.vllm import OrbitKVPdConnector
from orbitkv_pd.vllm_scheduler import DecodeReady, OrbitKVPdMetadata, PrefillCompleted, RequestEnded, SaveChunk
from orbitkv_pd.vllm_worker import KvLayoutRefused, WorkerSettings, map_kv_caches

from tests.test_client import FakeWorker, decision, welcome


class Tensor:
    """The attributes of a torch tensor ``map_kv_caches`` reads."""

    def __init__(self, shape: Tuple[int, ...], dtype: str = "torch.bfloat16", ptr: int = 0x1000, contiguous: bool = True,
                 device: str = "cuda") -> None:
        self.shape, self.dtype, self._ptr, self._contiguous = shape, dtype, ptr, contiguous
        self.device = SimpleNamespace(type=device, index=0)

    def is_contiguous(self) -> bool:
        return self._contiguous

    def data_ptr(self) -> int:
        return self._ptr

    def element_size(self) -> int:
        return 2


def handles(ptr: int) -> Tuple[bytes, int]:
    return ptr.to_bytes(8, "little") * 8, 0


class KvCacheMappingTest(unittest.TestCase):

    def test_vllms_flash_attention_layout_is_one_fused_region_per_layer(self) -> None:
        # (num_blocks, num_kv_heads, block_size, 2 * head_size), the pinned release's FlashAttention cache
        caches = {f"model.layers.{i}.self_attn.attn": Tensor((100, 8, 16, 256), ptr=0x1000 * (i + 1)) for i in range(3)}
        layout, pool = map_kv_caches(caches, 16, 100, handles)
        self.assertEqual((layout.num_layers, layout.num_blocks, layout.kv_split, layout.page, layout.region_count),
                         (3, 100, "fused", 8 * 16 * 256 * 2, 3))
        self.assertIsInstance(pool, CudaIpcPool)
        self.assertEqual([(r.layer, r.part, r.length_bytes) for r in pool.regions], [(i, "KV", 100 * 8 * 16 * 256 * 2) for i in range(3)])

    def test_what_the_worker_cannot_map_is_refused_saying_why(self) -> None:
        for caches, why in (({"a": Tensor((2, 100, 16, 8, 128))}, "K and V first"),
                            ({"a": Tensor((100, 8, 16, 256), contiguous=False)}, "not contiguous"),
                            ({"a": Tensor((100, 8, 16, 256)), "b": Tensor((100, 4, 16, 256))}, "one layout for every layer"),
                            ({"a": Tensor((100, 8, 16, 256), device="cpu")}, "CUDA IPC"),
                            ({"a": Tensor((100, 8, 16, 256), dtype="torch.complex64")}, "dtype"),
                            ({"a": Tensor((100, 8, 32, 256))}, "block size 16"),
                            ({}, "no KV cache tensors")):
            with self.subTest(why=why), self.assertRaisesRegex(KvLayoutRefused, why):
                map_kv_caches(caches, 16, 100, handles)
        with self.assertRaisesRegex(KvLayoutRefused, "starts 256 bytes into its CUDA allocation"):
            map_kv_caches({"a": Tensor((100, 8, 16, 256))}, 16, 100, lambda ptr: (b"\0" * 64, 256))


class SettingsTest(unittest.TestCase):

    def test_a_wrong_setting_is_refused_naming_the_key(self) -> None:
        ok = {"engine_api_path": "/s", "engine_id": "d-0", "http_url": "http://h:8000"}
        for extra, why in (({**ok, "lease": 5}, "lease: not an OrbitKV connector setting"),
                           ({"engine_id": "d-0", "http_url": "u"}, "engine_api_path: required"),
                           ({**ok, "lease_ms": "5s"}, "lease_ms: a int"),
                           ({**ok, "lease_ms": 0}, "lease_ms: must be positive"),
                           ({**ok, "role": "kv_both"}, "role: prefill, decode or both")):
            with self.subTest(why=why), self.assertRaisesRegex(ValueError, why):
                WorkerSettings.from_extra(extra)
        s = WorkerSettings.from_extra({**ok, "heartbeat_ms": 500, "layerwise_min_report_interval_ms": 0.5}, "decode", "m")
        self.assertEqual((s.role, s.model, s.heartbeat_s, s.min_report_interval_s), ("decode", "m", 0.5, 0.0005))

    def test_the_connector_reads_vllms_own_config_and_refuses_what_it_cannot_do(self) -> None:
        cfg = vllm_config("/s", kv_role="kv_consumer")
        c = OrbitKVPdConnector(cfg, SimpleNamespace(name="SCHEDULER"), SimpleNamespace(num_blocks=64))
        self.assertEqual((c.role, c.settings.role, c.settings.model), ("SCHEDULER", "decode", "served"))
        with self.assertRaisesRegex(RuntimeError, "worker call on the scheduler's connector"):
            c.get_finished(set())
        cfg.parallel_config.tensor_parallel_size = 2
        with self.assertRaisesRegex(ValueError, "tensor_parallel_size 2"):
            OrbitKVPdConnector(cfg, "WORKER", None)


def vllm_config(path: str, kv_role: str = "kv_both", **extra: Any) -> Any:
    return SimpleNamespace(
        kv_transfer_config=SimpleNamespace(kv_role=kv_role, kv_connector_extra_config={
            "engine_api_path": path, "engine_id": "e-0", "http_url": "http://127.0.0.1:8000", "instance_epoch": 7, **extra}),
        cache_config=SimpleNamespace(block_size=16), model_config=SimpleNamespace(served_model_name=["served"], model="m"),
        parallel_config=SimpleNamespace(tensor_parallel_size=1))


class SimLayer:
    def __init__(self, layout: Layout, layer: int, pool: object) -> None:
        self.layout, self.path, self.layer, self.orbitkv_pool = layout, "/dev/shm/e-0.kv", layer, pool


class WorkerHalfTest(unittest.TestCase):

    def setUp(self) -> None:
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "w.sock")
        self.sent: List[Dict[str, Any]] = []
        self.conn: Optional[socket.socket] = None
        self.seq = 0
        self.got = threading.Condition()

        def on(w: FakeWorker, c: socket.socket, m: Dict[str, Any]) -> None:
            self.conn = c
            if m["op"] == "hello":
                welcome(c)
            elif m["op"] == "bye":
                w.send(c, {"op": "bye"})
            elif "id" in m:
                w.send(c, {"op": "ack", "id": m["id"], "event_id": f"{m.get('request_id')}/{m['op']}"})
            with self.got:
                self.sent.append(m)
                self.got.notify_all()
        self.worker = FakeWorker(self.path, on)
        self.connector = OrbitKVPdConnector(vllm_config(self.path, heartbeat_ms=50, lease_ms=3000, layerwise_min_report_interval_ms=0.0),
                                            "WORKER", SimpleNamespace(num_blocks=64))
        pool = object()
        layout = Layout(num_layers=4, num_blocks=64)
        self.connector.register_kv_caches({f"layer.{i}": SimLayer(layout, i, pool) for i in range(4)})
        self.woken = threading.Event()
        self.connector.worker_side.on_finished = self.woken.set

    def tearDown(self) -> None:
        self.connector.shutdown()
        self.worker.close()
        self.dir.cleanup()

    def frames(self, op: str, n: int = 1) -> List[Dict[str, Any]]:
        with self.got:
            self.assertTrue(self.got.wait_for(lambda: len([m for m in self.sent if m["op"] == op]) >= n, 5), f"{n} {op} frames")
            return [m for m in self.sent if m["op"] == op]

    def decide(self, rid: str, kind: str, **fields: Any) -> None:
        self.seq += 1
        assert self.conn is not None
        FakeWorker.send(self.conn, decision(self.seq, rid, kind, **fields))

    def finished(self, timeout: float = 5.0) -> Tuple[Set[str], Set[str], Set[int]]:
        """Steps (as vLLM's engine loop) until something finished."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.woken.wait(0.05)
            self.woken.clear()
            sending, recving = self.connector.get_finished(set())
            errors = self.connector.get_block_ids_with_load_errors()
            if sending or recving or errors:
                return sending or set(), recving or set(), errors
        self.fail("nothing finished")

    def test_the_hello_registers_vllms_cache_as_the_pool(self) -> None:
        hello = self.frames("hello")[0]
        self.assertEqual((hello["engine_id"], hello["instance_epoch"], hello["role"], hello["model"], hello["http_url"]),
                         ("e-0", 7, "both", "served", "http://127.0.0.1:8000"))
        self.assertEqual((hello["pool"], hello["layout"]["num_layers"]), ({"kind": "shm", "path": "/dev/shm/e-0.kv"}, 4))

    def test_a_decode_announces_its_pages_under_a_lease_and_runs_once_its_kv_is_in(self) -> None:
        self.connector.bind_connector_metadata(OrbitKVPdMetadata(decode_ready=[DecodeReady("r1", "v1", (3, 4, 5), 40, 1)]))
        self.connector.clear_connector_metadata()
        ready = self.frames("decode_ready")[0]
        self.assertEqual((ready["request_id"], ready["dest_blocks"], ready["cached_blocks"], ready["lease_id"]),
                         ("r1", [3, 4, 5], 1, "lease/e-0/r1"))
        self.frames("heartbeat", 2)  # the lease is kept while the KV is awaited
        self.decide("r1", "kv_ready", order_id="r1/a1", bytes=4096)
        self.assertEqual(self.finished(), (set(), {"v1"}, set()))
        self.connector.bind_connector_metadata(OrbitKVPdMetadata(ended=[RequestEnded("r1", "v1", "decode", 8, True, "FINISHED_LENGTH_CAPPED")]))
        done = self.frames("decode_completed")[0]
        self.assertEqual((done["output_tokens"], done["recomputed"]), (8, False))
        self.assertRegex(done["timing"], r"kv=\d+", "when the KV arrived: the handoff's anatomy reads it")
        # its lease left the heartbeat table before the fact was sent, and heartbeats go out under the table's lock: none
        # follows (one sent before it arrived before it, on the same connection)
        self.assertNotIn("r1", self.connector.worker_side._heartbeats._leases)
        ops = [m["op"] for m in self.sent if m.get("request_id") == "r1"]
        self.assertNotIn("heartbeat", ops[ops.index("decode_completed"):], "no heartbeat after the decode ended")

    def test_a_recompute_decision_is_a_load_error_of_the_blocks_the_order_would_have_moved(self) -> None:
        self.connector.bind_connector_metadata(OrbitKVPdMetadata(decode_ready=[DecodeReady("r2", "v2", (3, 4, 5), 40, 1)]))
        self.frames("decode_ready")
        self.decide("r2", "recompute", reason="prefill failed")
        self.assertEqual(self.finished(), (set(), {"v2"}, {4, 5}))
        self.connector.bind_connector_metadata(OrbitKVPdMetadata(ended=[RequestEnded("r2", "v2", "decode", 8, True, "FINISHED_LENGTH_CAPPED")]))
        self.assertTrue(self.frames("decode_completed")[0]["recomputed"])

    def test_a_handoff_that_ended_is_finished_receiving_with_load_errors_and_reports_nothing_more(self) -> None:
        self.connector.bind_connector_metadata(OrbitKVPdMetadata(decode_ready=[DecodeReady("r3", "v3", (6, 7), 20, 0)]))
        self.frames("decode_ready")
        self.decide("r3", "release", side="decode", engine_id="e-0", lease_id="lease/e-0/r3", lease_epoch=1, reason="lease expired")
        self.decide("r3", "outcome", outcome="timed_out", reason="lease expired")
        self.assertEqual(self.finished(), (set(), {"v3"}, {6, 7}))
        self.connector.bind_connector_metadata(OrbitKVPdMetadata(ended=[RequestEnded("r3", "v3", "decode", 0, False, "FINISHED_ABORTED")]))
        self.assertEqual(self.connector.get_finished(set()), (None, None), "reported once")
        self.assertEqual([m for m in self.sent if m["op"] in ("cancel", "decode_completed")], [])

    def test_an_outcome_before_the_release_does_not_free_the_blocks_a_push_may_still_drain_into(self) -> None:
        self.connector.bind_connector_metadata(OrbitKVPdMetadata(decode_ready=[DecodeReady("r7", "v7", (4, 5), 20, 0)]))
        self.frames("decode_ready")
        # the decider's outcome comes at once; its release of the pages only once the push was fenced (drained)
        acted = threading.Event()
        self.connector.worker_side.observers.append(lambda d: acted.set() if d.kind == "outcome" else None)
        self.decide("r7", "outcome", outcome="cancelled", reason="client went away")
        self.assertTrue(acted.wait(5), "the outcome reached the worker half")
        self.assertEqual(self.connector.get_finished(set()), (None, None),
                         "finished receiving before the release: vLLM would reuse blocks a push may still write")
        self.decide("r7", "release", side="decode", engine_id="e-0", lease_id="lease/e-0/r7", lease_epoch=1, reason="cancelled")
        self.assertEqual(self.finished()[1], {"v7"})

    def test_a_decode_whose_kv_cannot_come_is_a_load_error_at_once(self) -> None:
        self.connector.bind_connector_metadata(OrbitKVPdMetadata(refused=[("v8", (1, 2))]))
        self.assertEqual(self.finished(), (set(), {"v8"}, {1, 2}))

    def test_a_decode_aborted_while_waiting_is_cancelled_and_finished_receiving_once_the_decider_released_it(self) -> None:
        self.connector.bind_connector_metadata(OrbitKVPdMetadata(decode_ready=[DecodeReady("r4", "v4", (8,), 10, 0)]))
        self.connector.bind_connector_metadata(OrbitKVPdMetadata(ended=[RequestEnded("r4", "v4", "decode", 0, False, "FINISHED_ABORTED", held=True)]))
        self.assertIn("FINISHED_ABORTED", self.frames("cancel")[0]["reason"])
        # vLLM keeps its blocks until it is finished receiving: not before the decider released them (a push may still write)
        self.assertEqual(self.connector.get_finished(set()), (None, None))
        self.decide("r4", "release", side="decode", engine_id="e-0", lease_id="lease/e-0/r4", lease_epoch=1, reason="cancelled")
        self.assertEqual(self.finished(), (set(), {"v4"}, {8}))
        self.assertEqual(self.connector.get_finished(set()), (None, None), "reported once")

    def test_a_prefill_reports_layer_by_layer_then_whole_and_its_blocks_go_once_released(self) -> None:
        chunk = SaveChunk("r5", "v5", (1, 2, 3), 40, 0, 32)
        self.connector.bind_connector_metadata(OrbitKVPdMetadata(saving=[chunk]))
        self.connector.start_load_kv(None)
        for i in range(4):
            self.connector.wait_for_layer_load(f"layer.{i}")
            self.connector.save_kv_layer(f"layer.{i}", None, None)
        self.connector.wait_for_save()
        self.connector.clear_connector_metadata()
        self.connector.bind_connector_metadata(OrbitKVPdMetadata(saving=[SaveChunk("r5", "v5", (1, 2, 3), 40, 32, 40)]))
        self.connector.save_kv_layer("layer.0", None, None)
        self.connector.wait_for_save()  # the rest of the step's layers at its end
        progress = [(m.get("source_blocks"), m["done_tokens"], m["chunk_end"], m["layers"]) for m in self.frames("prefill_progress", 6)]
        self.assertEqual(progress, [([1, 2, 3], 0, 32, 1), (None, 0, 32, 2), (None, 0, 32, 3), (None, 32, 32, 4), (None, 32, 40, 1),
                                    (None, 40, 40, 4)])
        self.connector.bind_connector_metadata(OrbitKVPdMetadata(prefill_completed=[PrefillCompleted("r5", "v5", (1, 2, 3), 40, 99, 10, 0, 30)]))
        done = self.frames("prefill_completed")[0]
        self.assertEqual((done["source_blocks"], done["num_tokens"], done["first_token"], done["timing"]), ([1, 2, 3], 40, 99, "in=10,c1=30"))
        self.assertEqual(self.connector.get_finished(set()), (None, None))
        self.decide("r5", "release", side="prefill", engine_id="e-0", reason="transferred")
        self.assertEqual(self.finished()[0], {"v5"})

    def test_a_prefill_vllm_ended_early_is_reported_failed(self) -> None:
        self.connector.bind_connector_metadata(OrbitKVPdMetadata(ended=[RequestEnded("r6", "v6", "prefill", 0, False, "FINISHED_ERROR")]))
        f = self.frames("prefill_failed")[0]
        self.assertEqual((f["request_id"], f["retriable"]), ("r6", True))
        self.assertIn("FINISHED_ERROR", f["reason"])


if __name__ == "__main__":
    unittest.main()


class CallSitesLayerSaveTest(unittest.TestCase):
    """The simulated engine's vLLM call sites save a layer (``save_kv_layer``) only once the model wrote its bytes: the
    layer's push reads them. A prefill whose writer has not finished its first layer has written none (CI saw layers
    saved before the request thread wrote them, and the decode engine's check refused the KV)."""

    def test_a_layer_is_saved_only_after_its_bytes_are_written_even_before_the_first_layer_is(self) -> None:
        from orbitkv_pd.vllm_sim import VllmCallSites
        v = VllmCallSites.__new__(VllmCallSites)
        saved: List[Tuple[str, int]] = []
        v.layer_names = [VllmCallSites.LAYER.format(i) for i in range(2)]
        v.kv_caches = {n: None for n in v.layer_names}
        v.worker = SimpleNamespace(wait_for_layer_load=lambda name: None,
                                   save_kv_layer=lambda name, cache, meta: saved.append((name, v._filled.get("r-1", 0))))
        v._fill, v._filled, v._saving_rids, v._saved = threading.Condition(), {}, ["r-1"], 0
        step = threading.Thread(target=v.layers_done, args=(2,), daemon=True)
        step.start()
        step.join(0.2)
        self.assertTrue(step.is_alive(), "a layer was saved before any of its bytes were written")
        self.assertEqual([], saved)
        v.filled("r-1", 1)
        v.filled("r-1", 2)
        step.join(5)
        self.assertFalse(step.is_alive())
        self.assertEqual(v.layer_names, [name for name, _ in saved])
        for i, (name, written) in enumerate(saved):
            self.assertGreaterEqual(written, i + 1, f"{name} saved with {written} layers written")

    def test_a_step_whose_forward_pass_failed_saves_no_more_layers_at_its_end(self) -> None:
        from orbitkv_pd.vllm_sim import VllmCallSites
        v = VllmCallSites.__new__(VllmCallSites)
        saved: List[str] = []
        v.layer_names = [VllmCallSites.LAYER.format(i) for i in range(4)]
        v.kv_caches = {n: None for n in v.layer_names}
        v.worker = SimpleNamespace(wait_for_layer_load=lambda name: None, save_kv_layer=lambda name, cache, meta: saved.append(name),
                                   wait_for_save=lambda: None, get_finished=lambda ids: (set(), set()),
                                   get_block_ids_with_load_errors=lambda: set(), clear_connector_metadata=lambda: None)
        v.scheduler = SimpleNamespace(update_connector_output=lambda out: None)
        v._lock, v._finished_ids, v._kept, v._reqs, v._invalid = threading.RLock(), set(), {}, {}, set()
        v._fill, v._filled, v._saving_rids, v._saved, v._step_saves = threading.Condition(), {"r-1": 2}, ["r-1"], 0, True
        v.free, v.steps_without_forward = (lambda owner: None), 0
        v.layers_done(2)
        v.step_failed()
        v.end_step(SimpleNamespace(prefills=[]))  # returns at once: the two layers never written are not waited for
        self.assertEqual(v.layer_names[:2], saved)
        self.assertFalse(v.saves())
