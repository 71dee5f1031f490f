"""The worker half of the OrbitKV connector for vLLM (docs/vllm.md): what vLLM's model runner calls on a
``KVConnectorBase_V1`` in a GPU worker process, on the engine API of the transfer worker beside the engine.

It owns the engine's engine API connection (:class:`~orbitkv_pd.client.EngineApiClient`): ``register_kv_caches``
registers vLLM's per-layer KV tensors as the engine's pool and connects; the facts the scheduler half decided arrive in
each step's metadata (``bind_connector_metadata``) and are reported at once; ``save_kv_layer`` reports a prefill's
progress layer by layer (the worker pushes what is computed while the rest computes); the decisions come back through
``get_finished`` (the KV landed: finished receiving; the decider released a prefill's pages: finished sending, so vLLM
frees the blocks it kept) and ``get_block_ids_with_load_errors`` (no KV will come: vLLM recomputes or fails the request,
as its ``kv_load_failure_policy`` says). Leases and heartbeats are this half's, as for every engine on the engine API.

Written against vLLM's model runner at the release docs/vllm.md pins (``vllm/v1/worker/kv_connector_model_runner_mixin.py``
and ``gpu_model_runner.py``): per step ``bind_connector_metadata`` → ``start_load_kv`` → per attention layer
``wait_for_layer_load`` / (attention) / ``save_kv_layer`` → ``wait_for_save`` → ``get_finished(finished_req_ids)`` →
``get_block_ids_with_load_errors`` → ``clear_connector_metadata``; a step without a forward pass makes the same calls
without the layers. Nothing of vLLM is imported here. Thread-safe: decisions arrive on the client's reader thread.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import queue
import threading
import time
from concurrent.futures import Future
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Set, Tuple

from . import protocol as p
from .client import EngineApiClient, KvSignal
from .protocol import ApiError, CudaIpcPool, CudaIpcRegion, Decision, Layout, Registration, ShmPool
from .vllm_scheduler import DecodeReady, OrbitKVPdMetadata, PrefillCompleted, RequestEnded, SaveChunk

log = logging.getLogger("orbitkv_pd.vllm")

_RECENT = 50_000

#: Beyond every deadline a request can have at the decider: kept blocks of an unacknowledged fact are freed then.
UNSURE_FALLBACK_S = 600.0


@dataclasses.dataclass(frozen=True)
class WorkerSettings:
    """``kv_connector_extra_config`` as the worker half reads it (docs/vllm.md, "Settings")."""
    engine_api_path: str
    engine_id: str
    http_url: str
    role: str = "both"
    model: str = ""
    instance_epoch: int = 0
    lease_ms: int = 30_000
    heartbeat_s: Optional[float] = None
    kv_confirm_s: float = 5.0
    min_report_interval_s: float = 0.001
    connect_timeout_s: float = 180.0
    block_hash: Optional[Tuple[str, str]] = None
    fault_no_heartbeat_prefix: Optional[str] = None

    KEYS = {"engine_api_path": str, "engine_id": str, "http_url": str, "role": str, "model": str, "instance_epoch": int,
            "lease_ms": int, "heartbeat_ms": int, "kv_confirm_ms": int,
            "layerwise_min_report_interval_ms": float, "connect_timeout_s": float, "block_hash_algorithm": str,
            "block_hash_seed": str, "fault_no_heartbeat_prefix": str}

    @classmethod
    def from_extra(cls, extra: Mapping[str, Any], role: str = "both", model: str = "") -> "WorkerSettings":
        """From ``kv_connector_extra_config``; ``role`` and ``model`` are what vLLM's own config says (``kv_role``, the
        served model name) when the extra config does not. Raises ValueError naming the key that is wrong."""
        for k, v in extra.items():
            t = cls.KEYS.get(k)
            if t is None:
                raise ValueError(f"kv_connector_extra_config.{k}: not an OrbitKV connector setting (known: {', '.join(sorted(cls.KEYS))})")
            if not isinstance(v, (int, float) if t is float else t) or isinstance(v, bool):
                raise ValueError(f"kv_connector_extra_config.{k}: a {t.__name__}, got {v!r}")
        for k in ("engine_api_path", "engine_id", "http_url"):
            if not extra.get(k):
                raise ValueError(f"kv_connector_extra_config.{k}: required ("
                                 + {"engine_api_path": "the transfer worker's engine API socket, worker.engine.api.path",
                                    "engine_id": "the id this engine registers under, its worker's worker.engine.id",
                                    "http_url": "where the proxy reaches this vLLM's OpenAI server"}[k] + ")")
        r = extra.get("role", role)
        if r not in ("prefill", "decode", "both"):
            raise ValueError(f"kv_connector_extra_config.role: prefill, decode or both, got {r!r}")
        ms: Callable[[str], Optional[float]] = lambda k: extra[k] / 1000.0 if k in extra else None
        for k in ("lease_ms", "heartbeat_ms", "kv_confirm_ms", "connect_timeout_s"):
            if k in extra and extra[k] <= 0:
                raise ValueError(f"kv_connector_extra_config.{k}: must be positive, got {extra[k]}")
        algo, seed = extra.get("block_hash_algorithm"), extra.get("block_hash_seed")
        return cls(extra["engine_api_path"], extra["engine_id"], extra["http_url"], r, extra.get("model", model),
                   int(extra.get("instance_epoch", 0)), int(extra.get("lease_ms", 30_000)), ms("heartbeat_ms"),
                   ms("kv_confirm_ms") or 5.0, extra.get("layerwise_min_report_interval_ms", 1.0) / 1000.0,
                   float(extra.get("connect_timeout_s", 180.0)), (algo, seed or "") if algo else None,
                   extra.get("fault_no_heartbeat_prefix") or None)


# ---------------------------------------------------------------------------------------------------- the KV tensors

_TORCH_DTYPES = {"torch.bfloat16": "bf16", "torch.float16": "fp16", "torch.float32": "fp32", "torch.float8_e4m3fn": "fp8_e4m3",
                 "torch.float8_e5m2": "fp8_e5m2", "torch.int8": "int8", "torch.uint8": "int8"}


class KvLayoutRefused(ValueError):
    """vLLM's KV cache cannot be registered as the engine's pool; the message says why."""


def map_kv_caches(kv_caches: Mapping[str, Any], block_size: int, num_blocks: Optional[int] = None,
                  ipc_handle: Optional[Callable[[int], Tuple[bytes, int]]] = None) -> Tuple[Layout, Any]:
    """vLLM's per-layer KV tensors (``register_kv_caches``: layer name → tensor, in the model's order) as the engine
    API's layout and pool, or :class:`KvLayoutRefused` saying why they cannot be.

    The worker moves a page as one byte range per layer region. vLLM's FlashAttention cache at the pinned release is
    ``(num_blocks, num_kv_heads, block_size, 2 * head_size)`` per layer (K and V packed in the last dimension; earlier
    ``(num_blocks, 2, ...)``): the block is dimension 0 and its bytes in a layer are contiguous, so a layer is one
    region (``kv_split`` fused) of ``num_blocks`` pages. Refused: a tensor not contiguous, layers of different shapes or
    dtypes, a block that is not dimension 0 (the ``(2, num_blocks, ...)`` layout of releases before 2026-05-26 puts V at
    an offset into the allocation, and the engine API names one IPC handle per region and no offset).

    Values that are the simulated engine's layer views (``orbitkv_pool``) give its pool file; CUDA tensors give CUDA IPC
    handles (``ipc_handle(data_ptr)`` → (handle, offset of the pointer in its allocation), the driver's by default)."""
    if not kv_caches:
        raise KvLayoutRefused("register_kv_caches: no KV cache tensors")
    names = list(kv_caches)
    first = kv_caches[names[0]]
    if hasattr(first, "orbitkv_pool"):
        sim = first.orbitkv_pool
        for i, n in enumerate(names):
            v = kv_caches[n]
            if not hasattr(v, "orbitkv_pool") or v.orbitkv_pool is not sim or getattr(v, "layer", None) != i:
                raise KvLayoutRefused(f"layer {n}: not layer {i} of the same pool")
        if first.layout.num_layers != len(names):
            raise KvLayoutRefused(f"{len(names)} layers registered, the pool has {first.layout.num_layers}")
        return first.layout, ShmPool(first.path)
    shape = tuple(int(x) for x in first.shape)
    dtype = str(first.dtype)
    for n in names:
        t = kv_caches[n]
        if tuple(int(x) for x in t.shape) != shape or str(t.dtype) != dtype:
            raise KvLayoutRefused(f"layer {n}: shape {tuple(t.shape)} {t.dtype}, layer {names[0]} has {shape} {dtype} "
                                  "(one layout for every layer: a hybrid model's groups are not supported)")
        if not t.is_contiguous():
            raise KvLayoutRefused(f"layer {n}: not contiguous (a strided view): the worker moves a block as one byte range")
    if dtype not in _TORCH_DTYPES:
        raise KvLayoutRefused(f"KV dtype {dtype}: not one the engine API names ({', '.join(sorted(_TORCH_DTYPES))})")
    if len(shape) < 3:
        raise KvLayoutRefused(f"KV shape {shape}: expected (num_blocks, ...) with the block size in it")
    blocks = shape[0]
    if blocks == 2 and (num_blocks is None or num_blocks != 2) and len(shape) >= 2 and (num_blocks is None or shape[1] == num_blocks):
        raise KvLayoutRefused(f"KV shape {shape}: K and V first ((2, num_blocks, ...), vLLM before 2026-05-26): V lies at an offset "
                              "into the allocation and the engine API names one IPC handle per region, no offset")
    if num_blocks is not None and blocks != num_blocks:
        raise KvLayoutRefused(f"KV shape {shape}: dimension 0 is {blocks}, the KV cache config has {num_blocks} blocks "
                              "(the block must be dimension 0)")
    if block_size not in shape[1:]:
        raise KvLayoutRefused(f"KV shape {shape}: no dimension of the block size {block_size}")
    elem = int(first.element_size())
    per_block = elem
    for x in shape[1:]:
        per_block *= x
    heads, head_dim = (shape[1], shape[-1] // 2) if len(shape) == 4 else (1, shape[-1])
    layout = Layout(num_layers=len(names), num_blocks=blocks, block_size_tokens=block_size, num_kv_heads=heads, head_dim=head_dim,
                    dtype=_TORCH_DTYPES[dtype], kv_split="fused", page_bytes=per_block)
    device = getattr(first, "device", None)
    if getattr(device, "type", None) != "cuda":
        raise KvLayoutRefused(f"KV tensors on {device}: the worker maps GPU memory by CUDA IPC handle (a host KV cache is not supported)")
    handle = ipc_handle or _driver_ipc_handle
    regions = []
    for i, n in enumerate(names):
        h, offset = handle(int(kv_caches[n].data_ptr()))
        if offset != 0:
            raise KvLayoutRefused(f"layer {n}: starts {offset} bytes into its CUDA allocation; the engine API maps each region's "
                                  "allocation from its start")
        regions.append(CudaIpcRegion(i, "KV", per_block * blocks, h))
    return layout, CudaIpcPool(regions, int(getattr(device, "index", 0) or 0))


def _driver_ipc_handle(ptr: int) -> Tuple[bytes, int]:
    """The CUDA IPC handle of the allocation holding ``ptr``, and ``ptr``'s offset in it (GPU machine only)."""
    import ctypes
    from .gpu_pool import _Driver
    d = _Driver()
    base, size = ctypes.c_uint64(), ctypes.c_size_t()
    d.lib.cuMemGetAddressRange_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_size_t), ctypes.c_uint64]
    d.check(d.lib.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), ptr), "cuMemGetAddressRange")
    return d.ipc_handle(base.value), ptr - base.value


