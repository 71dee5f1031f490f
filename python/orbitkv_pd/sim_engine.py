"""A simulated inference engine in Python: the same OpenAI-compatible HTTP server and the same deterministic model as
the Java engine (``./orbitkv-pd engine``), taking part in P/D through its transfer worker's engine API with this
library. Any mix of Java and Python engines answers every request exactly as a colocated engine does.

    python3 -m orbitkv_pd.sim_engine --config engine.properties

Keys (a subset of the Java engine's, docs/engine-integration.md): ``engine.id``, ``engine.role``, ``engine.preset``
(tiny, 8b, 70b), ``engine.pool.blocks``, ``engine.pool.path`` and ``engine.api.path`` (the worker's socket; without
it the engine serves colocated requests only), ``engine.instance-epoch``, ``engine.model``, ``engine.model.seed``,
``engine.http.host``, ``engine.http.port``, ``engine.http.advertised-url`` (what the proxy connects to; required with a
wildcard host), ``engine.compute.prefill-ms-per-token``,
``engine.compute.decode-ms-per-token``, ``engine.max-prompt-tokens``, ``engine.lease.duration``,
``engine.lease.heartbeat``, ``engine.kv.timeout``, ``engine.kv.verify``, ``engine.fault.corrupt-kv-prefix``,
``engine.fault.stall-prefill-prefix``, ``engine.fault.no-heartbeat-prefix`` (fault tests), and the engine model's
``engine.cost`` (``llama-8b-h100``, ``llama-70b-tp4``, ``tiny``, ``per-token``: the compute keys), ``engine.max-batched-tokens``,
``engine.max-num-seqs``, ``engine.prefix-cache.enabled``, ``engine.prefix-cache.seed``.

The engine computes as a GPU engine does, so that its latencies under load mean something: one forward step at a time
(:class:`Stepper`, running the same :mod:`~orbitkv_pd.engine_model` scheduler as the Java engine), every running request
decoding a token per step and prompts prefilled in chunks beside them, a queue when the batch or the KV pool is full,
and a prefix cache that spares a repeated prompt's leading blocks. A request given its own timer instead would never
wait for another, and P/D would look better than it is. The KV bytes are still written and checked for real (the
transfers move them); only their compute time is modelled.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import logging
import os
import queue
import re
import signal
import socket
import sys
import threading
import time
import uuid
from concurrent.futures import Future, TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from . import engine_model as em
from . import sim_model as sm
from .client import EngineApiClient, KvSignal, LeaseKeeper, now_us
from .pool import ShmKvPool
from .protocol import UNAVAILABLE, ApiError, Decision, Layout, Registration, ShmPool

log = logging.getLogger("orbitkv_pd.sim_engine")

PRESETS = {"tiny": (4, 2, 64), "8b": (32, 8, 128), "70b": (80, 8, 128)}
PRESET_COSTS = {"tiny": "tiny", "8b": "llama-8b-h100", "70b": "llama-70b-tp4"}
PER_TOKEN = "per-token"
ROLES = ("user", "system", "assistant", "tool", "developer")


# ---------------------------------------------------------------------------------------------------- configuration


def parse_duration(key: str, v: str) -> float:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*", v)
    if not m:
        raise ValueError(f"{key}: a duration like 500ms, 30s or 2m, got '{v}'")
    n = float(m.group(1))
    return n * {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}[m.group(2) or "ms"]


def read_properties(path: str) -> Dict[str, str]:
    """Java .properties as written by java.util.Properties.store (key=value, # comments, \\ escapes)."""
    out: Dict[str, str] = {}
    with open(path, encoding="utf-8") as f:
        for raw in f:
            line = raw.strip()
            if not line or line[0] in "#!":
                continue
            m = re.match(r"((?:\\.|[^=:\s])+)\s*[=:\s]\s*(.*)", line)
            if not m:
                continue
            unescape = lambda s: re.sub(r"\\(.)", lambda x: {"t": "\t", "n": "\n"}.get(x.group(1), x.group(1)), s)
            out[unescape(m.group(1))] = unescape(m.group(2))
    return out


@dataclass
class SimEngineConfig:
    engine_id: str
    role: str
    preset: str
    layout: Layout
    pool_path: Optional[str]
    api_path: Optional[str]
    instance_epoch: int
    model: str
    seed: int
    host: str
    port: int
    prefill_ms_per_token: float
    decode_ms_per_token: float
    max_prompt_tokens: int
    lease_s: float
    heartbeat_s: float
    kv_timeout_s: float
    verify: bool
    corrupt_prefix: Optional[str]
    stall_prefix: Optional[str] = None
    no_heartbeat_prefix: Optional[str] = None
    advertised_url: Optional[str] = None
    lease_margin_s: float = 3.0
    kv_confirm_s: float = 6.0
    cost: str = PER_TOKEN
    max_batched_tokens: int = 8192
    max_num_seqs: int = 256
    prefix_cache: bool = True
    prefix_cache_seed: str = "orbitkv"
    kv_wait_s: float = 30.0
    reports_per_step: int = 32
    report_interval_s: float = 0.001
    vllm_connector: bool = False
    kv_load_failure_policy: str = "recompute"
    fail_prefix: Optional[str] = None

    KEYS = ("engine.id", "engine.role", "engine.preset", "engine.pool.blocks", "engine.pool.path", "engine.api.path",
            "engine.instance-epoch", "engine.model", "engine.model.seed", "engine.http.host", "engine.http.port", "engine.http.advertised-url",
            "engine.compute.prefill-ms-per-token", "engine.compute.decode-ms-per-token", "engine.max-prompt-tokens",
            "engine.lease.duration", "engine.lease.heartbeat", "engine.lease.margin", "engine.kv.timeout", "engine.kv.confirm-timeout", "engine.kv.verify",
            "engine.fault.corrupt-kv-prefix", "engine.fault.stall-prefill-prefix", "engine.fault.no-heartbeat-prefix",
            "engine.cost", "engine.max-batched-tokens", "engine.max-num-seqs", "engine.prefix-cache.enabled",
            "engine.prefix-cache.seed", "engine.kv-wait", "engine.prefix-cache.skip-transfer", "engine.layerwise.reports-per-step",
            "engine.layerwise.min-report-interval", "engine.vllm-connector", "engine.vllm.kv-load-failure-policy",
            "engine.fault.fail-prefill-prefix")

    def cost_model(self) -> em.CostModel:
        """The step cost model ``engine.cost`` names (``per-token``: the compute keys')."""
        if self.cost == PER_TOKEN:
            return em.per_token_costs(self.prefill_ms_per_token, self.decode_ms_per_token)
        return em.COSTS[self.cost]

    @classmethod
    def from_properties(cls, p: Dict[str, str]) -> "SimEngineConfig":
        common = common_settings(p, cls.KEYS, "the Python engine")
        preset = p.get("engine.preset", "8b").lower()
        if preset not in PRESETS:
            raise ValueError(f"engine.preset: must be one of {list(PRESETS)}, got '{preset}'")
        layers, heads, dim = PRESETS[preset]
        layout = Layout(num_layers=layers, num_blocks=int(p.get("engine.pool.blocks", "256")), num_kv_heads=heads, head_dim=dim)
        pool = p.get("engine.pool.path") or None
        if common["api_path"] and not pool:
            raise ValueError("engine.pool.path: required with engine.api.path (the pool file the engine and its worker share)")
        # The legacy compute keys still mean what they did (a token's prefill and decode time), so a config that sets
        # either keeps its timing; otherwise the preset's calibrated GPU cost model.
        per_token_keys = ("engine.compute.prefill-ms-per-token", "engine.compute.decode-ms-per-token")
        compute = [_number(p, k, d) for k, d in zip(per_token_keys, ("0.05", "2.0"))]
        cost = p.get("engine.cost", PER_TOKEN if any(k in p for k in per_token_keys) else PRESET_COSTS[preset]).strip().lower()
        if cost != PER_TOKEN and cost not in em.COSTS:
            raise ValueError(f"engine.cost: must be one of {[*em.COSTS, PER_TOKEN]}, got '{p.get('engine.cost')}'")
        enabled = p.get("engine.prefix-cache.enabled", "true").strip().lower()
        if enabled not in ("true", "false"):
            raise ValueError(f"engine.prefix-cache.enabled: true or false, got '{p.get('engine.prefix-cache.enabled')}'")
        via = p.get("engine.vllm-connector", "false").strip().lower()
        if via not in ("true", "false"):
            raise ValueError(f"engine.vllm-connector: true or false, got '{p.get('engine.vllm-connector')}'")
        if via == "true" and not common["api_path"]:
            raise ValueError("engine.vllm-connector: needs engine.api.path (the connector joins the engine's transfer worker)")
        policy = p.get("engine.vllm.kv-load-failure-policy", "recompute").strip().lower()
        if policy not in ("recompute", "fail"):
            raise ValueError(f"engine.vllm.kv-load-failure-policy: recompute or fail (vLLM's kv_load_failure_policy), got '{policy}'")
        return cls(**common, preset=preset, layout=layout, pool_path=pool, model=p.get("engine.model", f"orbitkv-sim-{preset}"),
                   seed=int(p.get("engine.model.seed", "42")),
                   prefill_ms_per_token=compute[0], decode_ms_per_token=compute[1],
                   verify=p.get("engine.kv.verify", "true").lower() == "true",
                   corrupt_prefix=p.get("engine.fault.corrupt-kv-prefix") or None,
                   cost=cost, max_batched_tokens=_positive(p, "engine.max-batched-tokens", "8192"),
                   max_num_seqs=_positive(p, "engine.max-num-seqs", "256"), prefix_cache=enabled == "true",
                   prefix_cache_seed=p.get("engine.prefix-cache.seed", "orbitkv"), reports_per_step=_reports(p),
                   report_interval_s=parse_duration("engine.layerwise.min-report-interval",
                                                    p.get("engine.layerwise.min-report-interval", "1ms")),
                   vllm_connector=via == "true", kv_load_failure_policy=policy)


def _reports(p: Dict[str, str]) -> int:
    v = p.get("engine.layerwise.reports-per-step", "32")
    if not v.strip().isdigit() or int(v) > 1024:
        raise ValueError(f"engine.layerwise.reports-per-step: an integer in 0..1024 (0: never), got '{v}'")
    return int(v)


def _number(p: Dict[str, str], key: str, default: str) -> float:
    v = p.get(key, default)
    try:
        n = float(v)
    except ValueError:
        raise ValueError(f"{key}: a number of milliseconds, got '{v}'") from None
    if not 0 <= n < float("inf"):
        raise ValueError(f"{key}: must be >= 0, got '{v}'")
    return n


def _positive(p: Dict[str, str], key: str, default: str) -> int:
    v = p.get(key, default)
    try:
        n = int(v)
    except ValueError:
        raise ValueError(f"{key}: an integer >= 1, got '{v}'") from None
    if n < 1:
        raise ValueError(f"{key}: must be >= 1, got {n}")
    return n


def common_settings(p: Dict[str, str], keys: Tuple[str, ...], who: str) -> Dict[str, Any]:
    """Refuses a key not in ``keys`` (most are typos) and reads what every Python engine has: its identity, HTTP
    listener, worker socket, leases and fault hooks (``engine.fault.stall-prefill-prefix``: a prefill that never reports;
    ``engine.fault.no-heartbeat-prefix``: a decode that stops renewing its lease; ``engine.fault.fail-prefill-prefix``: a
    prefill that fails)."""
    unknown = sorted(k for k in p if k not in keys)
    if unknown:
        raise ValueError(f"unknown keys {unknown}: {who} reads {list(keys)}")
    engine_id = p.get("engine.id", "")
    if not re.fullmatch(r"[A-Za-z0-9._:-]+", engine_id):
        raise ValueError(f"engine.id: required; letters, digits, '.', '_', ':' and '-' only, got '{engine_id}'")
    role = p.get("engine.role", "both").lower()
    if role not in ("prefill", "decode", "both"):
        raise ValueError(f"engine.role: must be prefill, decode or both, got '{role}'")
    lease_s = parse_duration("engine.lease.duration", p.get("engine.lease.duration", "30s"))
    heartbeat_s = parse_duration("engine.lease.heartbeat", p.get("engine.lease.heartbeat", "10s"))
    margin_s = parse_duration("engine.lease.margin", p.get("engine.lease.margin", f"{max(1.0, lease_s / 10):g}s"))
    if heartbeat_s + margin_s >= lease_s:
        raise ValueError(f"engine.lease.margin: heartbeat ({heartbeat_s:g}s) + margin ({margin_s:g}s) must be shorter than "
                         f"engine.lease.duration ({lease_s:g}s), or every lease is given up before it is renewed")
    host = p.get("engine.http.host", "127.0.0.1")
    advertised = p.get("engine.http.advertised-url") or None
    if advertised is None and host.strip() in ("", "*", "0.0.0.0", "::", "[::]"):
        # A peer told 0.0.0.0 connects to itself: nothing is guessed from the host name or a route (docs/deploy.md).
        raise ValueError(f"engine.http.advertised-url: required when engine.http.host is a wildcard ({host}): set the URL "
                         "the proxy reaches this engine at")
    return {"engine_id": engine_id, "role": role, "api_path": p.get("engine.api.path") or None, "advertised_url": advertised,
            "instance_epoch": int(p.get("engine.instance-epoch", str(int(time.time() * 1000)))),
            "host": host, "port": int(p.get("engine.http.port", "8100")),
            "max_prompt_tokens": int(p.get("engine.max-prompt-tokens", "32768")),
            "lease_s": lease_s,
            "heartbeat_s": heartbeat_s,
            "lease_margin_s": margin_s,
            "kv_timeout_s": parse_duration("engine.kv.timeout", p.get("engine.kv.timeout", "60s")),
            "kv_confirm_s": parse_duration("engine.kv.confirm-timeout", p.get("engine.kv.confirm-timeout", "6s")),
            "kv_wait_s": parse_duration("engine.kv-wait", p.get("engine.kv-wait", "30s")),
            "stall_prefix": p.get("engine.fault.stall-prefill-prefix") or None,
            "no_heartbeat_prefix": p.get("engine.fault.no-heartbeat-prefix") or None,
            "fail_prefix": p.get("engine.fault.fail-prefill-prefix") or None}


# ---------------------------------------------------------------------------------------------------- state


class BlockAllocator:
    """Pages of the pool by owner (``P:``/``D:``/``C:`` + request id). Thread-safe."""

    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks
        self._free = list(range(num_blocks - 1, -1, -1))
        self._owners: Dict[str, List[int]] = {}
        self._lock = threading.Condition(threading.RLock())
        self._waiting: List[object] = []  # tickets of the requests waiting for pages, first come first served

    def allocate(self, owner: str, n: int, wait_s: float = 0.0, hashes: Optional[List[bytes]] = None) -> Optional[List[int]]:
        """``n`` pages for ``owner``; when fewer are free, waits up to ``wait_s`` behind the requests that waited before it
        (``engine.kv-wait``: vLLM keeps a request that does not fit waiting until pages free up). None: none came.
        ``hashes``: for a pool with prefix caching (:class:`PrefixBlockPool`); here nothing is cached."""
        with self._lock:
            if owner in self._owners:
                raise KeyError(owner)
            if not self._waiting:
                blocks = self._try(owner, n, hashes or [])
                if blocks is not None:
                    return blocks
            if wait_s <= 0:
                return None
            ticket = object()
            self._waiting.append(ticket)
            deadline = time.monotonic() + wait_s
            try:
                while True:
                    if self._waiting[0] is ticket:
                        blocks = self._try(owner, n, hashes or [])
                        if blocks is not None:
                            return blocks
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return None
                    self._lock.wait(left)
            finally:
                self._waiting.remove(ticket)
                self._lock.notify_all()  # the next in line may fit now

    def _try(self, owner: str, n: int, hashes: List[bytes]) -> Optional[List[int]]:
        """``n`` pages for ``owner`` now (under the lock), or None when fewer are free."""
        if len(self._free) < n:
            return None
        blocks = [self._free.pop() for _ in range(n)]
        self._owners[owner] = blocks
        return blocks

    def free(self, owner: str) -> List[int]:
        with self._lock:
            blocks = self._release(owner)
            if blocks:
                self._lock.notify_all()
            return blocks

    def _release(self, owner: str) -> List[int]:
        """``owner``'s pages back to the free ones (under the lock)."""
        blocks = self._owners.pop(owner, [])
        self._free.extend(reversed(blocks))
        return blocks

    def reused(self, owner: str) -> int:
        """How many of ``owner``'s first pages held their KV already (a prefix cache's hit): none here."""
        return 0

    def cache(self, owner: str, hashes: List[bytes]) -> None:
        """``owner``'s first pages now hold the blocks ``hashes`` name: nothing is cached here."""

    @property
    def waiting(self) -> int:
        with self._lock:
            return len(self._waiting)

    @property
    def used(self) -> int:
        with self._lock:
            return self.num_blocks - len(self._free)

    @property
    def holders(self) -> int:
        with self._lock:
            return len(self._owners)


class PrefixBlockPool(BlockAllocator):
    """Pages with vLLM's prefix caching (its ``BlockPool``): a page keeps the KV of a full prompt block after its
    request freed it, findable by the block's hash, until the page goes to another request — free pages are handed out
    least recently freed first, pages that hold no cached block before any that do. A request whose prompt starts with
    cached blocks takes those pages (shared with any request still using them: a cached page is never written again)
    and computes only the rest. Used by the reference engine (``engine.prefix-cache.enabled``); thread-safe."""

    def __init__(self, num_blocks: int) -> None:
        super().__init__(num_blocks)
        self._free: "collections.OrderedDict[int, None]" = collections.OrderedDict((b, None) for b in range(num_blocks))
        self._refs: Dict[int, int] = {}
        self._hash_of: Dict[int, bytes] = {}
        self._block_of: Dict[bytes, int] = {}
        self._reused: Dict[str, int] = {}

    def _try(self, owner: str, n: int, hashes: List[bytes]) -> Optional[List[int]]:
        """The first pages those caching ``hashes`` (the prompt's leading full blocks, as many as are cached in a row:
        :meth:`reused` says how many), the rest fresh; None when too few are free."""
        reuse: List[int] = []
        for h in hashes[:n]:
            b = self._block_of.get(h)
            if b is None:
                break
            reuse.append(b)
        taken_from_free = sum(1 for b in reuse if b in self._free)
        if len(self._free) - taken_from_free < n - len(reuse):
            return None
        for b in reuse:
            self._free.pop(b, None)
            self._refs[b] = self._refs.get(b, 0) + 1
        fresh: List[int] = []
        for _ in range(n - len(reuse)):
            b, _ = self._free.popitem(last=False)
            h = self._hash_of.pop(b, None)
            if h is not None:  # its cached block is gone now
                del self._block_of[h]
            self._refs[b] = 1
            fresh.append(b)
        self._owners[owner] = reuse + fresh
        self._reused[owner] = len(reuse)
        return self._owners[owner]

    def reused(self, owner: str) -> int:
        """How many of ``owner``'s first pages came from the cache (their KV is there already)."""
        with self._lock:
            return self._reused.get(owner, 0)

    def cache(self, owner: str, hashes: List[bytes]) -> None:
        """``owner``'s first pages now hold the KV of the blocks ``hashes`` name (written and complete): findable from now
        on. A block already cached in another page stays there."""
        with self._lock:
            blocks = self._owners.get(owner, [])
            for b, h in zip(blocks, hashes):
                if h in self._block_of or b in self._hash_of:
                    continue
                self._block_of[h] = b
                self._hash_of[b] = h

    def _release(self, owner: str) -> List[int]:
        blocks = self._owners.pop(owner, [])
        self._reused.pop(owner, None)
        uncached: List[int] = []
        for b in blocks:
            left = self._refs.get(b, 1) - 1
            if left > 0:
                self._refs[b] = left
                continue
            self._refs.pop(b, None)
            self._free[b] = None
            if b not in self._hash_of:
                uncached.append(b)
        # Pages that cache nothing are handed out before those that do, and in the order they were held: moved to the
        # front one by one in that order, the next request would take them reversed, and a push between two such pools
        # (ascending pages into descending ones) is one device copy per page and region instead of a few long runs
        # (on the H100 an 8K prompt's whole push took 5.3 ms p50 that way, 1.07 ms in order).
        for b in reversed(uncached):
            self._free.move_to_end(b, last=False)
        return blocks

    @property
    def cached_blocks(self) -> int:
        with self._lock:
            return len(self._block_of)


class _ProgressReport:
    """A P/D prefill's ``prefill_progress`` to the worker (as the Java engine's): what the modelled steps say is computed,
    but never a layer whose bytes the fill has not written yet, sent when it says more than the last report; the first
    names the pages. Fed by the step thread (:meth:`modelled`) and the request's thread writing the KV (:meth:`filled`)."""

    def __init__(self, client: Any, rid: str, blocks: List[int], num_tokens: int, num_layers: int) -> None:
        self.client, self.rid, self.blocks, self.num_tokens, self.num_layers = client, rid, blocks, num_tokens, num_layers
        self._lock = threading.Lock()
        self._model = (0, 0, 0)
        self._filled = 0
        self._sent: Optional[Tuple[int, int, int]] = None

    def modelled(self, done: int, chunk_end: int, layers: int) -> None:
        with self._lock:
            self._model = (done, chunk_end, layers)
            self._report()

    def filled(self, layers: int) -> None:
        with self._lock:
            self._filled = layers
            self._report()

    def _report(self) -> None:
        done, chunk_end, layers = self._model
        if chunk_end == 0:
            return
        # short of the fill: tokens [0, chunk end) in the layers both have (a smaller claim, but one the bytes back)
        now = (done, chunk_end, layers) if self._filled >= self.num_layers else (0, chunk_end, min(layers, self._filled))
        s = self._sent
        if now == s or (now[0] == 0 and now[2] == 0):
            return
        if s is not None and not (now[0] >= s[1] or (now[0] >= s[0] and now[1] >= s[1] and now[2] >= s[2])):
            return  # says less than the last report in some respect: the worker would not take it
        self.client.prefill_progress(self.rid, self.blocks if s is None else None, self.num_tokens, *now)
        self._sent = now


class StepperClosed(Exception):
    """The engine closed while a request waited for its steps."""


class StepHandle:
    """One sequence submitted to a :class:`Stepper`: the outcomes of its steps (``FIRST_TOKEN``, ``TOKEN``,
    ``FINISHED``) arrive on ``outcomes`` in order, each once the step that produced it has ended. ``key`` is its id in the
    scheduler (unique, so that the prefill and the decode of one request on the same engine never mix); ``queued`` is
    False when it had nothing to run (a decode of a single token)."""

    def __init__(self, stepper: "Stepper", rid: str, key: str, part: str, queued: bool) -> None:
        self.stepper, self.rid, self.key, self.part, self.queued = stepper, rid, key, part, queued
        self.outcomes: "queue.Queue[str]" = queue.Queue()

    def next(self) -> str:
        """The next outcome, waiting for its step; :class:`StepperClosed` when the engine closes first."""
        kind = self.outcomes.get()
        if kind == Stepper.CLOSED:
            self.outcomes.put(kind)  # every later wait fails too
            raise StepperClosed(f"the engine closed while {self.rid} waited for its steps")
        return kind

    def wait_for(self, kind: str) -> None:
        while self.next() != kind:
            pass

    def abort(self) -> bool:
        """Takes this sequence out of the scheduler (its blocks freed); False when it already finished."""
        return self.stepper.abort_key(self.key)


class Stepper:
    """The engine's forward steps in real time: one thread runs the model's :class:`~orbitkv_pd.engine_model.StepScheduler`
    (the same one the Java engine and the golden test use), one step at a time, and hands each step's outcomes to the
    requests waiting on them. So the simulated engine shares its compute as a GPU engine does (continuous batching,
    chunked prefill, a queue when the KV pool or the batch is full) instead of giving every request its own timer, and
    its latencies under load are the model's.

    A step runs from ``max(now, the previous step's end)`` for the cost model's duration: while busy, steps follow each
    other on virtual deadlines, so late wake-ups do not add up to drift; the thread sleeps while a step "computes"."""

    CLOSED = "CLOSED"

    def __init__(self, role: str, limits: em.Limits, costs: em.CostModel, cost_name: str = "custom", name: str = "engine",
                 num_layers: int = 1, reports_per_step: int = 0, report_interval_s: float = 0.0) -> None:
        self.limits, self.costs, self.cost_name = limits, costs, cost_name
        # a prefill step's time split over the KV's layers, reported this many times a step (engine.layerwise.reports-per-step),
        # at least report_interval_s apart (engine.layerwise.min-report-interval: a short step reports fewer, larger groups)
        self.num_layers, self.reports_per_step, self.report_interval_s = num_layers, reports_per_step, report_interval_s
        self._on_layers: Dict[str, Callable[[int, int, int], None]] = {}
        # vLLM's call sites around each step (engine.vllm-connector: orbitkv_pd.vllm_sim.VllmCallSites), or None
        self.hooks: Any = None
        self._sched = em.StepScheduler(role, limits, costs)
        self._cond = threading.Condition()
        self._handles: Dict[str, StepHandle] = {}
        self._by_rid: Dict[str, List[str]] = {}
        self._keys = itertools.count()
        self._closed = False
        self.steps = 0
        self.step_ps = 0
        self.step_tokens = 0
        self._thread = threading.Thread(target=self._run, name=f"steps-{name}", daemon=True)
        self._thread.start()

    def blocks_needed(self, prompt_tokens: int, output_tokens: int, part: str) -> int:
        """The KV blocks the scheduler reserves for such a sequence (its prompt, and its output unless it only prefills)."""
        return self._sched.blocks_for(prompt_tokens, output_tokens, part)

    def submit(self, rid: str, prompt_tokens: int, output_tokens: int, cached_tokens: int = 0, part: str = em.BOTH,
               on_layers: Optional[Callable[[int, int, int], None]] = None) -> StepHandle:
        """Queues a sequence for ``part`` of request ``rid``. Refuses (ValueError) one that needs more blocks than the
        whole pool: it could never run, and, first in line, would hold every request behind it (no preemption).
        ``on_layers(done_tokens, chunk_end, layers)`` hears how far each of its prefill steps has come (on the step
        thread: it must be quick)."""
        need = self.blocks_needed(prompt_tokens, output_tokens, part)
        if need > self.limits.num_blocks:
            raise ValueError(f"request {rid} needs {need} KV blocks ({prompt_tokens} prompt tokens + {output_tokens} output); "
                             f"the engine's pool has {self.limits.num_blocks}")
        with self._cond:
            if self._closed:
                raise StepperClosed(f"the engine is closed: {rid} not queued")
            key = f"{rid}#{next(self._keys)}"
            queued = self._sched.add(em.Request(key, prompt_tokens, output_tokens, cached_tokens), part)
            h = StepHandle(self, rid, key, part, queued)
            if queued:
                self._handles[key] = h
                self._by_rid.setdefault(rid, []).append(key)
                if on_layers is not None:
                    self._on_layers[key] = on_layers
                self._cond.notify_all()
            return h

    def abort(self, rid: str) -> bool:
        """Takes every sequence of request ``rid`` out of the scheduler (blocks freed); False when none was there."""
        with self._cond:
            keys = list(self._by_rid.get(rid, ()))
        return any([self.abort_key(k) for k in keys])

    def abort_key(self, key: str) -> bool:
        with self._cond:
            h = self._handles.pop(key, None)
            if h is not None:
                self._forget(h)
            found = self._sched.abort(key)
            self._cond.notify_all()  # freed blocks may let the head of the queue in
            return found

    def _forget(self, h: StepHandle) -> None:
        self._on_layers.pop(h.key, None)
        keys = self._by_rid.get(h.rid)
        if keys is not None:
            keys.remove(h.key)
            if not keys:
                del self._by_rid[h.rid]

    def close(self) -> None:
        """Stops stepping; every request still waiting for a step gets :class:`StepperClosed`."""
        with self._cond:
            self._closed = True
            for h in self._handles.values():
                h.outcomes.put(self.CLOSED)
            self._handles.clear()
            self._by_rid.clear()
            self._cond.notify_all()

    def wake(self) -> None:
        """Something for the hooks: a step comes now (one without a forward pass when nothing is to compute)."""
        with self._cond:
            self._cond.notify_all()

    def _run(self) -> None:
        end = 0.0  # the previous step's end (time.monotonic)
        while True:
            with self._cond:
                while True:
                    if self._closed:
                        return
                    p = self._sched.plan()
                    hooks = self.hooks
                    if p is not None or (hooks is not None and hooks.wants_step()):
                        break
                    self._cond.wait(hooks.idle_step_s if hooks is not None else None)
            if p is None:
                # vLLM's step with nothing to compute (kv_connector_no_forward): the connector's calls alone
                hooks.begin_step(None)
                hooks.end_step(None)
                continue
            if hooks is not None:
                hooks.begin_step(p)
            start = max(time.monotonic(), end)
            end = start + p.duration_ps / 1e12
            self._sleep_reporting_layers(p, start, end)
            if hooks is not None:
                hooks.end_step(p)
            with self._cond:
                if self._closed:
                    return
                outcomes = self._sched.complete(p)
                self.steps += 1
                self.step_ps += p.duration_ps
                self.step_tokens += p.tokens
                for key, kind in outcomes:
                    h = self._handles.get(key)
                    if h is None:
                        continue
                    h.outcomes.put(kind)
                    if kind == em.FINISHED:
                        del self._handles[key]
                        self._forget(h)

    def _sleep_reporting_layers(self, p: em.Plan, start: float, end: float) -> None:
        """Sleeps through the step; a GPU computes a forward pass layer after layer, so the step's time is split evenly
        over the KV's layers and each listening prefill chunk hears, at ``reports_per_step`` points, how many are done
        (at the step's end: the chunk, in all of them)."""
        with self._cond:
            listening = [(c, self._on_layers[c.id]) for c in p.prefills if c.id in self._on_layers]
        hooks = self.hooks
        saving = hooks is not None and hooks.saves()  # the connector's save_kv_layer, layer by layer
        groups = min(self.reports_per_step, self.num_layers) if (listening or saving) and self.num_layers > 1 else 0
        if groups and self.report_interval_s > 0:
            # from the plan's own duration: (start + d) - start is not d in floating point, and 4 ms / 1 ms must be 4
            groups = max(1, min(groups, int(p.duration_ps / 1e12 / self.report_interval_s + 1e-9)))
        for g in range(1, groups + 1):
            left = start + (end - start) * g / groups - time.monotonic()
            if left > 0:
                time.sleep(left)
            for c, on_layers in listening:
                on_layers(c.start + c.tokens if g == groups else c.start, c.start + c.tokens, self.num_layers * g // groups)
            if saving:
                hooks.layers_done(self.num_layers * g // groups)
        left = end - time.monotonic()
        time.sleep(left if left > 0 else 0)  # a step of no duration still lets the request threads run

    def stats(self) -> Dict[str, Any]:
        with self._cond:
            return {"cost": self.cost_name, "max_batched_tokens": self.limits.max_batched_tokens,
                    "max_num_seqs": self.limits.max_num_seqs, "steps": self.steps,
                    "mean_step_ms": self.step_ps / self.steps / 1e9 if self.steps else 0.0,
                    "mean_tokens_per_step": self.step_tokens / self.steps if self.steps else 0.0,
                    "running": self._sched.running_count, "waiting": self._sched.waiting_count,
                    "kv_blocks_used": self._sched.blocks_used, "kv_blocks_total": self.limits.num_blocks,
                    "step_seconds_sum": self.step_ps / 1e12, "step_tokens_sum": self.step_tokens}


class HttpError(Exception):
    def __init__(self, status: int, message: str, kind: str = "invalid_request_error", param: Optional[str] = None) -> None:
        super().__init__(message)
        self.status, self.message, self.kind, self.param = status, message, kind, param


@dataclass
class Completion:
    chat: bool
    model: str
    prompt: str
    max_tokens: int
    stream: bool
    include_usage: bool
    kv: Optional[Dict[str, Any]]


def parse_completion(chat: bool, body: bytes, max_prompt_chars: int) -> Completion:
    """The request as the Java engine's CompletionRequest reads it (same prompt, same chat template)."""
    try:
        o = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise HttpError(400, f"the body is not JSON: {e}")
    if not isinstance(o, dict):
        raise HttpError(400, "the body must be a JSON object")
    if chat:
        ms = o.get("messages")
        if not isinstance(ms, list) or not ms:
            raise HttpError(400, "'messages' is required and must be a non-empty array", param="messages")
        lines = []
        for i, m in enumerate(ms):
            at = f"messages[{i}]"
            if not isinstance(m, dict) or m.get("role") not in ROLES:
                raise HttpError(400, f"{at}.role must be one of {sorted(ROLES)}", param=f"{at}.role")
            c = m.get("content")
            if c is None:
                content = ""
            elif isinstance(c, str):
                content = c
            elif isinstance(c, list) and all(isinstance(x, dict) and x.get("type") == "text" and isinstance(x.get("text"), str) for x in c):
                content = "".join(x["text"] for x in c)
            else:
                raise HttpError(400, f"{at}.content must be a string or an array of text parts", param=f"{at}.content")
            lines.append(f"<|{m['role']}|>{content}\n")
        prompt = "".join(lines) + "<|assistant|>"
    else:
        pr = o.get("prompt")
        if isinstance(pr, list) and len(pr) == 1 and isinstance(pr[0], str):
            pr = pr[0]
        if not isinstance(pr, str):
            raise HttpError(400, "'prompt' must be a string", param="prompt")
        prompt = pr
    if not prompt:
        raise HttpError(400, "the prompt is empty", param="messages" if chat else "prompt")
    if len(prompt) > max_prompt_chars:
        raise HttpError(400, f"prompt too long: {len(prompt)} characters", param="prompt")
    field_name = "max_completion_tokens" if chat and "max_completion_tokens" in o else "max_tokens"
    mt = o.get(field_name, 16)
    if not isinstance(mt, int) or isinstance(mt, bool) or mt < 1 or mt > 1_000_000:
        raise HttpError(400, f"'{field_name}' must be an integer >= 1", param=field_name)
    so = o.get("stream_options") or {}
    kv = o.get("kv_transfer_params")
    if kv is not None and not isinstance(kv, dict):
        raise HttpError(400, "kv_transfer_params: must be an object", param="kv_transfer_params")
    return Completion(chat, str(o.get("model", "")), prompt, mt, bool(o.get("stream", False)),
                      bool(isinstance(so, dict) and so.get("include_usage")), kv)


# ---------------------------------------------------------------------------------------------------- the engine


class SimBackend:
    """The simulated model as the engine's model: the deterministic :class:`~orbitkv_pd.sim_model.SimModel` writing
    and checking KV bytes in a shared-memory pool file, its compute time that of the engine model's steps
    (:class:`Stepper`): requests share steps as on a GPU engine, and a prompt whose leading blocks this engine computed
    (or received) before skips them (the prefix cache), as vLLM's does.

    A backend is what the engine's HTTP and P/D flow (:class:`SimEngine`) needs from a model: ``layout``,
    ``pool_spec()``, ``tokenize``, ``blocks_for``, ``token_text``, ``prefill`` (KV into pages, the first token),
    ``tokens`` (the answer from KV in pages), ``checks_kv``/``verify``, ``step_s`` (pacing between streamed tokens)
    and ``close``; optionally ``too_long`` (a request it could never schedule), ``job_ended`` (a request is over, ended
    early or not) and ``model_stats`` (``/stats`` "model"). The real transformer (``orbitkv_pd.real_engine``) is
    another."""

    def __init__(self, config: "SimEngineConfig") -> None:
        self.config = config
        self.layout = config.layout
        self.model = sm.SimModel(config.seed)
        self.pool: Optional[ShmKvPool] = ShmKvPool(config.layout, config.pool_path) if config.pool_path else None
        self.step_s = 0.0  # the steps pace the tokens (tokens())
        self.checks_kv = config.verify and self.pool is not None
        self.kind = "python"
        self.block_tokens = config.layout.block_size_tokens
        self.stepper = Stepper(config.role, em.Limits(config.max_batched_tokens, config.max_num_seqs, self.block_tokens,
                                                      config.layout.num_blocks), config.cost_model(), config.cost, config.engine_id,
                               config.layout.num_layers, config.reports_per_step, config.report_interval_s)
        # As many blocks as the pool: vLLM keeps a freed block's hash until its memory is reused.
        self.prefix = em.PrefixCache(config.layout.num_blocks) if config.prefix_cache else None
        self._prefix_lock = threading.Lock()
        # the engine's API client, once it joined (SimEngine sets it): where KV cache events go
        self.report_to: Optional[Callable[[], Any]] = None
        # how the blocks are hashed, announced in the registration (None without a prefix cache)
        self.block_hash: Optional[Tuple[str, str]] = ("sha256_cbor", config.prefix_cache_seed) if config.prefix_cache else None
        self.queried_tokens = 0
        self.hit_tokens = 0
        # engine.vllm-connector: the layers are reported by the connector's save_kv_layer, which hears of the bytes here
        self.report_progress = True
        self.on_filled: Optional[Callable[[str, int], None]] = None

    def pool_spec(self) -> Any:
        return ShmPool(self.config.pool_path) if self.config.pool_path else None

    def tokenize(self, prompt: str) -> List[int]:
        return sm.tokenize(prompt)

    def blocks_for(self, tokens: int) -> int:
        return sm.blocks_for(self.layout, tokens)

    def token_text(self, token: int) -> str:
        return " " + sm.word(token)

    def _hashes(self, tokens: List[int]) -> List[bytes]:
        if self.prefix is None:
            return []
        return em.block_hashes(self.config.prefix_cache_seed, self.block_tokens, tokens)

    def _cached(self, hashes: List[bytes], prompt_tokens: int) -> int:
        """Prompt tokens the prefix cache spares (0 when it is off), counted for ``/stats``."""
        if self.prefix is None:
            return 0
        with self._prefix_lock:
            cached = em.cached_tokens(self.prefix.lookup(hashes), self.block_tokens, prompt_tokens)
            self.queried_tokens += prompt_tokens
            self.hit_tokens += cached
        return cached

    def _remember(self, hashes: List[bytes], tokens: Optional[List[int]] = None) -> None:
        """The prompt's blocks are in this engine's KV now: cached, and what changed reported as KV cache events (a
        ``stored`` per run of blocks not cached before, a ``removed`` for those evicted) through the engine's client."""
        if self.prefix is None or not hashes:
            return
        with self._prefix_lock:
            added, evicted = self.prefix.insert(hashes)
        client = self.report_to() if self.report_to is not None else None
        if client is None or tokens is None or not (added or evicted):
            return
        bs = self.block_tokens
        events: List[Dict[str, Any]] = []
        k = 0
        while k < len(added):
            first = last = added[k]
            while k + 1 < len(added) and added[k + 1] == last + 1:
                k += 1
                last += 1
            k += 1
            events.append({"type": "stored", "block_hashes": hashes[first:last + 1], "token_ids": tokens[first * bs:(last + 1) * bs],
                           "block_size": bs, "parent_block_hash": hashes[first - 1] if first > 0 else None})
        if evicted:
            events.append({"type": "removed", "block_hashes": evicted})
        try:
            client.kv_events(events)
        except Exception as e:  # never let a report fail the request that computed the blocks
            log.debug("KV cache events not reported: %s", e)

    def too_long(self, prompt_tokens: int, max_tokens: int) -> Optional[str]:
        """Why a request that decodes here (colocated, or the decode of P/D) can never be scheduled: its prompt and
        output need more KV blocks than the pool has (None when it fits). Refused up front, as vLLM refuses one longer
        than its max_model_len: queued, it would wait forever and hold every request behind it."""
        need = self.stepper.blocks_needed(prompt_tokens, max_tokens, em.BOTH)
        if need <= self.layout.num_blocks:
            return None
        return (f"{prompt_tokens} prompt tokens + max_tokens {max_tokens} need {need} KV blocks of {self.block_tokens} tokens; "
                f"this engine's pool has {self.layout.num_blocks}")

    def prefill(self, job: "Job", blocks: List[int], mode: str) -> int:
        """Writes the prompt's KV into ``blocks`` while the model's steps compute the prompt (less its cached prefix);
        returns the first token once both are done. A colocated or recomputed request stays in the scheduler to decode
        (:meth:`tokens` goes on with it); a prefill for another engine leaves at its first token."""
        part = em.PREFILL if mode == "prefill" else em.BOTH
        hashes = self._hashes(job.tokens)
        client = self.report_to() if self.report_to is not None and part == em.PREFILL and self.pool is not None \
            and self.report_progress else None
        report = _ProgressReport(client, job.rid, blocks, len(job.tokens), self.layout.num_layers) \
            if client is not None and hasattr(client, "prefill_progress") else None
        job.step = self.stepper.submit(job.rid, len(job.tokens), job.req.max_tokens, self._cached(hashes, len(job.tokens)), part,
                                       report.modelled if report is not None else None)
        if self.pool is not None:
            pool = self.pool

            def layers_written(n: int) -> None:
                if n == 1 and self.config.corrupt_prefix and job.rid.startswith(self.config.corrupt_prefix) and mode == "prefill":
                    # engine.fault.corrupt-kv-prefix: one flipped bit of layer 0, for tests of the decode side's check —
                    # before the layer counts as written, so a push layer by layer carries it too
                    page = bytearray(pool.read(0, blocks[0] * self.layout.page, 4))
                    page[3] ^= 0x08
                    pool.write(0, blocks[0] * self.layout.page, bytes(page))
                if report is not None:
                    report.filled(n)
                if self.on_filled is not None and part == em.PREFILL:
                    self.on_filled(job.rid, n)
            self.model.write_kv(pool, blocks, job.tokens, layers_written)
        # Without a pool (a standalone engine) nothing is computed into memory; the answer is the same.
        job.step.wait_for(em.FIRST_TOKEN)
        self._remember(hashes, job.tokens)
        return self.model.generate(job.tokens, 1)[0]

    def tokens(self, job: "Job", blocks: List[int], first: Optional[int], max_tokens: int) -> Iterator[int]:
        """The answer, each token once the step that computes it has ended; the first at once (the prefill sampled it).
        After :meth:`prefill` here the same sequence goes on decoding; a decode of transferred KV is queued now (its
        blocks are remembered by the prefix cache, as a vLLM decode instance caches the blocks it received)."""
        out = self.model.generate(job.tokens, max_tokens)
        h = job.step
        if h is None or h.part != em.BOTH:
            self._remember(self._hashes(job.tokens), job.tokens)
            h = self.stepper.submit(job.rid, len(job.tokens), max_tokens, 0, em.DECODE)
            job.step = h
        return self._paced(out, h)

    @staticmethod
    def _paced(out: List[int], h: StepHandle) -> Iterator[int]:
        yield out[0]
        for t in out[1:]:
            h.next()  # TOKEN, or FINISHED for the last
            yield t

    def job_ended(self, job: "Job") -> None:
        """The request is over: a sequence still in the scheduler (its client gone, its lease lost, an error) is taken
        out, so its blocks and its share of the steps go to the others."""
        if job.step is not None:
            job.step.abort()

    def model_stats(self) -> Dict[str, Any]:
        out = self.stepper.stats()
        with self._prefix_lock:
            q, hit = self.queried_tokens, self.hit_tokens
        out["prefix_cache"] = {"enabled": self.prefix is not None, "queried_tokens": q, "hit_tokens": hit,
                               "hit_rate": hit / q if q else 0.0}
        return out

    def verify(self, blocks: List[int], tokens: List[int]) -> Optional[str]:
        assert self.pool is not None
        return self.model.verify_kv(self.pool, blocks, tokens)

    def close(self) -> None:
        self.stepper.close()
        if self.pool is not None:
            self.pool.close()


class SimEngine:
    """The OpenAI-compatible engine and its P/D flow over a model backend (the simulated one unless given another)."""

    def __init__(self, config: Any, backend: Any = None) -> None:
        self.config = config
        self.backend = backend if backend is not None else SimBackend(config)
        if hasattr(self.backend, "report_to"):  # a backend that reports what it computes (progress, cache events)
            self.backend.report_to = lambda: self.client
        # a backend whose pages keep their KV for later prompts (the reference engine's engine.prefix-cache.enabled)
        n = self.backend.layout.num_blocks
        self.allocator = PrefixBlockPool(n) if getattr(self.backend, "prefix_pages", False) else BlockAllocator(n)
        self.client: Optional[EngineApiClient] = None
        self.lease_epochs = 0
        self._lock = threading.Lock()
        self.counters = {k: 0 for k in ("prefill", "decode", "colocated", "recomputed", "completed", "verified_pages", "kv_corrupt",
                                        "ended_before_kv", "client_gone", "rejected_no_blocks", "releases", "stalled",
                                        "lease_lost", "lease_unconfirmed", "releases_refused", "prefix_hit_blocks")}
        self._ended: Dict[str, threading.Event] = {}
        self._leases: Dict[str, Tuple[str, int]] = {}
        self._unsure: set = set()
        self.server: Optional[ThreadingHTTPServer] = None
        # engine.vllm-connector: the P/D flow goes through the vLLM connector, called as vLLM calls it
        self.vllm: Any = None
        self.ready = False
        # As the Java components' Lifecycle: new, starting, running, stopping, stopped (reported by /health/*).
        self.lifecycle = "new"

    @property
    def instance_epoch(self) -> int:
        """This instance's epoch: the configured one, or the newer one the worker named at the hello (a host whose clock
        is behind the one the engine last ran on)."""
        reg = getattr(self.client, "registration", None)
        return reg.instance_epoch if reg is not None else self.config.instance_epoch

    def count(self, key: str, n: int = 1) -> None:
        with self._lock:
            self.counters[key] += n

    def next_lease_epoch(self) -> int:
        with self._lock:
            self.lease_epochs += 1
            return self.lease_epochs

    def start(self) -> "SimEngine":
        engine = self
        self.lifecycle = "starting"

        class Handler(_Handler):
            pass
        Handler.engine = engine
        self.server = ThreadingHTTPServer((self.config.host, self.config.port), Handler)
        self.server.daemon_threads = True
        url = self.config.advertised_url or f"http://{self.config.host}:{self.server.server_address[1]}"
        if self.config.api_path and self.config.vllm_connector:
            self.vllm = self._vllm_call_sites(url)
            self.client = self.vllm.client
        elif self.config.api_path:
            self.client = EngineApiClient.connect(self.config.api_path, Registration(
                self.config.engine_id, self.config.instance_epoch, self.config.role, self.backend.layout, self.backend.pool_spec(),
                self.config.model, url, getattr(self.backend, "block_hash", None)), on_decision=self.on_decision, connect_timeout=180)
        self.ready = True
        self.lifecycle = "running"
        threading.Thread(target=self.server.serve_forever, name="http", daemon=True).start()
        log.info("engine %s ready (%s, %s, epoch %d)", self.config.engine_id, self.config.role, url, self.instance_epoch)
        return self

    def _vllm_call_sites(self, url: str) -> Any:
        """The connector a vLLM user loads, with the settings this engine's keys give (docs/vllm.md), and vLLM's calls."""
        from .vllm_sim import VllmCallSites
        c = self.config
        extra: Dict[str, Any] = {"engine_api_path": c.api_path, "engine_id": c.engine_id, "http_url": url, "role": c.role,
                                 "model": c.model, "instance_epoch": c.instance_epoch, "lease_ms": int(c.lease_s * 1000),
                                 "heartbeat_ms": max(1, int(c.heartbeat_s * 1000)), "kv_confirm_ms": max(1, int(c.kv_confirm_s * 1000)),
                                 "layerwise_min_report_interval_ms": c.report_interval_s * 1000.0}
        block_hash = getattr(self.backend, "block_hash", None)
        if block_hash is not None:
            extra["block_hash_algorithm"], extra["block_hash_seed"] = block_hash
        if c.no_heartbeat_prefix:
            extra["fault_no_heartbeat_prefix"] = c.no_heartbeat_prefix
        self.backend.report_progress = False
        v = VllmCallSites(c, self.backend, self.allocator.free, extra, c.kv_load_failure_policy)
        self.backend.on_filled = v.filled
        v.worker.worker_side.observers.append(self.on_decision)
        return v.start()

    def on_decision(self, d: Decision) -> None:
        if self.vllm is not None:
            # the connector frees what vLLM kept; the engine hears of outcomes only (a stalled prefill's end)
            if d.kind == "outcome":
                with self._lock:
                    ended = self._ended.get(d.request_id)
                if ended is not None:
                    ended.set()
            return
        if d.kind == "outcome":
            with self._lock:
                ended = self._ended.get(d.request_id)
            if ended is not None:
                ended.set()
            # The decider releases a request's pages before its outcome: prefill pages still held now it never knew of.
            self.give_up(d.request_id)
            return
        if d.kind != "release" or d.fields.get("engine_id") != self.config.engine_id:
            return
        owner = ("P:" if d.fields.get("side") == "prefill" else "D:") + d.request_id
        if d.fields.get("side") != "prefill":
            # A decode release must name the lease this engine announced for the request (as the Java engine checks): a
            # stale one (an earlier lease, arriving after a partition healed) would free pages a decode still uses.
            with self._lock:
                mine = self._leases.get(d.request_id)
            theirs = (d.fields.get("lease_id"), d.fields.get("lease_epoch"))
            if mine is not None and mine != theirs:
                self.count("releases_refused")
                log.warning("release for %s names lease %s@%s but %s announced %s@%s: its pages stay held", d.request_id,
                            theirs[0], theirs[1], self.config.engine_id, mine[0], mine[1])
                return
        with self._lock:
            self._unsure.discard(owner)
        if self.allocator.free(owner):
            self.count("releases")
            if d.fields.get("side") != "prefill":
                with self._lock:
                    self._leases.pop(d.request_id, None)

    UNSURE_FALLBACK_S = 600.0
    """Beyond every deadline a request can have at the decider: the pages of a report still unsure are freed then."""

    def unsure(self, rid: str, side: str = "P:") -> None:
        """The report of ``rid`` (prefill-complete for ``P:``, decode-ready for ``D:``) may be in the log although
        unacknowledged: hold its pages (see :meth:`give_up`)."""
        with self._lock:
            self._unsure.add(side + rid)
        t = threading.Timer(self.UNSURE_FALLBACK_S, self.give_up, args=(rid,))
        t.daemon = True
        t.start()

    def give_up(self, rid: str) -> None:
        """Frees the pages of an unsure report (its outcome came without a release, or the fallback passed): the decider
        releases the pages it knew of before the outcome."""
        for owner in ("P:" + rid, "D:" + rid):
            with self._lock:
                if owner not in self._unsure:
                    continue
                self._unsure.discard(owner)
                if owner.startswith("D:"):
                    self._leases.pop(rid, None)
            if self.allocator.free(owner):
                self.count("releases")

    def announced(self, rid: str, lease_id: str, lease_epoch: int) -> None:
        """This engine announced ``lease_id`` at ``lease_epoch`` for the decode pages of ``rid``."""
        with self._lock:
            self._leases[rid] = (lease_id, lease_epoch)

    def metrics_text(self) -> str:
        """``/metrics``: the Java engine's names (docs/dashboard.md) in the Prometheus text format, from the counters
        and, with the step model, its steps (as summaries: count and sum), sequences, KV use and prefix cache."""
        tag = '{engine="%s"}' % self.config.engine_id
        lines = [f"# TYPE orbitkv_engine_pages_used gauge", f"orbitkv_engine_pages_used{tag} {self.allocator.used}",
                 f"# TYPE orbitkv_engine_pages_total gauge", f"orbitkv_engine_pages_total{tag} {self.allocator.num_blocks}"]
        model_stats = getattr(self.backend, "model_stats", None)
        if model_stats is not None:
            m = model_stats()
            pc = m["prefix_cache"]
            e = self.config.engine_id
            lines += [f"# TYPE orbitkv_engine_step_seconds summary", f"orbitkv_engine_step_seconds_count{tag} {m['steps']}",
                      f"orbitkv_engine_step_seconds_sum{tag} {m['step_seconds_sum']:.6f}",
                      f"# TYPE orbitkv_engine_step_tokens summary", f"orbitkv_engine_step_tokens_count{tag} {m['steps']}",
                      f"orbitkv_engine_step_tokens_sum{tag} {m['step_tokens_sum']}",
                      f"# TYPE orbitkv_engine_seqs gauge", f'orbitkv_engine_seqs{{engine="{e}",state="running"}} {m["running"]}',
                      f'orbitkv_engine_seqs{{engine="{e}",state="waiting"}} {m["waiting"]}',
                      f"# TYPE orbitkv_engine_kv_usage gauge", f"orbitkv_engine_kv_usage{tag} {m['kv_blocks_used'] / m['kv_blocks_total']:.6f}",
                      f"# TYPE orbitkv_engine_prefix_cache_queries_total counter",
                      f"orbitkv_engine_prefix_cache_queries_total{tag} {pc['queried_tokens']}",
                      f"# TYPE orbitkv_engine_prefix_cache_hits_total counter", f"orbitkv_engine_prefix_cache_hits_total{tag} {pc['hit_tokens']}"]
        return "\n".join(lines) + "\n"

    def stats(self) -> Dict[str, Any]:
        c = self.counters
        out = {"engine_id": self.config.engine_id, "role": self.config.role, "model": self.config.model,
               "instance_epoch": self.instance_epoch, "blocks_total": self.allocator.num_blocks,
               "blocks_used": self.allocator.used, "holders": self.allocator.holders,
               "requests": {k: c[k] for k in ("prefill", "decode", "colocated", "recomputed")},
               **{k: c[k] for k in ("completed", "verified_pages", "kv_corrupt", "ended_before_kv", "client_gone",
                                    "rejected_no_blocks", "releases")}, "engine": self.backend.kind}
        model_stats = getattr(self.backend, "model_stats", None)
        if model_stats is not None:
            # The engine model's steps, batch, KV pool and prefix cache; the served model's name moves to served_model.
            out["served_model"] = self.config.model
            out["model"] = model_stats()
        return out

    def close(self) -> None:
        self.ready = False
        self.lifecycle = "stopping"
        if self.vllm is not None:
            self.vllm.close()
        elif self.client is not None:
            self.client.close()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
        self.backend.close()
        self.lifecycle = "stopped"

    # ------------------------------------------------------------------------------------------------ compute

    def stall(self, job: "Job") -> None:
        """``engine.fault.stall-prefill-prefix``: a prefill that never reports (a hung engine, for tests of the decode
        side's lease): it holds no pages and waits for the request's outcome (or ``engine.kv.timeout``), then fails."""
        ended = threading.Event()
        with self._lock:
            self._ended[job.rid] = ended
        self.count("stalled")
        try:
            got = ended.wait(self.config.kv_timeout_s)
        finally:
            with self._lock:
                self._ended.pop(job.rid, None)
        raise HttpError(503, f"the prefill of {job.rid} stalled (engine.fault.stall-prefill-prefix)"
                             + ("; the request ended meanwhile" if got else ""), "service_unavailable")

    def compute(self, job: "Job", blocks: List[int], mode: str) -> int:
        """The prompt's KV into ``blocks`` (the compute marked ``c0``/``c1``; after the prefix cache's pages, if any);
        returns the first token."""
        t0 = time.monotonic()
        job.marks["c0"] = now_us()
        first = self.backend.prefill(job, blocks, mode)
        job.marks["c1"] = now_us()
        job.prefill_ms = (time.monotonic() - t0) * 1000
        self.pages_written(job)
        return first

    def pages_written(self, job: "Job") -> None:
        """Every page of the prompt holds its KV (computed, or moved here): its full blocks are cached from now on."""
        if job.page_hashes:
            self.allocator.cache(job.owner, job.page_hashes)


@dataclass
class Job:
    rid: str
    req: Completion
    tokens: List[int]
    traceparent: Optional[str]
    marks: Dict[str, int] = field(default_factory=dict)
    mode: str = ""
    prefill_ms: float = -1
    kv_wait_ms: float = -1
    kv_bytes: int = 0
    lease: Optional[LeaseKeeper] = None
    step: Optional[StepHandle] = None  # its sequence in the engine model's scheduler (SimBackend)
    owner: str = ""  # its pages' owner in the allocator (P:/D:/C: + id)
    cached_blocks: int = 0  # its first pages hold their KV already (the prefix cache's hit): computed or moved only after them
    page_hashes: Optional[List[bytes]] = None  # the prompt's full blocks, cached in its pages once written (None: not cached)


class LeaseLost(Exception):
    """The decode's lease may have run out at the decider (no acknowledged renewal covers now): stop using its pages."""


class _Handler(BaseHTTPRequestHandler):
    engine: SimEngine
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt: str, *args: Any) -> None:  # quiet: one line per request is too much under load
        pass

    def setup(self) -> None:
        super().setup()
        # Headers, then small SSE chunks: without this, Nagle's algorithm and the proxy's delayed ACK hold a token ~40 ms.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    # ------------------------------------------------------------------------------------------------ plumbing

    def send_json(self, status: int, body: Dict[str, Any], headers: Optional[Dict[str, str]] = None) -> None:
        data = json.dumps(body, separators=(",", ":")).encode("utf-8")
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def send_error_json(self, e: HttpError, headers: Optional[Dict[str, str]] = None) -> None:
        self.send_json(e.status, {"error": {"message": e.message, "type": e.kind, "param": e.param, "code": e.status}}, headers)

    def chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def sse(self, obj: Dict[str, Any]) -> None:
        self.chunk(b"data: " + json.dumps(obj, separators=(",", ":")).encode("utf-8") + b"\n\n")

    # ------------------------------------------------------------------------------------------------ routes

    def do_GET(self) -> None:
        try:
            self.get()
        except (BrokenPipeError, ConnectionResetError):
            # the caller went away before the answer (a health probe that timed out, a proxy stopping): nothing to say
            self.close_connection = True

    def get(self) -> None:
        e = self.engine
        if self.path == "/health":
            self.send_json(200 if e.ready else 503, {"status": "ok" if e.ready else "starting", "engine_id": e.config.engine_id,
                                                    "role": e.config.role, "lifecycle": e.lifecycle})
        elif self.path == "/health/live":
            # As the Java components (runtime's Health): live until stopped, ready only while registered and running.
            live = e.lifecycle not in ("stopped", "failed")
            self.send_json(200 if live else 503, {"status": "live" if live else "not live", "lifecycle": e.lifecycle})
        elif self.path == "/health/ready":
            body = {"status": "ready" if e.ready else "not ready", "lifecycle": e.lifecycle}
            if not e.ready:
                body["reason"] = "it is " + e.lifecycle
            self.send_json(200 if e.ready else 503, body)
        elif self.path == "/v1/models":
            self.send_json(200, {"object": "list", "data": [{"id": e.config.model, "object": "model", "created": 0,
                                                             "owned_by": "orbitkv-sim", "max_model_len": e.config.max_prompt_tokens}]})
        elif self.path == "/stats":
            self.send_json(200, e.stats())
        elif self.path == "/metrics":
            data = e.metrics_text().encode("utf-8")
            self.send_response(200)
            self.send_header("content-type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        else:
            self.send_error_json(HttpError(404, f"no such endpoint: GET {self.path}"))

    def do_POST(self) -> None:
        in_us = now_us()
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length > 0 else b""
        if self.path not in ("/v1/completions", "/v1/chat/completions"):
            self.send_error_json(HttpError(404, f"no such endpoint: POST {self.path}"))
            return
        try:
            self.completion(self.path == "/v1/chat/completions", body, in_us)
        except HttpError as err:
            self.send_error_json(err)
        except (BrokenPipeError, ConnectionResetError):
            self.engine.count("client_gone")
            self.close_connection = True

    def completion(self, chat: bool, body: bytes, in_us: int) -> None:
        e = self.engine
        req = parse_completion(chat, body, e.config.max_prompt_tokens * 64)
        if not e.ready:
            raise HttpError(503, f"engine {e.config.engine_id} is starting", "service_unavailable")
        tokens = e.backend.tokenize(req.prompt)
        if len(tokens) > e.config.max_prompt_tokens:
            raise HttpError(400, f"prompt of {len(tokens)} tokens is longer than this engine's limit of {e.config.max_prompt_tokens}",
                            param="prompt")
        kv = req.kv
        rid = (kv or {}).get("request_id") or self.headers.get("x-request-id") or f"sim-{uuid.uuid4()}"
        job = Job(rid, req, tokens, self.headers.get("traceparent"), {"in": in_us})
        self.extra = {"x-orbitkv-request-id": rid, "x-orbitkv-engine-id": e.config.engine_id}
        remote_decode = bool(kv and kv.get("do_remote_decode"))
        remote_prefill = bool(kv and kv.get("do_remote_prefill"))
        try:
            if not remote_decode and not remote_prefill:
                self.colocated(job)
            elif e.client is None:
                raise HttpError(503, f"engine {e.config.engine_id} runs standalone (no engine.api.path): it serves colocated requests only",
                                "service_unavailable", "kv_transfer_params")
            elif remote_decode:
                if e.config.role == "decode":
                    raise HttpError(400, f"engine {e.config.engine_id} is a decode engine: it does not prefill for others",
                                    param="kv_transfer_params")
                self.prefill(job)
            else:
                if e.config.role == "prefill":
                    raise HttpError(400, f"engine {e.config.engine_id} is a prefill engine: it does not decode transferred KV",
                                    param="kv_transfer_params")
                self.decode(job)
        finally:
            # However it ended (answered, client gone, lease lost, an error): nothing of it may stay in the model's steps.
            ended = getattr(e.backend, "job_ended", None)
            if ended is not None:
                ended(job)

    def too_long(self, job: Job) -> Optional[str]:
        """Why the backend could never schedule this request's decode (None: it can, or the backend has no such limit)."""
        check = getattr(self.engine.backend, "too_long", None)
        return None if check is None else check(len(job.tokens), job.req.max_tokens)

    def allocate(self, job: Job, side: str) -> Optional[List[int]]:
        e = self.engine
        need = e.backend.blocks_for(len(job.tokens))
        # the prefix cache (a backend with prefix_pages): the prompt's leading blocks cached in some page are that page
        keys = e.backend.page_hashes(job) if getattr(e.backend, "prefix_pages", False) else None
        owner = side + job.rid
        try:
            # never every page: at least the block of the prompt's last token is computed (or moved) for the request
            blocks = e.allocator.allocate(owner, need, e.config.kv_wait_s, keys[0][:min(keys[1], need - 1)] if keys else None)
            if blocks is not None:
                job.owner = owner
                job.cached_blocks = e.allocator.reused(owner)
                job.page_hashes = keys[0] if keys and keys[2] else None
                if job.cached_blocks:
                    e.count("prefix_hit_blocks", job.cached_blocks)
            return blocks
        except KeyError:
            raise HttpError(409, f"request id {job.rid} already holds pages on {self.engine.config.engine_id}: request ids must be unique",
                            param="request_id")

    def no_blocks(self, job: Job) -> HttpError:
        e = self.engine
        e.count("rejected_no_blocks")
        need = e.backend.blocks_for(len(job.tokens))
        return HttpError(503, f"engine {e.config.engine_id} has no free KV blocks for {need} blocks", "service_unavailable")

    # ------------------------------------------------------------------------------------------------ prefill

    def prefill(self, job: Job) -> None:
        e = self.engine
        assert e.client is not None
        job.mode = "prefill"
        e.count("prefill")
        if e.config.stall_prefix and job.rid.startswith(e.config.stall_prefix):
            e.stall(job)
        if e.vllm is not None:
            self.prefill_via_vllm(job)
            return
        if e.config.fail_prefix and job.rid.startswith(e.config.fail_prefix):
            e.client.prefill_failed(job.rid, f"prefill failed on {e.config.engine_id} (engine.fault.fail-prefill-prefix)", True,
                                    job.traceparent, job.marks)
            raise HttpError(500, f"the prefill of {job.rid} failed (engine.fault.fail-prefill-prefix)", "server_error")
        blocks = self.allocate(job, "P:")
        if blocks is None:
            err = self.no_blocks(job)
            e.client.prefill_failed(job.rid, f"no free KV blocks on {e.config.engine_id}", True, job.traceparent, job.marks)
            raise err
        try:
            first = e.compute(job, blocks, "prefill")
        except Exception as err:
            # the worker may be pushing its layers already: it stops, and the decider decides what the request does next
            log.warning("the prefill of %s failed: %s", job.rid, err)
            e.allocator.free("P:" + job.rid)  # a push reading them is stopped by the failure and never lands
            e.client.prefill_failed(job.rid, f"prefill failed on {e.config.engine_id}: {err}", True, job.traceparent, job.marks)
            raise HttpError(500, f"the prefill of {job.rid} failed: {err}", "server_error")
        try:
            e.client.prefill_completed(job.rid, blocks, len(job.tokens), first, job.traceparent, dict(job.marks)).result(60)
        except (ApiError, FutureTimeout) as err:
            if isinstance(err, ApiError) and err.code != UNAVAILABLE:
                e.allocator.free("P:" + job.rid)  # the worker refused the fact: it never reached the log
            else:
                # No acknowledgement: the fact may be in the log and an order may read these pages. They stay until a
                # release or the request's outcome says what the decider knew (or, at the latest, the fallback below).
                e.unsure(job.rid)
            raise HttpError(503, f"cannot report the prefill of {job.rid}: {err}", "service_unavailable")
        self.answer_prefill(job, first, {"request_id": job.rid, "do_remote_prefill": True, "do_remote_decode": False,
                                         "remote_block_ids": blocks})

    def answer_prefill(self, job: Job, first: int, params: Dict[str, Any]) -> None:
        """The prefill's answer: its first token, and ``kv_transfer_params`` naming this engine (what a pulling decode
        engine would need; the push needs none of it)."""
        e = self.engine
        out = self.completion_json(job, [first])
        out["kv_transfer_params"] = {**params, "remote_engine_id": e.config.engine_id, "remote_instance_epoch": e.instance_epoch}
        self.orbitkv(out, job)
        marks = dict(job.marks)
        marks["out"] = now_us()
        self.send_json(200, out, {**self.extra, "x-orbitkv-timing": _timing(marks)})

    def prefill_via_vllm(self, job: Job) -> None:
        """The prefill as vLLM runs it with the connector (orbitkv_pd.vllm_sim): admitted through the connector's
        scheduler half, computed in the engine's steps (each layer saved through ``save_kv_layer``), finished with
        ``request_finished`` keeping the blocks until the release; the answer carries the connector's
        ``kv_transfer_params``."""
        e = self.engine
        v = e.vllm
        owner = "P:" + job.rid
        blocks = self.allocate(job, "P:")
        t = self.admit(job, blocks or [], owner, "prefill")
        if blocks is None:
            v.finish(t, "FINISHED_ERROR", [])  # the connector reports the prefill failed
            raise self.no_blocks(job)
        if e.config.fail_prefix and job.rid.startswith(e.config.fail_prefix):
            v.finish(t, "FINISHED_ERROR", [])
            raise HttpError(500, f"the prefill of {job.rid} failed (engine.fault.fail-prefill-prefix)", "server_error")
        try:
            first = e.compute(job, blocks, "prefill")
        except BaseException:
            v.finish(t, "FINISHED_ABORTED", [])
            raise
        self.answer_prefill(job, first, v.finish(t, "FINISHED_LENGTH_CAPPED", [first]) or {})

    def admit(self, job: Job, blocks: List[int], owner: str, role: str) -> Any:
        try:
            return self.engine.vllm.admit(job.rid, job.tokens, job.req.kv, blocks, owner, role, job.marks.get("in", 0))
        except ValueError as err:  # the connector refused the request's kv_transfer_params
            self.engine.allocator.free(owner)
            raise HttpError(400, str(err), param="kv_transfer_params")

    def decode_via_vllm(self, job: Job) -> None:
        """The decode as vLLM runs it with the connector: admitted (the connector claims the prompt's tokens as arriving,
        its allocated blocks become the decode-ready fact), waiting as WAITING_FOR_REMOTE_KVS until the connector reports
        the load finished; blocks that did not load are recomputed or fail the request (``kv_load_failure_policy``);
        ``request_finished`` at the end (the blocks kept while a push may still write into them)."""
        e = self.engine
        v = e.vllm
        why = self.too_long(job)
        if why is not None:  # vLLM refuses it before scheduling (longer than max_model_len)
            raise HttpError(400, f"request {job.rid} does not fit engine {e.config.engine_id}: {why}", param="max_tokens")
        owner = "D:" + job.rid
        blocks = self.allocate(job, "D:")
        if blocks is None:
            raise self.no_blocks(job)
        t0 = time.monotonic()
        t = self.admit(job, blocks, owner, "decode")
        status, produced = "FINISHED_ABORTED", 0
        try:
            loaded = v.wait_loaded(t, e.config.kv_timeout_s)
            job.kv_wait_ms = (time.monotonic() - t0) * 1000
            if loaded is None:
                raise HttpError(504, f"the KV of request {job.rid} did not arrive within {e.config.kv_timeout_s:g}s", "timeout")
            if loaded:
                job.marks["kv"] = now_us()
                why = e.backend.verify(blocks, job.tokens) if e.backend.checks_kv else None
                if why is not None:
                    self.refuse_corrupt(job, why)
                    raise HttpError(502, f"the KV received for request {job.rid} does not verify ({why}); not decoding",
                                    "kv_verification_failed")
                verified: "Future[Optional[str]]" = Future()
                verified.set_result(None)
                self.generate(job, False, verified, blocks)
            elif e.config.kv_load_failure_policy == "fail":
                status = "FINISHED_ERROR"
                raise HttpError(502, f"the KV of request {job.rid} did not load ({len(t.invalid)} blocks; kv_load_failure_policy fail)",
                                "handoff_failed")
            else:
                e.count("recomputed")
                first = e.compute(job, blocks, "recompute")
                done: "Future[Optional[str]]" = Future()
                done.set_result(None)
                self.generate(job, True, done, blocks, None, first)
            status, produced = "FINISHED_LENGTH_CAPPED", job.req.max_tokens
        finally:
            v.finish(t, status, list(range(produced)))

    # ------------------------------------------------------------------------------------------------ decode

    def decode(self, job: Job) -> None:
        e = self.engine
        client = e.client
        assert client is not None
        job.mode = "decode"
        self.headers_sent = False
        e.count("decode")
        if e.vllm is not None:
            self.decode_via_vllm(job)
            return
        why = self.too_long(job)
        if why is not None:
            client.decode_rejected(job.rid, f"does not fit {e.config.engine_id}: {why}", job.traceparent, job.marks)
            raise HttpError(400, f"request {job.rid} does not fit engine {e.config.engine_id}: {why}", param="max_tokens")
        blocks = self.allocate(job, "D:")
        if blocks is None:
            err = self.no_blocks(job)
            client.decode_rejected(job.rid, f"no free KV blocks on {e.config.engine_id}", job.traceparent, job.marks)
            raise err
        lease_epoch = e.next_lease_epoch()
        lease_id = f"lease/{e.config.engine_id}/{job.rid}"
        lease_ms = int(e.config.lease_s * 1000)
        t0 = time.monotonic()
        kv = client.await_kv(job.rid)
        e.announced(job.rid, lease_id, lease_epoch)
        sent_at = time.monotonic()
        # pages holding their KV already (the prefix cache) are skipped by the order: only the rest moves (never all of them:
        # the lookup stops short of the prompt's last token)
        ready = client.decode_ready(job.rid, lease_id, lease_epoch, blocks, int(time.time() * 1000) + lease_ms, job.traceparent,
                                    dict(job.marks), cached_blocks=job.cached_blocks)
        # engine.fault.no-heartbeat-prefix: a decode engine that stopped renewing its lease (tests of lease expiry).
        hung = bool(e.config.no_heartbeat_prefix and job.rid.startswith(e.config.no_heartbeat_prefix))
        # Until the KV is in, heartbeats go every quarter of engine.kv.confirm-timeout, so that a lease nobody acknowledges
        # any more (Kafka unreachable) is seen in time; then at the lease's own period.
        keeper = None if hung else client.keep_lease(job.rid, lease_id, lease_epoch, lease_ms, e.config.heartbeat_s, sent_at,
                                                     e.config.lease_margin_s, first=ready,
                                                     waiting_interval_s=min(e.config.heartbeat_s, e.config.kv_confirm_s / 4))
        job.lease = keeper
        # The lease is renewed until the decode is over, not only until the KV is in: a generation longer than the lease
        # would otherwise end TIMED_OUT with its pages released mid-decode (as the Java engine, heartbeats stop at the end).
        try:
            self.decode_on_lease(job, kv, blocks, t0)
        except LeaseLost:
            self.fence(job)
        finally:
            if keeper is not None:
                keeper.stop()

    def decode_on_lease(self, job: Job, kv: "Future[KvSignal]", blocks: List[int], t0: float) -> None:
        """Waits for the KV (``t0``: when the wait began) and decodes on it, or recomputes, or ends as the decider said."""
        e = self.engine
        client = e.client
        assert client is not None
        deadline = t0 + e.config.kv_timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                client.forget(job.rid)
                raise HttpError(504, f"the KV of request {job.rid} did not arrive within {e.config.kv_timeout_s:g}s", "timeout")
            try:
                signal_: KvSignal = kv.result(min(left, 0.1) if job.lease is not None else left)
                break
            except FutureTimeout:
                if job.lease is not None and job.lease.unconfirmed_for() >= e.config.kv_confirm_s:
                    self.give_up_unconfirmed(job)
        if job.lease is not None:
            job.lease.kv_in()
        job.kv_wait_ms = (time.monotonic() - t0) * 1000
        if signal_.kind in ("ready", "recompute") and job.lease is not None and job.lease.lost():
            raise LeaseLost()
        if signal_.kind == "ready":
            job.kv_bytes = signal_.bytes
            job.marks["kv"] = signal_.received_us
            e.pages_written(job)  # a vLLM decode instance caches the blocks it received
            if signal_.landed_us:
                job.marks["land"] = signal_.landed_us  # the handoff's path: KV handed over on landing (HandoffAnatomy)
            verified: "Future[Optional[str]]" = Future()
            begin: Optional[Callable[[], None]] = None
            if e.backend.checks_kv:
                # Beside the decode, as the Java engine does: only the end of the answer waits for it. Started once the
                # first token is out: in CPython the check holds the GIL while it runs, so started earlier it would
                # delay the first token (measured: KvReady in -> first token out 4-8 ms instead of <1 ms).
                def check() -> None:
                    try:
                        verified.set_result(e.backend.verify(blocks, job.tokens))
                    except BaseException as err:  # a failed check must still end the answer, as not verified
                        verified.set_result(f"the check failed: {err!r}")

                def begin_check() -> None:
                    threading.Thread(target=check, name=f"verify-{job.rid}", daemon=True).start()
                begin = begin_check
            else:
                verified.set_result(None)
            self.generate(job, False, verified, blocks, begin, signal_.first_token)
        elif signal_.kind == "recompute":
            e.count("recomputed")
            first = e.compute(job, blocks, "recompute")
            done: "Future[Optional[str]]" = Future()
            done.set_result(None)
            self.generate(job, True, done, blocks, None, first)
        else:
            e.count("ended_before_kv")
            status = 504 if signal_.outcome == "timed_out" else 409 if signal_.outcome == "cancelled" else 502
            raise HttpError(status, f"request {job.rid} ended before its KV arrived: {signal_.outcome.upper()}: {signal_.reason}",
                            "request_cancelled" if signal_.outcome == "cancelled" else "handoff_failed")

    def give_up_unconfirmed(self, job: Job) -> None:
        """Still waiting for its KV, the decode's lease facts went unacknowledged for engine.kv.confirm-timeout: this engine
        cannot reach Kafka, so the decider may never see its decode-ready (it waits up to its decode-ready timeout) nor, if
        it did, hear of the handoff's end. Nothing was answered yet: the request is given back at once (503, the proxy
        tries other engines) instead of holding its client until the lease or the KV timeout. The pages stay held: a
        release frees them if the decode-ready is in the log; the request's outcome or the fallback if it never got there."""
        e = self.engine
        why = (f"lease of {job.rid} on {e.config.engine_id} unconfirmed: its facts went unacknowledged for "
               f"{e.config.kv_confirm_s * 1000:.0f} ms while the KV was awaited (engine.kv.confirm-timeout; Kafka unreachable?)")
        self._give_lease_up(job, "lease_unconfirmed", why, forget=True)
        e.unsure(job.rid, "D:")
        raise HttpError(503, why, "lease_unconfirmed")

    def _give_lease_up(self, job: Job, counter: str, why: str, forget: bool) -> None:
        """Counts and logs why the decode stops using its lease, and reports a cancel naming it where it still can (it may
        be cut off from Kafka: the decider then learns from the lease's expiry or the proxy's own cancel)."""
        e = self.engine
        e.count(counter)
        log.warning("%s", why)
        if e.client is not None:
            if forget:
                e.client.forget(job.rid)
            try:
                e.client.cancel(job.rid, why, job.traceparent)
            except (ApiError, OSError) as err:
                log.warning("could not report why %s stopped: %s", job.rid, err)

    def fence(self, job: Job) -> None:
        """Self-fencing: the lease could not be renewed in time, so the decider may time it out and release the pages to
        another request. Stop using them now (the answer breaks off), say why while Kafka may still be reachable, and keep
        the pages held until the decider's release names them: they are freed then, never here."""
        e = self.engine
        why = (f"lease of {job.rid} on {e.config.engine_id} not renewed in time (heartbeats unacknowledged; "
               f"{e.config.lease_margin_s:g}s margin): stopped using its pages")
        self._give_lease_up(job, "lease_lost", why, forget=False)
        if self.headers_sent:
            self.close_connection = True  # a broken stream: the answer never ends well
            return
        raise HttpError(503, why, "lease_lost")

    def refuse_corrupt(self, job: Job, why: str) -> None:
        e = self.engine
        assert e.client is not None
        e.count("kv_corrupt")
        log.error("refusing to decode %s: the received KV does not verify: %s", job.rid, why)
        # Before the answer breaks: the proxy reports the broken stream as its own cancel, and the decider must
        # read the engine's reason first (the request's facts are ordered on its partition).
        try:
            e.client.cancel(job.rid, f"KV verification failed on {e.config.engine_id}: {why}", job.traceparent).result(10)
        except (ApiError, FutureTimeout) as err:
            log.warning("could not report the corrupt KV of %s: %s", job.rid, err)

    # ------------------------------------------------------------------------------------------------ colocated

    def colocated(self, job: Job) -> None:
        e = self.engine
        job.mode = "colocated"
        e.count("colocated")
        why = self.too_long(job)
        if why is not None:
            raise HttpError(400, f"request {job.rid} does not fit engine {e.config.engine_id}: {why}", param="max_tokens")
        blocks = self.allocate(job, "C:")
        if blocks is None:
            raise self.no_blocks(job)
        try:
            first = e.compute(job, blocks, "colocated")
            done: "Future[Optional[str]]" = Future()
            done.set_result(None)
            self.generate(job, False, done, blocks, None, first)
        finally:
            e.allocator.free("C:" + job.rid)

    # ------------------------------------------------------------------------------------------------ generation

    def generate(self, job: Job, recomputed: bool, verified: "Future[Optional[str]]", blocks: List[int],
                 begin_check: Optional[Callable[[], None]] = None, first: Optional[int] = None) -> None:
        """Answers the request from the KV in ``blocks``, starting with ``first`` (the prefill's token, when known);
        ``begin_check`` (when given) starts the check that completes ``verified``, once the first token is out."""
        e = self.engine
        r = job.req
        started = False

        def start_check() -> None:
            nonlocal started
            if begin_check is not None and not started:
                started = True
                begin_check()
        produced = e.backend.tokens(job, blocks, first, r.max_tokens)
        if recomputed:
            job.mode = "recomputed"
        step = e.backend.step_s
        t0 = time.monotonic()
        if not r.stream:
            start_check()
            out = []
            for i, t in enumerate(produced):  # the backend's tokens come as they are computed: the lease is watched meanwhile
                if i > 0 and step > 0:
                    time.sleep(step)
                self.check_lease(job)
                out.append(t)
            self.check_lease(job)
            why = verified.result()
            if why is not None:
                self.refuse_corrupt(job, why)
                raise HttpError(502, f"the KV received for request {job.rid} does not verify ({why}); not decoding",
                                "kv_verification_failed")
            job.marks["first"] = now_us()
            body = self.completion_json(job, out)
            self.orbitkv(body, job)
            self.send_json(200, body, {**self.extra, "x-orbitkv-timing": _timing(job.marks)})
            self.finished(job, recomputed, blocks)
            return
        self.check_lease(job)
        job.marks["first"] = now_us()
        self.headers_sent = True
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        for k, v in {**self.extra, "x-orbitkv-timing": _timing(job.marks)}.items():
            self.send_header(k, v)
        self.end_headers()
        if r.chat:
            first = self.chunk_head(job)
            first["choices"] = [{"index": 0, "finish_reason": None, "delta": {"role": "assistant", "content": ""}}]
            self.sse(first)
        out = []
        for i, t in enumerate(produced):
            self.check_lease(job)
            out.append(t)
            last = i == r.max_tokens - 1
            if last:
                start_check()
                why = verified.result()
                if why is not None:
                    self.refuse_corrupt(job, why)
                    self.close_connection = True  # a broken stream: the answer never ends well
                    return
            c = self.chunk_head(job)
            choice: Dict[str, Any] = {"index": 0}
            text = e.backend.token_text(t)
            if r.chat:
                choice["delta"] = {"content": text}
            else:
                choice["text"] = text
                choice["logprobs"] = None
            choice["finish_reason"] = "length" if last else None
            c["choices"] = [choice]
            if last:
                self.orbitkv(c, job)
            self.sse(c)
            start_check()
            if not last and step > 0:
                time.sleep(step)
        if r.include_usage:
            u = self.chunk_head(job)
            u["choices"] = []
            u["usage"] = _usage(len(job.tokens), len(out))
            self.sse(u)
        self.chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
        log.debug("decoded %s in %.1f ms", job.rid, (time.monotonic() - t0) * 1000)
        self.finished(job, recomputed, blocks)

    @staticmethod
    def check_lease(job: Job) -> None:
        """Raises :class:`LeaseLost` once the decode's lease is no longer surely held (a colocated job has none)."""
        if job.lease is not None and job.lease.lost():
            raise LeaseLost()

    def finished(self, job: Job, recomputed: bool, blocks: List[int]) -> None:
        e = self.engine
        e.count("completed")
        if job.mode in ("decode", "recomputed") and e.client is not None and e.vllm is None:  # the connector reports it
            if not recomputed:
                e.count("verified_pages", len(blocks) * e.backend.layout.region_count if e.backend.checks_kv else 0)
            e.client.decode_completed(job.rid, job.req.max_tokens, recomputed, job.traceparent, dict(job.marks))

    def chunk_head(self, job: Job) -> Dict[str, Any]:
        chat = job.req.chat
        return {"id": ("chatcmpl-" if chat else "cmpl-") + job.rid, "object": "chat.completion.chunk" if chat else "text_completion",
                "created": int(time.time()), "model": self.engine.config.model}

    def completion_json(self, job: Job, out: List[int]) -> Dict[str, Any]:
        chat = job.req.chat
        choice: Dict[str, Any] = {"index": 0}
        if chat:
            choice["message"] = {"role": "assistant", "content": "".join(self.engine.backend.token_text(t) for t in out)}
        else:
            choice["text"] = "".join(self.engine.backend.token_text(t) for t in out)
            choice["logprobs"] = None
        choice["finish_reason"] = "length"
        return {"id": ("chatcmpl-" if chat else "cmpl-") + job.rid, "object": "chat.completion" if chat else "text_completion",
                "created": int(time.time()), "model": self.engine.config.model, "choices": [choice],
                "usage": _usage(len(job.tokens), len(out))}

    def orbitkv(self, root: Dict[str, Any], job: Job) -> None:
        o: Dict[str, Any] = {"request_id": job.rid, "engine_id": self.engine.config.engine_id, "mode": job.mode,
                             "prompt_tokens": len(job.tokens), "engine": "python"}
        if job.prefill_ms >= 0:
            o["prefill_ms"] = job.prefill_ms
        if job.kv_wait_ms >= 0:
            o["kv_wait_ms"] = job.kv_wait_ms
        if job.kv_bytes > 0:
            o["kv_bytes"] = job.kv_bytes
        root["orbitkv"] = o


def _usage(prompt: int, completion: int) -> Dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _timing(marks: Dict[str, int]) -> str:
    return ",".join(f"{k}={v}" for k, v in marks.items())


def run_engine(argv: Optional[List[str]], prog: str, description: str, read_config: Callable[[Dict[str, str]], Any],
               build: Callable[[Any], SimEngine], kind: str) -> int:
    """The command line of a Python engine: reads ``--config`` (exit 2 naming a bad key), builds the engine (exit 1
    with the reason), joins its worker, serves until SIGTERM/SIGINT or until ``--parent-pid`` is gone."""
    ap = argparse.ArgumentParser(prog=prog, description=description)
    ap.add_argument("--config", required=True, help="properties file with the engine.* keys")
    ap.add_argument("--parent-pid", type=int, default=0, help="exit when this process is gone (a launcher that died)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)-5s %(name)s %(message)s")
    try:
        config = read_config(read_properties(args.config))
    except (ValueError, OSError) as e:
        print(f"engine: {e}", file=sys.stderr)
        return 2
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    if args.parent_pid > 0:
        def watch() -> None:
            while not stop.wait(1.0):
                try:
                    os.kill(args.parent_pid, 0)
                except ProcessLookupError:
                    log.warning("the launcher (pid %d) is gone: stopping", args.parent_pid)
                    stop.set()
                except PermissionError:
                    pass
        threading.Thread(target=watch, name="parent-watch", daemon=True).start()
    try:
        engine = build(config)
    except Exception as e:  # no GPU, no torch, a bad checkpoint, an unusable pool file: say which, and stop
        log.exception("cannot build the engine")
        print(f"engine: cannot build the engine: {e}", file=sys.stderr)
        return 1
    try:
        engine.start()
    except (ApiError, OSError) as e:
        print(f"engine: cannot join through the engine API: {e}", file=sys.stderr)
        return 1
    assert engine.server is not None
    print(f"engine running: id={config.engine_id} role={config.role} url=http://{config.host}:{engine.server.server_address[1]}"
          f" ({kind})", flush=True)
    stop.wait()
    engine.close()
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    return run_engine(argv, "python3 -m orbitkv_pd.sim_engine", (__doc__ or "").split("\n\n")[0], SimEngineConfig.from_properties,
                      SimEngine, "python")


if __name__ == "__main__":
    sys.exit(main())
