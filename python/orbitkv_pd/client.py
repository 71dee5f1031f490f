"""The engine API client: an engine in Python joins OrbitKV P/D through its transfer worker.

    from orbitkv_pd import EngineApiClient, Registration, Layout, ShmPool

    client = EngineApiClient.connect("/run/orbitkv/decode-0.sock", Registration(
        engine_id="decode-0", instance_epoch=int(time.time() * 1000), role="decode",
        layout=Layout(num_layers=32, num_blocks=4096), pool=ShmPool("/dev/shm/decode-0.kv"),
        model="llama-3-8b", http_url="http://10.0.0.7:8000"))
    kv = client.await_kv("req-1")                 # before decode_ready, so no signal is missed
    client.decode_ready("req-1", "lease-1", 1, [7, 8, 9], lease_deadline_ms=now_ms + 30_000).result()
    lease = client.keep_lease("req-1", "lease-1", 1, lease_ms=30_000)
    signal = kv.result(timeout=60)                # KvSignal: ready, recompute or ended
    lease.stop()

Every report returns a ``concurrent.futures.Future`` completed with the fact's event id once the broker has it, or
failed with :class:`~orbitkv_pd.protocol.ApiError` saying what the worker refused and why. Decisions arrive on a
reader thread: to ``on_decision`` when given, else to :meth:`EngineApiClient.decisions`. When the connection drops,
the client reconnects at the same instance epoch, resumes the decision stream after the last sequence number it saw
and sends again every report not yet acknowledged (event ids are deterministic, so the decider recognizes a repeat).
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import socket
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Callable, Deque, Dict, Iterator, List, Optional, Sequence

from . import protocol as p
from .protocol import ApiError, ConnectionClosed, Decision, Registration

log = logging.getLogger("orbitkv_pd")

_RECENT_ENDS = 50_000


def now_us() -> int:
    """Wall-clock microseconds (the unit of timing marks)."""
    return time.time_ns() // 1000


@dataclass(frozen=True)
class KvSignal:
    """What a decode engine waiting for a request's KV learns first.

    ``ready``: the KV is in the destination pages (``order_id``, ``bytes``, and ``first_token``: the token the prefill
    sampled, when its engine reported one); ``recompute``: no KV will come, compute the prefill here; ``ended``: the
    request ended or its pages were released (``outcome``, ``reason``): stop.
    """

    kind: str
    reason: str = ""
    order_id: str = ""
    bytes: int = 0
    outcome: str = ""
    received_us: int = 0
    decided_us: int = 0
    first_token: Optional[int] = None
    landed_us: int = 0
    """When the bytes landed, if the worker handed the KV over on landing (its ``land`` mark); 0 for the decider's KvReady."""