# ---------------------------------------------------------------------------------------------------- the worker half


@dataclasses.dataclass
class _Decode:
    """A decode request of this engine whose KV comes from a prefill engine."""
    fact: DecodeReady
    leased: bool = False
    signal: Optional[KvSignal] = None
    ended: bool = False  # the handoff ended at the decider (released, timed out, cancelled): no more facts for it
    aborted: bool = False  # vLLM ended it while its KV was awaited: reported finished receiving once the handoff ended
    released: bool = False  # the decider released its pages: no push writes into them
    reported: bool = False  # reported finished receiving


class _Heartbeats:
    """The leases of this engine's decodes, renewed by one thread: every ``waiting_every_s`` while a decode awaits its KV
    (an engine cut off from Kafka is seen in time), every ``every_s`` after. One thread for all: a vLLM engine decodes
    hundreds of requests at once, and a thread each (the library's ``LeaseKeeper``) would start one on vLLM's step thread
    for every request."""

    def __init__(self, client: EngineApiClient, lease_ms: int, every_s: float, waiting_every_s: float) -> None:
        self.client, self.lease_ms, self.every_s, self.waiting_every_s = client, lease_ms, every_s, waiting_every_s
        self._cond = threading.Condition()
        self._leases: Dict[str, List[Any]] = {}  # OrbitKV id → [lease id, lease epoch, next due (monotonic), seq, period]
        self._closed = False
        self._thread: Optional[threading.Thread] = None
        self._wakes_at = 0.0  # when the thread looks next (monotonic); an earlier lease wakes it

    def add(self, request_id: str, lease_id: str, epoch: int) -> None:
        due = time.monotonic() + self.waiting_every_s
        with self._cond:
            self._leases[request_id] = [lease_id, epoch, due, 0, self.waiting_every_s]
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="orbitkv-leases", daemon=True)
                self._thread.start()
            elif due < self._wakes_at:
                self._cond.notify()

    def kv_in(self, request_id: str) -> None:
        with self._cond:
            st = self._leases.get(request_id)
            if st is not None:
                st[4] = self.every_s

    def remove(self, request_id: str) -> None:
        with self._cond:
            self._leases.pop(request_id, None)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._leases.clear()
            self._cond.notify()

    def _run(self) -> None:
        while True:
            due: List[Tuple[str, str, int, int]] = []
            with self._cond:
                if self._closed:
                    return
                now = time.monotonic()
                nxt = now + 60.0
                for rid, st in self._leases.items():
                    if st[2] <= now:
                        st[3] += 1
                        st[2] = now + st[4]
                        due.append((rid, st[0], st[1], st[3]))
                    nxt = min(nxt, st[2])
                if not due:
                    self._wakes_at = nxt
                    self._cond.wait(nxt - now)
                    continue
                # sent under the lock: a lease removed (its decode ended, its cancel sent) gets no heartbeat after
                until = int(time.time() * 1000) + self.lease_ms
                for rid, lease_id, epoch, seq in due:
                    self.client.heartbeat(rid, lease_id, epoch, until, seq)


