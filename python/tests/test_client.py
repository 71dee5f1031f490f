import os
import socket
import tempfile
import threading
import unittest
from typing import Any, Callable, Dict, List, Optional

from orbitkv_pd import ApiError, EngineApiClient, Layout, Registration, ShmPool
from orbitkv_pd import protocol as p


class FakeWorker:
    """A scripted engine API server on a Unix socket: records what it reads and answers with ``on_frame``."""

    def __init__(self, path: str, on_frame: Callable[["FakeWorker", socket.socket, Dict[str, Any]], None]) -> None:
        self.path = path
        self.on_frame = on_frame
        self.frames: List[Dict[str, Any]] = []
        self.hellos: List[Dict[str, Any]] = []
        self.conns: List[socket.socket] = []
        self.lock = threading.Lock()
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(path)
        self.server.listen()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                c, _ = self.server.accept()
            except OSError:
                return
            self.conns.append(c)
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c: socket.socket) -> None:
        try:
            while True:
                m = p.read_frame(c)
                if m is None:
                    return
                with self.lock:
                    self.frames.append(m)
                    if m.get("op") == "hello":
                        self.hellos.append(m)
                self.on_frame(self, c, m)
        except (OSError, p.ConnectionClosed):
            return

    @staticmethod
    def send(c: socket.socket, m: Dict[str, Any]) -> None:
        c.sendall(p.encode(m))

    def close(self) -> None:
        self.server.close()
        for c in self.conns:
            try:
                c.close()
            except OSError:
                pass


def welcome(c: socket.socket, session: str = "S1") -> None:
    FakeWorker.send(c, {"op": "welcome", "version": 1, "session": session, "engine_id": "decode-0", "instance_epoch": 7,
                        "last_seq": 0, "missed": 0, "new_instance": True, "endpoints": []})


def decision(seq: int, rid: str, kind: str, **fields: Any) -> Dict[str, Any]:
    m = {"op": "decision", "seq": seq, "decision_id": f"{rid}/{seq}", "request_id": rid, "kind": kind, "worker_us": 1}
    m.update(fields)
    return m