class LeaseKeeper:
    """Sends a lease's heartbeats on a timer until :meth:`stop` (see :meth:`EngineApiClient.keep_lease`), and knows until
    when the lease is surely still held (:meth:`lost`).

    Self-fencing: the decider counts a lease from the time its fact reached the log, which is after the engine sent it;
    so a lease asked for ``lease_ms`` by a fact sent at ``t`` cannot expire before ``t + lease_ms``. The keeper holds the
    lease as valid until ``t + lease_ms - margin`` for the last fact it knows was written (the decode-ready fact, then
    every acknowledged heartbeat), on this process's monotonic clock: an engine cut off from Kafka stops using the pages
    before the decider can time the lease out, so a release that arrives after the partition heals never frees pages
    still in use (docs/engine-api.md, "Leases and partitions")."""

    def __init__(self, client: "EngineApiClient", request_id: str, lease_id: str, lease_epoch: int, lease_ms: int,
                 interval_s: float, sent_at: Optional[float] = None, margin_s: Optional[float] = None,
                 first: "Optional[Future[str]]" = None, waiting_interval_s: Optional[float] = None) -> None:
        self._stop = threading.Event()
        self.sent = 0
        self.failed = 0
        self.margin_s = margin_s if margin_s is not None else max(1.0, lease_ms / 10000.0)
        self._lease_s = lease_ms / 1000.0
        self._guard = threading.Lock()
        start = sent_at if sent_at is not None else time.monotonic()
        self.valid_until = start + self._lease_s - self.margin_s
        # Send times of lease facts not yet acknowledged, oldest first (the decode-ready fact, then heartbeats).
        self._unacked: List[float] = []
        self._every_s = interval_s
        self._interval_s = waiting_interval_s if waiting_interval_s is not None else interval_s
        if first is not None:
            self._unacked.append(start)
            first.add_done_callback(lambda fut: self._confirmed(fut, start))

        def run() -> None:
            while not self._stop.wait(self._interval_s):
                self.sent += 1
                at = time.monotonic()
                with self._guard:
                    self._unacked.append(at)
                f = client.heartbeat(request_id, lease_id, lease_epoch, int(time.time() * 1000) + lease_ms, self.sent)
                f.add_done_callback(lambda fut, at=at: self._count(fut, at))

        self._thread = threading.Thread(target=run, name=f"orbitkv-lease-{request_id}", daemon=True)
        self._thread.start()

    def _confirmed(self, fut: "Future[str]", sent_at: float) -> bool:
        """A lease fact sent at ``sent_at`` was acknowledged (it, and every one before it, is confirmed); False: it failed."""
        if fut.exception() is not None:
            return False
        with self._guard:
            self._unacked = [t for t in self._unacked if t > sent_at]
        return True

    def _count(self, fut: "Future[str]", sent_at: float) -> None:
        if not self._confirmed(fut, sent_at):
            self.failed += 1
            return
        with self._guard:
            self.valid_until = max(self.valid_until, sent_at + self._lease_s - self.margin_s)

    def unconfirmed_for(self) -> float:
        """Seconds the oldest unacknowledged lease fact has waited (0: none waits): an engine cut off from Kafka sees it grow."""
        with self._guard:
            return time.monotonic() - self._unacked[0] if self._unacked else 0.0

    def kv_in(self) -> None:
        """The KV arrived (or is recomputed here): heartbeats at the lease's own period from the next one on."""
        self._interval_s = self._every_s

    def lost(self) -> bool:
        """Whether the lease may already have run out at the decider: no acknowledged renewal covers now."""
        with self._guard:
            return time.monotonic() >= self.valid_until

    def stop(self) -> None:
        """Stops the heartbeats; once this returns, none is sent any more (one in the middle of being sent is waited for,
        so a :meth:`EngineApiClient.close` right after says goodbye last)."""
        self._stop.set()
        if threading.current_thread() is not self._thread:
            self._thread.join(5.0)