@dataclasses.dataclass
class _Save:
    chunk: SaveChunk
    reported: Tuple[int, int, int] = (0, 0, 0)
    at: float = 0.0


class WorkerSide:
    """The model runner's calls, for one vLLM engine (tensor-parallel rank 0; one rank only for now)."""

    def __init__(self, settings: WorkerSettings, block_size: int, num_blocks: Optional[int] = None,
                 connect: Callable[..., EngineApiClient] = EngineApiClient.connect) -> None:
        self.settings = settings
        self.block_size = block_size
        self.num_blocks = num_blocks
        self._connect = connect
        self.client: Optional[EngineApiClient] = None
        self.layout: Optional[Layout] = None
        self._layers: Dict[str, int] = {}
        self._lock = threading.Lock()
        self._meta: Optional[OrbitKVPdMetadata] = None
        self._decodes: Dict[str, _Decode] = {}  # vLLM id → its decode
        self._kept: Dict[str, str] = {}  # OrbitKV id → vLLM id: prefill blocks kept until released
        self._saving: Dict[str, _Save] = {}
        self._named: "Dict[str, None]" = {}  # prefills whose pages a progress report named
        self._finished_sending: Set[str] = set()
        self._finished_recving: Set[str] = set()
        self._load_errors: Set[int] = set()
        self._lease_epochs = itertools.count(1)
        self._heartbeats: Optional[_Heartbeats] = None
        self._gpu_reports: "Optional[queue.Queue[Any]]" = None
        #: called (no arguments) whenever something finished: a loop that steps only when there is work wakes on it
        self.on_finished: Optional[Callable[[], None]] = None
        #: every decision, after this half acted on it (an engine's own bookkeeping, tests)
        self.observers: List[Callable[[Decision], None]] = []

    # ------------------------------------------------------------------------------------------------ registration

    def register_kv_caches(self, kv_caches: Mapping[str, Any]) -> None:
        """vLLM's KV cache becomes the engine's pool, and the engine joins its transfer worker (the hello names the pool:
        a worker that cannot map it refuses, and vLLM's start fails with the reason)."""
        layout, pool = map_kv_caches(kv_caches, self.block_size, self.num_blocks)
        self._layers = {n: i for i, n in enumerate(kv_caches)}
        self.layout = layout
        s = self.settings
        epoch = s.instance_epoch or int(time.time() * 1000)
        self.client = self._connect(s.engine_api_path, Registration(s.engine_id, epoch, s.role, layout, pool, s.model, s.http_url,
                                                                    s.block_hash), on_decision=self._on_decision,
                                    connect_timeout=s.connect_timeout_s)
        hb = s.heartbeat_s or max(0.05, s.lease_ms / 3000.0)
        self._heartbeats = _Heartbeats(self.client, s.lease_ms, hb, min(hb, s.kv_confirm_s / 4))
        log.info("OrbitKV connector: %s registered with its worker (%d layers, %d blocks of %d tokens)", s.engine_id,
                 layout.num_layers, layout.num_blocks, layout.block_size_tokens)

    # ------------------------------------------------------------------------------------------------ per step

    def bind_connector_metadata(self, connector_metadata: OrbitKVPdMetadata) -> None:
        """The step's facts from the scheduler half, reported now, and its prefill chunks, reported layer by layer."""
        self._meta = connector_metadata
        m = connector_metadata
        for d in m.decode_ready:
            self._decode_ready(d)
        for f in m.prefill_completed:
            self._prefill_completed(f)
        for e in m.ended:
            self._ended(e)
        with self._lock:
            for c in m.saving:
                self._saving[c.vllm_request_id] = _Save(c)
            for vid, blocks in m.refused:  # no KV can come: a load error of its blocks, vLLM's policy decides
                self._load_errors.update(blocks)
                self._finished_recving.add(vid)
        if m.refused:
            self._wake()

    def clear_connector_metadata(self) -> None:
        self._meta = None

    def has_connector_metadata(self) -> bool:
        return self._meta is not None

    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        """Nothing to start: the prefill's worker pushes the KV into the pages this engine announced, and a request runs
        only once ``get_finished`` said its KV is in (the whole prompt: no load overlaps the forward pass)."""

    def wait_for_layer_load(self, layer_name: str) -> None:
        """Nothing to wait for (see :meth:`start_load_kv`)."""

    def save_kv_layer(self, layer_name: str, kv_layer: Any, attn_metadata: Any, **kwargs: Any) -> None:
        """Layer ``layer_name`` of this step's prefill chunks is computed: reported to the worker (``prefill_progress``),
        which pushes it while the next layers compute — at most one report per ``layerwise_min_report_interval_ms``,
        and always the last layer. On a GPU the layer's kernels are only queued when vLLM calls this: the report waits
        for a CUDA event recorded now (on another thread), so that the worker never reads pages not yet written."""
        i = self._layers.get(layer_name)
        if i is None or self.client is None or not self._saving:
            return
        layers = self.layout.num_layers if self.layout is not None else len(self._layers)
        now = time.monotonic()
        due: List[Tuple[SaveChunk, Tuple[int, int, int]]] = []
        with self._lock:
            for s in self._saving.values():
                c = s.chunk
                last = i + 1 >= layers
                state = (c.end, c.end, layers) if last else (c.start, c.end, i + 1)
                if state == s.reported or (not last and now - s.at < self.settings.min_report_interval_s):
                    continue
                due.append((c, state))
                s.reported, s.at = state, now
        if not due:
            return
        self._after_gpu(_cuda_event(kv_layer), due)

    def _after_gpu(self, event: Any, due: List[Tuple[SaveChunk, Tuple[int, int, int]]]) -> None:
        """Reports ``due`` once ``event`` completed, on one thread for all (in order: a layer's report never overtakes an
        earlier one's); vLLM's step goes on meanwhile. No event (not on a GPU): reported now."""
        if event is None:
            self._report(due)
            return
        with self._lock:
            if self._gpu_reports is None:
                self._gpu_reports = queue.Queue()
                q = self._gpu_reports

                def run() -> None:
                    while True:
                        item = q.get()
                        if item is None:
                            return
                        if item[0] is not None:
                            item[0].synchronize()
                            self._report(item[1])
                        else:
                            item[1]()  # a fact queued behind the layer reports (never ahead of them)
                threading.Thread(target=run, name="orbitkv-layer-reports", daemon=True).start()
            self._gpu_reports.put((event, due))

    def _report(self, due: Iterable[Tuple[SaveChunk, Tuple[int, int, int]]]) -> None:
        assert self.client is not None
        for c, (done, end, layers) in due:
            with self._lock:
                first = c.vllm_request_id not in self._named  # a request's first report names its pages
                self._named[c.vllm_request_id] = None
                while len(self._named) > _RECENT:
                    self._named.pop(next(iter(self._named)))
            self.client.prefill_progress(c.request_id, c.blocks if first else None, c.num_tokens, done, end, layers)

    def wait_for_save(self) -> None:
        """The step's forward pass ended: every chunk counts as computed in every layer (a chunk whose last layer was
        reported is not reported again). Nothing is waited for: the push runs beside the engine."""
        with self._lock:
            saving, self._saving = list(self._saving.values()), {}
        if self.client is None:
            return
        layers = self.layout.num_layers if self.layout is not None else len(self._layers)
        due = [(s.chunk, (s.chunk.end, s.chunk.end, layers)) for s in saving if s.reported != (s.chunk.end, s.chunk.end, layers)]
        if due:
            # after the forward pass's kernels, queued, when layers were reported from a GPU
            self._after_gpu(_cuda_event(None) if self._gpu_reports is not None else None, due)

    def get_finished(self, finished_req_ids: Set[str]) -> Tuple[Optional[Set[str]], Optional[Set[str]]]:
        """(finished sending, finished receiving) since the last call: prefill blocks the decider released (and a decode's
        kept after it ended while loading), and decodes whose KV is in (or will not come: see
        :meth:`get_block_ids_with_load_errors`)."""
        with self._lock:
            sending, self._finished_sending = self._finished_sending, set()
            recving, self._finished_recving = self._finished_recving, set()
        return sending or None, recving or None

    def get_block_ids_with_load_errors(self) -> Set[int]:
        """The blocks of loads that will not complete since the last call: the decider decided a recompute (the prefill
        failed), or the handoff ended (cancelled, timed out). vLLM recomputes them or fails the request
        (``kv_load_failure_policy``)."""
        with self._lock:
            errors, self._load_errors = self._load_errors, set()
        return errors

    def shutdown(self) -> None:
        """Says goodbye to the worker (the decider voids this instance's in-flight work) and stops every lease."""
        with self._lock:
            self._decodes.clear()
            if self._gpu_reports is not None:
                self._gpu_reports.put(None)
        if self._heartbeats is not None:
            self._heartbeats.close()
        if self.client is not None:
            self.client.close()

    # ------------------------------------------------------------------------------------------------ facts

    def _decode_ready(self, d: DecodeReady) -> None:
        c = self.client
        assert c is not None, "register_kv_caches first"
        s = self.settings
        dec = _Decode(d)
        with self._lock:
            self._decodes[d.vllm_request_id] = dec
        lease_id = f"lease/{s.engine_id}/{d.request_id}"
        epoch = next(self._lease_epochs)
        kv = c.await_kv(d.request_id)
        ready = c.decode_ready(d.request_id, lease_id, epoch, d.dest_blocks, int(time.time() * 1000) + s.lease_ms,
                               marks=_marks(("in", d.in_us)), cached_blocks=d.cached_blocks)
        if self._heartbeats is not None and not (s.fault_no_heartbeat_prefix and d.request_id.startswith(s.fault_no_heartbeat_prefix)):
            dec.leased = True
            self._heartbeats.add(d.request_id, lease_id, epoch)
        ready.add_done_callback(lambda f: self._decode_ready_answered(d, f))
        kv.add_done_callback(lambda f: self._kv_signal(d.vllm_request_id, f.result()))

    def _decode_ready_answered(self, d: DecodeReady, f: "Future[str]") -> None:
        e = f.exception()
        c = self.client
        if isinstance(e, ApiError) and (e.code != p.UNAVAILABLE or (c is not None and c.stopped_because is not None)):
            # refused by the worker (it never reached the log), or the connection is gone for good: no KV will come
            log.warning("decode-ready of %s not taken: %s", d.request_id, e)
            if e.code != p.UNAVAILABLE:
                self._released_decode(d.request_id)  # nothing was ordered into its blocks
            self._kv_signal(d.vllm_request_id, KvSignal("ended", reason=f"decode-ready not taken: {e}", outcome="refused"))

    def _kv_signal(self, vid: str, signal: KvSignal) -> None:
        with self._lock:
            dec = self._decodes.get(vid)
            if dec is None or dec.signal is not None:
                return
            dec.signal = signal
            if signal.kind != "ready":
                # no KV will come: every block the order would have moved is a load error (the cached ones are vLLM's own)
                self._load_errors.update(dec.fact.dest_blocks[dec.fact.cached_blocks:])
            if signal.kind == "ended":
                # The handoff ended (cancelled, timed out): a push may still be draining into the blocks — the decider's
                # outcome can come before it fenced the push, and only its release of these pages says it did. Finished
                # receiving (vLLM recomputes into the blocks, or frees them if the request ended) waits for that release,
                # or, cut off from the decider, for as long as a lease could still be held.
                dec.ended = True
                released = dec.released
                if not released:
                    self._fallback(self.settings.lease_ms / 1000.0 + self.settings.kv_confirm_s, self._released_decode, dec.fact.request_id)
            else:
                released = True
            if released:
                self._report_recving(vid, dec)
            rid, leased = dec.fact.request_id, dec.leased
        if released:
            self._wake()
        if leased and self._heartbeats is not None:
            if signal.kind == "ended":
                self._heartbeats.remove(rid)
            else:
                self._heartbeats.kv_in(rid)

    def _report_recving(self, vid: str, dec: _Decode) -> None:
        """(Under the lock.) The load of ``vid`` is over: reported once; an aborted decode is forgotten with it."""
        if dec.reported:
            return
        dec.reported = True
        self._finished_recving.add(vid)
        if dec.aborted:
            self._decodes.pop(vid, None)

    def _released_decode(self, request_id: str) -> None:
        """The decider released this engine's decode pages of ``request_id`` (or the fallback passed): no push writes into
        them any more."""
        found = False
        with self._lock:
            for vid, dec in list(self._decodes.items()):
                if dec.fact.request_id == request_id:
                    dec.released = True
                    if dec.ended:
                        self._report_recving(vid, dec)
                        found = True
        if found:
            self._wake()

    def _fallback(self, seconds: float, fn: Callable[..., None], *args: Any) -> None:
        t = threading.Timer(seconds, fn, args)
        t.daemon = True
        t.start()

    def _prefill_completed(self, f: PrefillCompleted) -> None:
        c = self.client
        assert c is not None, "register_kv_caches first"
        with self._lock:
            self._kept[f.request_id] = f.vllm_request_id
            behind = self._gpu_reports
        if behind is not None:  # after the layer reports still waiting for their GPU events
            behind.put((None, lambda: self._send_prefill_completed(c, f)))
        else:
            self._send_prefill_completed(c, f)

    def _send_prefill_completed(self, c: EngineApiClient, f: PrefillCompleted) -> None:
        fut = c.prefill_completed(f.request_id, f.source_blocks, f.num_tokens, f.first_token,
                                  marks=_marks(("in", f.in_us), ("c0", f.c0_us), ("c1", f.c1_us)))

        def answered(x: "Future[str]") -> None:
            e = x.exception()
            if isinstance(e, ApiError) and e.code != p.UNAVAILABLE:
                log.warning("prefill-completed of %s refused: %s; its blocks are freed", f.request_id, e)
                self._send_done(f.request_id)
            # unacknowledged: the fact may be in the log and an order may read the blocks; they stay until the release or
            # the request's outcome says what the decider knew — or, at the latest, past every deadline it can have
            elif e is not None:
                self._fallback(UNSURE_FALLBACK_S, self._send_done, f.request_id)
        fut.add_done_callback(answered)

    def _ended(self, e: RequestEnded) -> None:
        c = self.client
        assert c is not None, "register_kv_caches first"
        if e.role == "prefill":
            if not e.whole:
                c.prefill_failed(e.request_id, f"vLLM ended the prefill: {e.status}", True)
            return
        with self._lock:
            dec = self._decodes.get(e.vllm_request_id)
            # still awaiting its KV: kept until the handoff ends (the KV signal: landed, recompute, or ended after the
            # decider's release), then reported finished receiving, which frees its blocks in vLLM
            waiting = dec is not None and not dec.reported
            if dec is not None:
                if waiting:
                    dec.aborted = True
                else:
                    del self._decodes[e.vllm_request_id]
        if self._heartbeats is not None:
            self._heartbeats.remove(e.request_id)
        ended_here = dec is not None and dec.ended
        if not ended_here:
            if e.whole:
                sig = dec.signal if dec is not None else None
                recomputed = sig is not None and sig.kind != "ready"
                # the KV's arrival as the engine saw it, and when it landed (the worker's mark): the handoff's anatomy
                c.decode_completed(e.request_id, e.output_tokens, recomputed, marks=_marks(
                    ("in", e.in_us), ("kv", sig.received_us if sig is not None and not recomputed else 0),
                    ("land", sig.landed_us if sig is not None and not recomputed else 0)))
            else:
                c.cancel(e.request_id, f"vLLM ended the decode: {e.status}")
        if not waiting:
            c.forget(e.request_id)

    def _send_done(self, request_id: str) -> None:
        with self._lock:
            vid = self._kept.pop(request_id, None)
            if vid is None:
                return
            self._finished_sending.add(vid)
        self._wake()

    # ------------------------------------------------------------------------------------------------ decisions

    def _on_decision(self, d: Decision) -> None:
        f = d.fields
        if d.kind == p.RELEASE and f.get("engine_id") == self.settings.engine_id and f.get("side") == "decode":
            self._released_decode(d.request_id)
        if (d.kind == p.RELEASE and f.get("engine_id") == self.settings.engine_id and f.get("side") == "prefill") or d.kind == p.OUTCOME:
            # a prefill's blocks go with its release; the decider releases a request's pages before its outcome, so blocks
            # still kept then are those of a fact it never knew of (unacknowledged, not in the log)
            self._send_done(d.request_id)
        for o in self.observers:
            o(d)

    def _wake(self) -> None:
        w = self.on_finished
        if w is not None:
            w()

    # ------------------------------------------------------------------------------------------------ introspection



def _marks(*pairs: Tuple[str, int]) -> Optional[Dict[str, int]]:
    """The timing marks a fact carries (those known: 0 is unknown)."""
    m = {k: v for k, v in pairs if v}
    return m or None


def _cuda_event(kv_layer: Any) -> Any:
    """A CUDA event recorded on the current stream when ``kv_layer`` is a CUDA tensor, or is None once layers were (None
    otherwise, and when PyTorch is not there): what a report of this layer waits for."""
    if kv_layer is not None and not getattr(kv_layer, "is_cuda", False):
        return None
    try:
        import torch  # type: ignore
    except ImportError:
        return None
    ev = torch.cuda.Event()
    ev.record()
    return ev