class ClientTest(unittest.TestCase):

    def setUp(self) -> None:
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "w.sock")
        self.reg = Registration("decode-0", 7, "decode", Layout(num_layers=2, num_blocks=64), ShmPool("/dev/shm/x.kv"), "m", "")
        self.workers: List[FakeWorker] = []
        self.clients: List[EngineApiClient] = []

    def tearDown(self) -> None:
        for c in self.clients:
            c.abandon()
        for w in self.workers:
            w.close()
        self.dir.cleanup()

    def worker(self, on_frame: Callable[[FakeWorker, socket.socket, Dict[str, Any]], None]) -> FakeWorker:
        w = FakeWorker(self.path, on_frame)
        self.workers.append(w)
        return w

    def connect(self, **kw: Any) -> EngineApiClient:
        c = EngineApiClient.connect(self.path, self.reg, connect_timeout=5, reconnect_for=5, **kw)
        self.clients.append(c)
        return c

    def test_facts_are_acknowledged_and_decisions_reach_the_waiters_and_the_iterator(self) -> None:
        def on(w: FakeWorker, c: socket.socket, m: Dict[str, Any]) -> None:
            if m["op"] == "hello":
                welcome(c)
            elif m["op"] == "decode_ready":
                w.send(c, {"op": "ack", "id": m["id"], "event_id": m["request_id"] + "/decode-ready"})
                w.send(c, decision(1, m["request_id"], "kv_ready", order_id="r1/a1", bytes=4096, first_token=17, timing="out=5"))
            elif m["op"] == "prefill_completed":
                w.send(c, {"op": "error", "id": m["id"], "code": "bad_request", "field": "source_blocks",
                           "message": "source_blocks: block ids must be integers in 0..63; [0] is 99"})
        self.worker(on)
        client = self.connect()
        self.assertEqual(client.welcome["session"], "S1")
        kv = client.await_kv("r1")
        self.assertEqual(client.decode_ready("r1", "L1", 1, [3, 4], 10_000, marks={"in": 3}).result(5), "r1/decode-ready")
        sig = kv.result(5)
        self.assertEqual((sig.kind, sig.order_id, sig.bytes, sig.decided_us, sig.first_token), ("ready", "r1/a1", 4096, 5, 17))
        d = client.next_decision(5)
        self.assertIsNotNone(d)
        self.assertEqual(d.kind, "kv_ready")
        sent = [f for f in self.workers[0].frames if f["op"] == "decode_ready"][0]
        self.assertEqual(sent["dest_blocks"], [3, 4])
        self.assertEqual(sent["timing"], "in=3")
        with self.assertRaises(ApiError) as e:
            client.prefill_completed("r1", [99], 10).result(5)
        self.assertEqual((e.exception.code, e.exception.field), ("bad_request", "source_blocks"))

    def test_kv_cache_events_are_numbered_from_one_without_gaps_and_hashes_go_as_hex(self) -> None:
        def on(w: FakeWorker, c: socket.socket, m: Dict[str, Any]) -> None:
            if m["op"] == "hello":
                welcome(c)
            elif m["op"] == "kv_events":
                w.send(c, {"op": "ack", "id": m["id"], "event_id": "kv/7/%d" % m["events"][-1]["seq"]})
        self.worker(on)
        client = self.connect()
        self.assertEqual(client.kv_events([{"type": "stored", "block_hashes": [b"\x0a\x0b", b"\xff"], "token_ids": list(range(32)),
                                            "block_size": 16, "parent_block_hash": b"\x01", "lora_name": None}]).result(5), "kv/7/1")
        self.assertEqual(client.kv_events([{"type": "removed", "block_hashes": [b"\xff"]}, {"type": "cleared"}]).result(5), "kv/7/3")
        sent = [f for f in self.workers[0].frames if f["op"] == "kv_events"]
        self.assertEqual(sent[0]["events"], [{"seq": 1, "type": "stored", "block_hashes": ["0a0b", "ff"], "parent_block_hash": "01",
                                              "token_ids": list(range(32)), "block_size": 16}])
        self.assertEqual(sent[1]["events"], [{"seq": 2, "type": "removed", "block_hashes": ["ff"]}, {"seq": 3, "type": "cleared"}])

    def test_a_request_that_ended_before_the_wait_completes_it_at_once(self) -> None:
        def on(w: FakeWorker, c: socket.socket, m: Dict[str, Any]) -> None:
            if m["op"] == "hello":
                welcome(c)
                w.send(c, decision(1, "r2", "outcome", outcome="timed_out", reason="lease expired"))
            elif m["op"] == "ping":
                w.send(c, {"op": "pong", "id": m["id"], "worker_us": 1})
        self.worker(on)
        client = self.connect(on_decision=lambda d: None)
        client.ping().result(5)
        sig = client.await_kv("r2").result(5)
        self.assertEqual((sig.kind, sig.outcome, sig.reason), ("ended", "timed_out", "lease expired"))

    def test_it_reconnects_resumes_after_the_last_decision_and_resends_unacknowledged_reports(self) -> None:
        state = {"dropped": False}

        def on(w: FakeWorker, c: socket.socket, m: Dict[str, Any]) -> None:
            if m["op"] == "hello":
                welcome(c)
                if "resume" in m:
                    # Replays from after_seq; seq 1 again must be dropped by the client.
                    w.send(c, decision(1, "r3", "kv_ready", order_id="old", bytes=1))
                    w.send(c, decision(2, "r3", "kv_ready", order_id="r3/a2", bytes=2))
                else:
                    w.send(c, decision(1, "r9", "recompute", reason="x"))
            elif m["op"] == "cancel":
                if not state["dropped"]:
                    state["dropped"] = True
                    c.shutdown(socket.SHUT_RDWR)  # the worker's side of a broken socket: no ack
                    return
                w.send(c, {"op": "ack", "id": m["id"], "event_id": "r3/cancel/engine:decode-0"})
        self.worker(on)
        client = self.connect()
        self.assertEqual(client.next_decision(5).kind, "recompute")
        kv = client.await_kv("r3")
        self.assertEqual(client.cancel("r3", "client gone").result(10), "r3/cancel/engine:decode-0")
        self.assertEqual(kv.result(5).order_id, "r3/a2")
        hellos = self.workers[0].hellos
        self.assertEqual(len(hellos), 2)
        self.assertEqual(hellos[1]["resume"], {"session": "S1", "after_seq": 1})
        self.assertEqual(hellos[1]["instance_epoch"], 7)
        cancels = [f for f in self.workers[0].frames if f["op"] == "cancel"]
        self.assertEqual([c["id"] for c in cancels], [1, 1], "the same report, sent again")
        self.assertEqual(client.last_seq, 2)

    def test_a_fenced_client_stops_and_fails_what_is_pending(self) -> None:
        def on(w: FakeWorker, c: socket.socket, m: Dict[str, Any]) -> None:
            if m["op"] == "hello":
                welcome(c)
            elif m["op"] == "heartbeat":
                w.send(c, {"op": "error", "code": "fenced", "message": "engine decode-0 registered again at instance epoch 8"})
                c.close()
        self.worker(on)
        client = self.connect()
        with self.assertRaises(ApiError) as e:
            client.heartbeat("r4", "L", 1, 1, 1).result(5)
        self.assertIn("instance epoch 8", str(e.exception))
        with self.assertRaises(ApiError):
            client.decode_completed("r4", 3).result(5)
        self.assertIn("instance epoch 8", client.stopped_because or "")

    def test_a_refused_hello_raises_the_workers_reason(self) -> None:
        def on(w: FakeWorker, c: socket.socket, m: Dict[str, Any]) -> None:
            w.send(c, {"op": "error", "code": "pool", "field": "pool.path",
                       "message": "pool.path: /dev/shm/x.kv is not a file this worker can see"})
        self.worker(on)
        with self.assertRaises(ApiError) as e:
            self.connect()
        self.assertEqual((e.exception.code, e.exception.field), ("pool", "pool.path"))

    def test_a_new_instance_older_than_its_predecessor_takes_the_epoch_the_worker_names(self) -> None:
        # Instance epochs default to the start time: an engine restarted on a host whose clock is behind the one its last
        # instance ran on says hello with an older epoch, which the worker fences (it used to stay refused for good).
        def on(w: FakeWorker, c: socket.socket, m: Dict[str, Any]) -> None:
            if m.get("op") != "hello":
                return
            if m["instance_epoch"] < 9:
                w.send(c, {"op": "error", "code": "fenced", "field": "instance_epoch", "min_instance_epoch": 9,
                           "message": "instance_epoch: 7 is older than instance 8 of engine decode-0"})
            else:
                welcome(c)
        w = self.worker(on)
        client = self.connect()
        self.assertEqual(client.registration.instance_epoch, 9)
        self.assertEqual([h["instance_epoch"] for h in w.hellos], [7, 9])

    def test_a_fenced_hello_naming_no_newer_epoch_stays_refused(self) -> None:
        def on(w: FakeWorker, c: socket.socket, m: Dict[str, Any]) -> None:
            w.send(c, {"op": "error", "code": "fenced", "field": "instance_epoch", "min_instance_epoch": 5,
                       "message": "instance_epoch: 7 is older"})  # not newer than ours: nothing to take
        self.worker(on)
        with self.assertRaises(ApiError) as e:
            self.connect()
        self.assertEqual(e.exception.code, "fenced")

    def test_nothing_listening_is_an_error_naming_the_socket(self) -> None:
        with self.assertRaisesRegex(OSError, "worker.engine-api.path="):
            EngineApiClient.connect(self.path, self.reg, connect_timeout=0.2)

    def test_close_says_goodbye_and_keep_lease_heartbeats_until_stopped(self) -> None:
        beats: List[Dict[str, Any]] = []

        def on(w: FakeWorker, c: socket.socket, m: Dict[str, Any]) -> None:
            if m["op"] == "hello":
                welcome(c)
            elif m["op"] == "heartbeat":
                beats.append(m)
                w.send(c, {"op": "ack", "id": m["id"], "event_id": f"r5/heartbeat/{m['seq']}"})
            elif m["op"] == "bye":
                w.send(c, {"op": "bye"})
        self.worker(on)
        client = self.connect()
        keeper = client.keep_lease("r5", "L5", 2, lease_ms=30_000, interval_s=0.02)
        deadline = threading.Event()
        for _ in range(250):
            if len(beats) >= 3:
                break
            deadline.wait(0.02)
        keeper.stop()
        self.assertGreaterEqual(len(beats), 3)
        self.assertEqual([b["seq"] for b in beats[:3]], [1, 2, 3])
        self.assertEqual(beats[0]["lease_epoch"], 2)
        client.close()
        self.assertEqual(self.workers[0].frames[-1]["op"], "bye")


if __name__ == "__main__":
    unittest.main()