class EngineApiClient:
    """One engine's connection to its transfer worker's engine API. Thread-safe."""

    def __init__(self, path: str, registration: Registration, on_decision: Optional[Callable[[Decision], None]],
                 reconnect_for: float) -> None:
        self.path = path
        self.registration = registration
        self._on_decision = on_decision
        self._reconnect_for = reconnect_for
        self._sock: Optional[socket.socket] = None
        self._write_lock = threading.Lock()
        self._state = threading.Lock()
        self._ids = 0
        self._kv_seq = 0  # the KV cache events of this instance, numbered from 1
        self._pending: Dict[int, "tuple[Dict[str, Any], Future[Any]]"] = {}
        self._waiters: Dict[str, "Future[KvSignal]"] = {}
        self._ends: "collections.OrderedDict[str, KvSignal]" = collections.OrderedDict()
        self._queue: Deque[Decision] = collections.deque(maxlen=100_000)
        self._queued = threading.Condition()
        self._closed = False
        self._bye = threading.Event()
        self.session: Optional[str] = None
        self.last_seq = 0
        self.delivered = 0
        self.stopped_because: Optional[str] = None
        self.welcome: Dict[str, Any] = {}
        self._reader: Optional[threading.Thread] = None

    # ------------------------------------------------------------------------------------------------ connecting

    @classmethod
    def connect(cls, path: str, registration: Registration, on_decision: Optional[Callable[[Decision], None]] = None,
                connect_timeout: float = 30.0, reconnect_for: float = 30.0,
                resume: Optional["tuple[str, int]"] = None) -> "EngineApiClient":
        """Connects to the worker's socket (waiting up to ``connect_timeout`` for it to appear), registers, and starts
        reading decisions. Raises :class:`ApiError` when the worker refuses the hello (wrong engine, taken, bad layout
        or pool), ``OSError`` when nothing listens.

        ``resume``: (session, last sequence number) of an earlier connection of the same instance (an engine process
        that restarted its connection, not its memory): the decisions made after it are delivered first."""
        c = cls(path, registration, on_decision, reconnect_for)
        if resume is not None:
            c.session, c.last_seq = resume
        try:
            c._open(connect_timeout)
        except BaseException:
            c._close_socket()
            raise
        c._reader = threading.Thread(target=c._read_loop, name=f"orbitkv-engine-api-{registration.engine_id}", daemon=True)
        c._reader.start()
        return c

    def _open(self, wait: float) -> None:
        deadline = time.monotonic() + wait
        backoff = 0.02
        while True:
            try:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    s.connect(self.path)
                    try:
                        self._handshake(s)
                    except ApiError as e:
                        if not (e.code == p.FENCED and self.session is None and e.min_instance_epoch > self.registration.instance_epoch):
                            raise
                        # A new instance whose epoch (its start time, by default) is older than its predecessor's: this host's
                        # clock is behind the one the engine last ran on. Say hello again, once, with the epoch the worker named.
                        log.warning("instance epoch %d of engine %s is older than its last instance (this host's clock is behind?): "
                                    "registering as instance %d", self.registration.instance_epoch, self.registration.engine_id,
                                    e.min_instance_epoch)
                        self.registration = dataclasses.replace(self.registration, instance_epoch=e.min_instance_epoch)
                        s.close()
                        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                        s.connect(self.path)
                        self._handshake(s)
                except BaseException:
                    s.close()
                    raise
                self._sock = s
                return
            except ApiError as e:
                # A reconnect can race the worker noticing that the old connection died.
                if e.code != p.ENGINE_TAKEN or self.session is None or time.monotonic() > deadline:
                    raise
            except (OSError, ConnectionClosed) as e:
                if time.monotonic() > deadline or self._closed:
                    raise OSError(f"engine API at {self.path}: {e} (is './orbitkv-pd worker' running with "
                                  f"worker.engine-api.path={self.path}?)") from e
            time.sleep(backoff)
            backoff = min(0.5, backoff * 2)

    def _handshake(self, s: socket.socket) -> None:
        resume = {"session": self.session, "after_seq": self.last_seq} if self.session else None
        s.sendall(p.encode(self.registration.hello(resume)))
        answer = p.read_frame(s)
        if answer is None:
            raise ConnectionClosed("the worker closed the connection during the hello")
        if answer.get("op") == p.ERROR:
            raise ApiError.from_frame(answer)
        if answer.get("op") != p.WELCOME:
            raise ApiError(p.BAD_FRAME, f"expected welcome, got {answer.get('op')!r}")
        if self.session is not None and answer.get("session") != self.session:
            log.warning("engine API: the worker restarted (new session); decisions it had not delivered are re-read from its "
                        "committed position")
            self.last_seq = 0
        self.session = answer.get("session")
        self.welcome = answer

    # ------------------------------------------------------------------------------------------------ reading

    def _read_loop(self) -> None:
        while not self._closed:
            s = self._sock
            try:
                if s is None:
                    raise ConnectionClosed("no connection")
                m = p.read_frame(s)
                if m is None:
                    raise ConnectionClosed("the worker closed the connection")
                self._handle(m)
            except (OSError, ConnectionClosed, ApiError, ValueError) as e:
                if self._closed or self.stopped_because is not None:
                    break
                log.warning("engine API connection lost (%s): reconnecting", e)
                if not self._reconnect():
                    break
        why = self.stopped_because or "engine API client closed"
        self._fail_pending(why)
        self._bye.set()
        with self._queued:
            self._queued.notify_all()

    def _reconnect(self) -> bool:
        self._close_socket()
        try:
            self._open(self._reconnect_for)
        except (OSError, ApiError, ConnectionClosed) as e:
            self.stopped_because = f"engine API: cannot reconnect to {self.path}: {e}"
            log.error("%s", self.stopped_because)
            return False
        with self._state:
            frames = [frame for frame, _ in sorted(self._pending.values(), key=lambda x: x[0]["id"])]
        try:
            for frame in frames:
                self._write(frame)
        except OSError:
            return self._reconnect()
        log.info("engine API reconnected (resumed after decision %d, %d reports sent again)", self.last_seq, len(frames))
        return True

    def _handle(self, m: Dict[str, Any]) -> None:
        op = m.get("op")
        if op == p.DECISION:
            received = now_us()
            seq = int(m.get("seq", 0))
            if seq <= self.last_seq:
                return  # replayed after a reconnect and already seen
            self.last_seq = seq
            d = Decision.from_frame(m, received)
            self.delivered += 1
            self._signal(d)
            if self._on_decision is not None:
                try:
                    self._on_decision(d)
                except Exception:  # the engine's own code must not stop the reader
                    log.exception("acting on decision %s failed", d.decision_id)
            else:
                with self._queued:
                    self._queue.append(d)
                    self._queued.notify_all()
        elif op in (p.ACK, p.PONG):
            with self._state:
                entry = self._pending.pop(int(m.get("id", -1)), None)
            if entry is not None:
                entry[1].set_result(m.get("event_id", m.get("worker_us")))
        elif op == p.BYE:
            self._closed = True  # the worker closes the connection next: that is the end, not a loss
            self._bye.set()
        elif op == p.ERROR:
            e = ApiError.from_frame(m)
            entry = None
            if isinstance(m.get("id"), int):
                with self._state:
                    entry = self._pending.pop(m["id"], None)
            if entry is not None:
                entry[1].set_exception(e)
            else:
                log.error("engine API: %s (%s)", e.message, e.code)
            if e.fatal:
                self.stopped_because = f"engine API: {e.message}"
                self._close_socket()
        else:
            log.warning("engine API: ignoring op %r (a newer worker?)", op)

    def _signal(self, d: Decision) -> None:
        f = d.fields
        if d.kind == p.KV_READY:
            decided = d.marks().get("out", 0)
            first = f.get("first_token")
            self._complete(d.request_id, KvSignal("ready", order_id=str(f.get("order_id", "")), bytes=int(f.get("bytes", 0)),
                                                  received_us=d.received_us, decided_us=decided,
                                                  first_token=first if isinstance(first, int) else None,
                                                  landed_us=int(d.marks().get("land", 0))))
        elif d.kind == p.RECOMPUTE:
            self._complete(d.request_id, KvSignal("recompute", reason=str(f.get("reason", ""))))
        elif d.kind == p.RELEASE:
            if f.get("side") == "decode" and f.get("engine_id") == self.registration.engine_id:
                self._end(d.request_id, KvSignal("ended", reason="decode pages released: " + str(f.get("reason", "")),
                                                 outcome="unknown"))
        elif d.kind == p.OUTCOME:
            if f.get("outcome") != "completed":
                self._end(d.request_id, KvSignal("ended", reason=str(f.get("reason", "")), outcome=str(f.get("outcome", ""))))

    def _end(self, request_id: str, signal: KvSignal) -> None:
        with self._state:
            self._ends.setdefault(request_id, signal)
            while len(self._ends) > _RECENT_ENDS:
                self._ends.popitem(last=False)
        self._complete(request_id, signal)

    def _complete(self, request_id: str, signal: KvSignal) -> None:
        with self._state:
            f = self._waiters.pop(request_id, None)
        if f is not None and not f.done():
            f.set_result(signal)

    # ------------------------------------------------------------------------------------------------ writing

    def _write(self, frame: Dict[str, Any]) -> None:
        data = p.encode(frame)
        with self._write_lock:
            s = self._sock
            if s is None:
                raise OSError("not connected")
            s.sendall(data)

    def _request(self, frame: Dict[str, Any]) -> "Future[Any]":
        fut: "Future[Any]" = Future()
        if self._closed or self.stopped_because is not None:
            fut.set_exception(ApiError(p.UNAVAILABLE, self.stopped_because or "engine API client closed"))
            return fut
        with self._state:
            self._ids += 1
            frame["id"] = self._ids
            self._pending[self._ids] = (frame, fut)
        try:
            self._write(frame)
        except OSError as e:
            log.debug("engine API write failed (%s): the reader reconnects and sends it again", e)
        return fut

    def _fail_pending(self, why: str) -> None:
        with self._state:
            pending = list(self._pending.values())
            self._pending.clear()
            waiters = list(self._waiters.values())
            self._waiters.clear()
        for _, fut in pending:
            if not fut.done():
                fut.set_exception(ApiError(p.UNAVAILABLE, why))
        for w in waiters:
            if not w.done():
                w.set_result(KvSignal("ended", reason=why, outcome="unknown"))

    @staticmethod
    def _fact(op: str, request_id: str, traceparent: Optional[str], marks: Optional[Dict[str, int]]) -> Dict[str, Any]:
        m: Dict[str, Any] = {"op": op, "request_id": request_id}
        if traceparent:
            m["traceparent"] = traceparent
        if marks:
            m["timing"] = p.timing(marks)
        return m

    # ------------------------------------------------------------------------------------------------ facts

    def prefill_completed(self, request_id: str, source_blocks: Sequence[int], num_tokens: int,
                          first_token: Optional[int] = None, traceparent: Optional[str] = None,
                          marks: Optional[Dict[str, int]] = None) -> "Future[str]":
        """Prefill done: the prompt's KV is in ``source_blocks`` (token order), held until a release names the request."""
        m = self._fact(p.PREFILL_COMPLETED, request_id, traceparent, marks)
        m["source_blocks"] = list(source_blocks)
        m["num_tokens"] = num_tokens
        if first_token is not None:
            m["first_token"] = first_token
        return self._request(m)

    def prefill_failed(self, request_id: str, reason: str, retriable: bool = True, traceparent: Optional[str] = None,
                       marks: Optional[Dict[str, int]] = None) -> "Future[str]":
        """Prefill impossible; the engine holds no pages for the request."""
        m = self._fact(p.PREFILL_FAILED, request_id, traceparent, marks)
        m.update(reason=reason, retriable=retriable)
        return self._request(m)

    def decode_ready(self, request_id: str, lease_id: str, lease_epoch: int, dest_blocks: Sequence[int],
                     lease_deadline_ms: int, traceparent: Optional[str] = None,
                     marks: Optional[Dict[str, int]] = None, cached_blocks: int = 0) -> "Future[str]":
        """Destination pages held under a lease. Call :meth:`await_kv` first, so no signal is missed.

        ``cached_blocks``: the prompt's first blocks are in the engine's prefix cache already; the engine fills those pages
        itself and the order moves only the rest (at least one block moves: less than ``len(dest_blocks)``)."""
        m = self._fact(p.DECODE_READY, request_id, traceparent, marks)
        m.update(lease_id=lease_id, lease_epoch=lease_epoch, dest_blocks=list(dest_blocks), lease_deadline_ms=lease_deadline_ms)
        if cached_blocks:
            m["cached_blocks"] = cached_blocks
        return self._request(m)

    def decode_rejected(self, request_id: str, reason: str, traceparent: Optional[str] = None,
                        marks: Optional[Dict[str, int]] = None) -> "Future[str]":
        m = self._fact(p.DECODE_REJECTED, request_id, traceparent, marks)
        m["reason"] = reason
        return self._request(m)

    def heartbeat(self, request_id: str, lease_id: str, lease_epoch: int, extend_to_ms: int, seq: int,
                  traceparent: Optional[str] = None) -> "Future[str]":
        """Still holding the lease, now until ``extend_to_ms``; ``seq`` makes each heartbeat's event id unique."""
        m = self._fact(p.HEARTBEAT, request_id, traceparent, None)
        m.update(lease_id=lease_id, lease_epoch=lease_epoch, extend_to_ms=extend_to_ms, seq=seq)
        return self._request(m)

    def keep_lease(self, request_id: str, lease_id: str, lease_epoch: int, lease_ms: int,
                   interval_s: Optional[float] = None, sent_at: Optional[float] = None,
                   margin_s: Optional[float] = None, first: "Optional[Future[str]]" = None,
                   waiting_interval_s: Optional[float] = None) -> LeaseKeeper:
        """Heartbeats the lease every ``interval_s`` (a third of the lease by default) until the keeper is stopped;
        ``sent_at`` is when the decode-ready fact was sent (``time.monotonic()``), ``margin_s`` how long before the
        lease's earliest possible expiry the keeper calls it lost (a tenth of the lease, at least 1 s, by default).
        ``first`` is the decode-ready's own acknowledgement and ``waiting_interval_s`` the heartbeat period until
        :meth:`LeaseKeeper.kv_in` (both for :meth:`LeaseKeeper.unconfirmed_for`: an engine cut off from Kafka gives a
        decode back before its KV rather than holding the client until the lease ends)."""
        return LeaseKeeper(self, request_id, lease_id, lease_epoch, lease_ms, interval_s or max(0.05, lease_ms / 3000.0), sent_at, margin_s,
                           first, waiting_interval_s)

    def decode_completed(self, request_id: str, output_tokens: int, recomputed: bool = False,
                         traceparent: Optional[str] = None, marks: Optional[Dict[str, int]] = None) -> "Future[str]":
        m = self._fact(p.DECODE_COMPLETED, request_id, traceparent, marks)
        m.update(output_tokens=output_tokens, recomputed=recomputed)
        return self._request(m)

    def cancel(self, request_id: str, reason: str, traceparent: Optional[str] = None,
               marks: Optional[Dict[str, int]] = None) -> "Future[str]":
        """The engine itself asks to stop the request (its client went away, the KV it received does not verify)."""
        m = self._fact(p.CANCEL, request_id, traceparent, marks)
        m["reason"] = reason
        return self._request(m)

    # ------------------------------------------------------------------------------------------------ KV cache events

    def kv_events(self, events: Sequence[Dict[str, Any]]) -> "Future[str]":
        """The engine's KV cache changed (vLLM's KV events): ``events`` in order, each ``{"type": "stored", "block_hashes":
        [bytes], "token_ids": [...], "block_size": n, "parent_block_hash": bytes | None, "lora_name", "medium"}``, ``{"type":
        "removed", "block_hashes": [bytes]}`` or ``{"type": "cleared"}``. Numbered here from 1 for this instance without
        gaps (a message sent again after a reconnect keeps its numbers: readers drop repeats); the worker writes them to
        ``orbitkv.kv-events``. Completes once the broker has them all."""
        out: List[Dict[str, Any]] = []
        with self._state:
            for e in events:
                self._kv_seq += 1
                m: Dict[str, Any] = {"seq": self._kv_seq, "type": e["type"]}
                if "block_hashes" in e:
                    m["block_hashes"] = [bytes(h).hex() for h in e["block_hashes"]]
                if e.get("parent_block_hash") is not None:
                    m["parent_block_hash"] = bytes(e["parent_block_hash"]).hex()
                for k in ("token_ids", "block_size", "lora_id", "lora_name", "medium"):
                    if e.get(k) is not None:
                        m[k] = list(e[k]) if k == "token_ids" else e[k]
                out.append(m)
        return self._request({"op": p.KV_EVENTS, "events": out})

    def prefill_progress(self, request_id: str, source_blocks: Optional[Sequence[int]], num_tokens: int, done_tokens: int,
                         chunk_end: int, layers: int) -> None:
        """How far the prefill of ``request_id`` has come, layer by layer: prompt tokens ``[0, done_tokens)`` are computed in
        every layer and ``[done_tokens, chunk_end)`` (the chunk being computed) in layers ``[0, layers)``; ``source_blocks``
        (the pages, token order) in a request's first report, else None. The worker pushes what is complete while the rest
        computes (docs/engine-api.md, "Prefill progress"). Unanswered: a lost report only delays the push."""
        m: Dict[str, Any] = {"op": p.PREFILL_PROGRESS, "request_id": request_id, "num_tokens": num_tokens,
                             "done_tokens": done_tokens, "chunk_end": chunk_end, "layers": layers}
        if source_blocks is not None:
            m["source_blocks"] = list(source_blocks)
        try:
            self._write(m)
        except OSError as e:
            log.debug("prefill progress not sent: %s", e)

    def ping(self) -> "Future[Any]":
        """A round trip to the worker (no Kafka): completes with the worker's clock (µs)."""
        return self._request({"op": p.PING})

    # ------------------------------------------------------------------------------------------------ decisions

    def await_kv(self, request_id: str) -> "Future[KvSignal]":
        """Completes with the first of: the KV landed, recompute, or the request ended / its decode pages were released.
        Call it before :meth:`decode_ready`. A request that already ended completes it at once."""
        with self._state:
            f = self._waiters.get(request_id)
            if f is None:
                f = Future()
                self._waiters[request_id] = f
            ended = self._ends.get(request_id)
        if ended is not None:
            self._complete(request_id, ended)
        return f

    def forget(self, request_id: str) -> None:
        """Stops waiting for a request's KV (the engine gave up on it)."""
        with self._state:
            self._waiters.pop(request_id, None)

    def decisions(self, timeout: Optional[float] = None) -> Iterator[Decision]:
        """The decisions as they arrive (when no ``on_decision`` callback was given). Ends when the client stops, or
        after ``timeout`` seconds without one."""
        while True:
            with self._queued:
                if not self._queue:
                    if self._closed or self.stopped_because is not None:
                        return
                    if not self._queued.wait(timeout):
                        return
                if not self._queue:
                    continue
                d = self._queue.popleft()
            yield d

    def next_decision(self, timeout: float) -> Optional[Decision]:
        """The next decision, or None after ``timeout`` seconds."""
        for d in self.decisions(timeout):
            return d
        return None

    # ------------------------------------------------------------------------------------------------ closing

    def close(self, timeout: float = 5.0) -> None:
        """Says goodbye (the worker announces that the engine left, so the decider voids its in-flight work) and
        closes. A worker that does not answer within ``timeout`` is left. Idempotent."""
        if self._closed:
            return
        try:
            if self.stopped_because is None and self._sock is not None:
                self._write({"op": p.BYE})
                self._bye.wait(timeout)
        except OSError:
            pass
        finally:
            self.abandon()

    def abandon(self) -> None:
        """Drops the connection without a goodbye: what a crash looks like to the worker."""
        self._closed = True
        self._close_socket()
        self._fail_pending("engine API client closed")
        with self._queued:
            self._queued.notify_all()

    def _close_socket(self) -> None:
        s = self._sock
        if s is not None:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def __enter__(self) -> "EngineApiClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
