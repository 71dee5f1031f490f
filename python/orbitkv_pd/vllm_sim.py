"""vLLM's call sites, for the simulated engine: its P/D flow goes through :class:`~orbitkv_pd.vllm.OrbitKVPdConnector`
called as vLLM calls it (``engine.vllm-connector=true``, docs/vllm.md), so the connector code a vLLM user loads runs in
the demo's pipeline end to end on machines where vLLM cannot be installed.

What vLLM does around a connector, at the commit docs/vllm.md pins (6adad087; file:line), and where this module does
the same:

* ``vllm/v1/core/sched/scheduler.py`` ``Scheduler.schedule``: a new request with nothing computed asks
  ``get_num_new_matched_tokens(request, block_aligned_local)`` (:829-833); after ``allocate_slots``,
  ``update_state_after_alloc(request, blocks, num_external_computed_tokens)`` (:1061-1065); a request loading
  asynchronously waits as ``WAITING_FOR_REMOTE_KVS`` (:1083-1087) until ``finished_recving`` names it
  (:2766-2781, ``_update_waiting_for_remote_kv`` :2723-2764); at the end ``build_connector_meta(scheduler_output)``
  (:1297-1299, :1320). → :meth:`VllmCallSites.admit` (queued for the step), :meth:`VllmCallSites._schedule`,
  :meth:`VllmCallSites.begin_step` (one step of the engine model's :class:`Stepper` is one vLLM step).
* ``Scheduler.update_from_output``: ``update_connector_output`` and the blocks of ``finished_sending`` freed, those of a
  finished request named by ``finished_recving`` too (``_update_from_kv_xfer_finished`` :2802-2829); a finished
  request's ``_free_request`` (:1978, :2388-2415) → ``request_finished(request, block_ids)`` (:2698), its
  ``delay_free_blocks`` keeping them; ``finish_requests`` (:2374-2384) keeps the blocks of one aborted while
  ``WAITING_FOR_REMOTE_KVS``. → :meth:`VllmCallSites.finish`, :meth:`VllmCallSites._finished`,
  :meth:`VllmCallSites.end_step`.
* ``vllm/v1/worker/kv_connector_model_runner_mixin.py`` ``_get_kv_connector_output``: ``bind_connector_metadata`` (:89)
  → ``start_load_kv`` (:95) → the forward pass → ``wait_for_save`` (:100) → ``get_finished(finished_req_ids)``
  (:102-104) → ``get_block_ids_with_load_errors`` (:105) → ``clear_connector_metadata`` (:112); with nothing to compute
  the same without a forward pass (``kv_connector_no_forward`` :36-48, from ``gpu_model_runner.py`` :4340-4343); per
  attention layer ``wait_for_layer_load`` / ``save_kv_layer`` (``vllm/model_executor/layers/attention/
  kv_transfer_utils.py`` :51, :57). → :meth:`begin_step`, :meth:`layers_done`, :meth:`end_step`, and the
  :class:`Stepper`'s steps without a forward pass while the connector has work outstanding (vLLM's engine loop polls
  every 1 ms then: ``vllm/v1/engine/core.py`` :1430-1445; these come when something happened).

The compute itself stays the simulated engine's (its model writes the KV bytes into the pool and the engine model's
steps take the time); ``save_kv_layer`` for a layer is called once the bytes of that layer are written, as a GPU's
event would say.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from types import SimpleNamespace
from typing import Any, Dict, List, Optional, Set, Tuple

from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout

from .vllm import OrbitKVPdConnector
from .vllm_scheduler import handoff

log = logging.getLogger("orbitkv_pd.vllm_sim")


class _Status:
    def __init__(self, name: str) -> None:
        self.name = name


class SimRequest:
    """The attributes of vLLM's ``Request`` the connector reads."""

    def __init__(self, request_id: str, prompt_token_ids: List[int], kv_transfer_params: Optional[Dict[str, Any]]) -> None:
        self.request_id = request_id
        self.prompt_token_ids = prompt_token_ids
        self.kv_transfer_params = kv_transfer_params
        self.output_token_ids: List[int] = []
        self.num_computed_tokens = 0
        self.arrival_time = time.time()
        self.status = _Status("WAITING")


class _Blocks:
    """vLLM's ``KVCacheBlocks``: one list of block ids per KV-cache group."""

    def __init__(self, ids: List[int]) -> None:
        self.ids = ids

    def get_block_ids(self) -> Tuple[List[int]]:
        return (list(self.ids),)


class SimLayerCache:
    """One layer of the simulated engine's pool, as ``register_kv_caches`` receives it (vLLM passes a tensor)."""

    def __init__(self, layout: Any, path: str, layer: int, pool: Any) -> None:
        self.layout, self.path, self.layer, self.orbitkv_pool = layout, path, layer, pool


class _Tracked:
    def __init__(self, req: SimRequest, rid: str, owner: str, blocks: List[int], role: str) -> None:
        self.req, self.rid, self.owner, self.blocks, self.role = req, rid, owner, blocks, role
        self.loaded = threading.Event()
        self.loaded_us = 0  # when the step thread made it runnable (wall clock, µs)
        self.admitted_us = 0  # when the step thread allocated it (update_state_after_alloc)
        self.finished_us = 0  # when the step thread called request_finished
        self.pickup_us = 0  # of its load: from the wake to the step that found it finished (the engine loop's, not the connector's)
        self.invalid: Set[int] = set()
        self.scheduled = False
        self.finished = False


class VllmCallSites:
    """One simulated engine's vLLM: a scheduler-role and a worker-role connector (vLLM's uniprocess executor: both in
    one process, as two objects), driven from the engine's HTTP threads (admission, finish) and its step thread."""

    LAYER = "model.layers.{}.self_attn.attn"

    def __init__(self, config: Any, backend: Any, free: Any, extra: Dict[str, Any], policy: str = "recompute",
                 idle_step_s: float = 0.05) -> None:
        if policy not in ("recompute", "fail"):
            raise ValueError(f"kv_load_failure_policy: recompute or fail, got {policy!r}")
        self.backend, self.free, self.policy, self.idle_step_s = backend, free, policy, idle_step_s
        layout = backend.layout
        kv_role = {"prefill": "kv_producer", "decode": "kv_consumer"}.get(config.role, "kv_both")
        vllm_config = SimpleNamespace(
            kv_transfer_config=SimpleNamespace(kv_role=kv_role, kv_connector_extra_config=extra, kv_load_failure_policy=policy),
            cache_config=SimpleNamespace(block_size=layout.block_size_tokens),
            model_config=SimpleNamespace(served_model_name=[config.model], model=config.model),
            parallel_config=SimpleNamespace(tensor_parallel_size=1))
        kv_cache_config = SimpleNamespace(num_blocks=layout.num_blocks)
        self.scheduler = OrbitKVPdConnector(vllm_config, "SCHEDULER", kv_cache_config)
        self.worker = OrbitKVPdConnector(vllm_config, "WORKER", kv_cache_config)
        self.layer_names = [self.LAYER.format(i) for i in range(layout.num_layers)]
        # a backend with KV tensors in vLLM's layout (the reference engine) hands them over as vLLM's model runner would
        tensors = getattr(backend, "vllm_kv_caches", None)
        self.kv_caches = tensors(self.layer_names) if tensors is not None else {
            n: SimLayerCache(layout, config.pool_path, i, backend.pool) for i, n in enumerate(self.layer_names)}
        self._lock = threading.RLock()  # EngineCore's state: the scheduler connector and the requests
        self._new: List[_Tracked] = []  # admitted, for the next step's schedule
        self._finishing: List[Tuple[_Tracked, str, List[int], Any]] = []  # finished, for the next step's request_finished
        self._reqs: Dict[str, _Tracked] = {}  # vLLM id → request
        self._prefilling: Dict[str, str] = {}  # OrbitKV id → vLLM id, prefills computing here
        self._kept: Dict[str, _Tracked] = {}  # vLLM id → request whose blocks wait for finished_sending
        self._invalid: Set[int] = set()
        self._finished_ids: Set[str] = set()
        self._filled: Dict[str, int] = {}  # OrbitKV id → layers whose bytes are written
        self._fill = threading.Condition()
        self._ids = itertools.count(1)
        self._wake = False
        self._woken_us = 0  # the first wake since the last step began (µs)
        self._step_woken_us = 0
        self._step_began_us = 0
        self._last_step = 0.0
        self._saved = 0
        self._step_saves = False
        self._saving_rids: List[str] = []
        self.steps_without_forward = 0
        self.stepper: Any = None

    def start(self) -> "VllmCallSites":
        """``register_kv_caches`` (the worker half joins its transfer worker), then the step thread takes the hooks."""
        self.worker.worker_side.on_finished = self.wake
        self.worker.register_kv_caches(self.kv_caches)
        self.stepper = self.backend.stepper
        self.stepper.hooks = self
        return self

    @property
    def client(self) -> Any:
        return self.worker.worker_side.client

    # ------------------------------------------------------------------------------------------------ HTTP threads

    def admit(self, rid: str, tokens: List[int], params: Dict[str, Any], blocks: List[int], owner: str, role: str,
              arrival_us: int = 0) -> _Tracked:
        """A new request for vLLM's engine loop (its input queue): the next step's ``schedule`` asks the connector, takes
        ``blocks`` (allocated by the engine) and calls ``update_state_after_alloc``. ValueError, here and now, when the
        connector cannot take its ``kv_transfer_params`` (the caller frees the blocks)."""
        req = SimRequest(f"{rid}-{role}-{next(self._ids)}", tokens, params)
        if arrival_us:
            req.arrival_time = arrival_us / 1e6
        handoff(req)  # what the connector would refuse in the step, refused to the caller instead
        t = _Tracked(req, rid, owner, blocks, role)
        with self._lock:
            self._new.append(t)
        self.wake()
        return t

    def wait_loaded(self, t: _Tracked, timeout: float) -> Optional[bool]:
        """Waits until the request may run: True, its KV is in (or none was to come); False, some blocks did not load (the
        policy says what then); None, not within ``timeout``."""
        if not t.loaded.wait(timeout):
            return None
        return not t.invalid

    def filled(self, rid: str, layers: int) -> None:
        """The model wrote the KV bytes of ``layers`` layers of prefill ``rid``."""
        with self._fill:
            self._filled[rid] = layers
            self._fill.notify_all()

    def finish(self, t: _Tracked, status: str, output_tokens: List[int], timeout: float = 30.0) -> Optional[Dict[str, Any]]:
        """The request finished (``status``: vLLM's ``RequestStatus`` name): the next step's ``update_from_output`` part
        calls ``request_finished``, frees its blocks or keeps them until ``finished_sending`` names it. Returns the
        connector's ``kv_transfer_params`` for the answer."""
        done: "Future[Optional[Dict[str, Any]]]" = Future()
        with self._lock:
            if t.finished:
                return None
            t.finished = True
            self._finishing.append((t, status, list(output_tokens), done))
        self.wake()
        try:
            return done.result(timeout)
        except FutureTimeout:
            log.warning("request %s: its finish was not taken within %.0f s (the engine closed?)", t.rid, timeout)
            return None

    def wake(self) -> None:
        """Something for the connector: the next step comes now, with nothing to compute if need be."""
        if not self._woken_us:
            self._woken_us = time.time_ns() // 1000
        self._wake = True
        s = self.stepper
        if s is not None:
            s.wake()

    # ------------------------------------------------------------------------------------------------ the step thread

    def wants_step(self) -> bool:
        """Whether a step without a forward pass is due: something happened, or work is outstanding (a load or a send
        not finished) and the last step is ``idle_step_s`` ago."""
        if self._wake:
            self._wake = False
            return True
        with self._lock:
            outstanding = self.scheduler.scheduler_side.outstanding()
        return outstanding and time.monotonic() - self._last_step >= self.idle_step_s

    def _finished(self, t: _Tracked, status: str, outputs: List[int]) -> Tuple[bool, Optional[Dict[str, Any]]]:
        """``Scheduler._free_request``: ``request_finished``, and the blocks kept or freed (under the lock)."""
        t.req.status = _Status(status)
        t.req.output_token_ids = outputs
        t.finished_us = time.time_ns() // 1000
        self._reqs.pop(t.req.request_id, None)
        self._finished_ids.add(t.req.request_id)
        if self._prefilling.get(t.rid) == t.req.request_id:
            del self._prefilling[t.rid]
        if t.admitted_us == 0:  # finished before a step scheduled it: vLLM never asked the connector about it
            return False, None
        delay, params = self.scheduler.request_finished(t.req, list(t.blocks))
        # Scheduler.finish_requests (scheduler.py:2374-2384): a request ended while WAITING_FOR_REMOTE_KVS keeps its
        # blocks until the connector reports it finished receiving
        delay = delay or (t.role == "decode" and not t.loaded.is_set())
        if delay:
            self._kept[t.req.request_id] = t
        return delay, params

    def _schedule(self, t: _Tracked) -> None:
        """``schedule`` for a new request (under the lock): the connector's lookup, the allocation, its state after."""
        req = t.req
        ext, load_async = self.scheduler.get_num_new_matched_tokens(req, 0)
        t.admitted_us = time.time_ns() // 1000
        self.scheduler.update_state_after_alloc(req, _Blocks(t.blocks), (ext or 0) if load_async else 0)
        req.status = _Status("WAITING_FOR_REMOTE_KVS" if load_async else "RUNNING")
        self._reqs[req.request_id] = t
        if t.role == "prefill":
            self._prefilling[t.rid] = req.request_id
        if not load_async:
            t.loaded_us = t.admitted_us
            t.loaded.set()

    def begin_step(self, plan: Any) -> None:
        """What vLLM's engine loop does before a forward pass: the previous step's finished requests
        (``request_finished``), ``schedule`` (new requests; the step's metadata) and the model runner's first calls."""
        self._step_began_us, self._step_woken_us, self._woken_us = time.time_ns() // 1000, self._woken_us, 0
        scheduled: Dict[str, int] = {}
        new: List[Any] = []
        freed: List[_Tracked] = []
        answers: List[Tuple[Any, Optional[Dict[str, Any]]]] = []
        with self._lock:
            arrived, self._new = self._new, []
            finishing, self._finishing = self._finishing, []
            # new requests first (one that finished since still reached the scheduler: vLLM schedules, then finishes it)
            for t in arrived:
                try:
                    self._schedule(t)
                except ValueError as e:  # refused by the connector: the request fails as vLLM would fail it
                    log.warning("request %s refused by the connector: %s", t.rid, e)
                    t.invalid = set(t.blocks)
                    t.loaded.set()
            for t, status, outputs, done in finishing:
                try:
                    delay, params = self._finished(t, status, outputs)
                except Exception as e:  # never the step thread's end
                    log.exception("request_finished of %s failed", t.rid)
                    answers.append((done, e))
                    continue
                if not delay:
                    freed.append(t)
                answers.append((done, params))
            for c in plan.prefills if plan is not None else ():
                vid = self._prefilling.get(c.id.rsplit("#", 1)[0])
                t = self._reqs.get(vid) if vid is not None else None
                if t is None:
                    continue
                scheduled[vid] = c.tokens
                if not t.scheduled:
                    t.scheduled = True
                    new.append(SimpleNamespace(req_id=vid, num_computed_tokens=c.start))
            out = SimpleNamespace(num_scheduled_tokens=scheduled, scheduled_new_reqs=new, finished_req_ids=set(self._finished_ids))
            meta = self.scheduler.build_connector_meta(out)
            self._saving_rids = [self._reqs[v].rid for v in scheduled]
        # the model runner's calls first: the facts are on the handoff's path, the answers below are not
        self._step_saves = bool(scheduled)
        self._saved = 0
        self.worker.bind_connector_metadata(meta)
        self.worker.start_load_kv(None)
        for done, r in answers:
            if isinstance(r, Exception):
                done.set_exception(r)
            else:
                done.set_result(r)
        with self._fill:
            for t, _, _, _ in finishing:
                self._filled.pop(t.rid, None)
        for t in freed:
            self.free(t.owner)

    def step_failed(self) -> None:
        """The step's forward pass failed (a prefill failing mid-way): the layers it did not compute are neither waited
        for nor saved at the step's end (the request's end tells the connector the prefill failed)."""
        self._step_saves = False
        self._saving_rids = []

    def saves(self) -> bool:
        """Whether this step computes a prefill whose KV goes to another engine (its layers are reported)."""
        return self._step_saves

    def layers_done(self, layers: int) -> None:
        """The forward pass reached ``layers`` layers: each is waited for (``wait_for_layer_load``) and saved
        (``save_kv_layer``) once its bytes are written."""
        for i in range(self._saved, min(layers, len(self.layer_names))):
            self._wait_filled(i + 1)
            name = self.layer_names[i]
            self.worker.wait_for_layer_load(name)
            self.worker.save_kv_layer(name, self.kv_caches[name], None)
        self._saved = max(self._saved, layers)

    def _wait_filled(self, layers: int, timeout: float = 30.0) -> None:
        # A prefill whose writer has not finished its first layer yet has no entry: 0 layers written, not all of them
        # (on a loaded machine the step thread can reach a layer's save before the request thread wrote a byte of it).
        deadline = time.monotonic() + timeout
        with self._fill:
            while any(r and self._filled.get(r, 0) < layers for r in self._saving_rids):
                left = deadline - time.monotonic()
                if left <= 0:
                    log.warning("the KV of layer %d was not written within %.0f s: saved anyway", layers, timeout)
                    return
                self._fill.wait(left)

    def end_step(self, plan: Any) -> None:
        """The model runner's last calls, then ``update_from_output``'s part: the connector's output to the scheduler,
        loads finished, kept blocks freed."""
        if self._step_saves:
            self.layers_done(len(self.layer_names))
        self.worker.wait_for_save()
        with self._lock:
            finished_ids, self._finished_ids = self._finished_ids, set()
        sending, recving = self.worker.get_finished(finished_ids)
        errors = self.worker.get_block_ids_with_load_errors()
        self.worker.clear_connector_metadata()
        freed: List[_Tracked] = []
        with self._lock:
            self.scheduler.update_connector_output(SimpleNamespace(finished_sending=sending, finished_recving=recving,
                                                                   invalid_block_ids=errors))
            self._invalid |= errors
            for vid in recving or ():
                kept = self._kept.pop(vid, None)
                if kept is not None:  # finished already: its blocks go (scheduler.py:2817-2825), and their load errors
                    freed.append(kept)
                    self._invalid -= set(kept.blocks)
                    continue
                t = self._reqs.get(vid)
                if t is not None:
                    if self._invalid:
                        t.invalid = self._invalid & set(t.blocks)
                        self._invalid -= t.invalid
                    t.req.status = _Status("WAITING")
                    t.loaded_us = time.time_ns() // 1000
                    t.pickup_us = self._step_began_us - self._step_woken_us if self._step_woken_us else 0
                    t.loaded.set()
            for vid in sending or ():
                t = self._kept.pop(vid, None)
                if t is not None:
                    freed.append(t)
        for t in freed:
            self.free(t.owner)
        self._step_saves = False
        self._last_step = time.monotonic()
        if plan is None:
            self.steps_without_forward += 1

    def kept_count(self) -> int:
        """Requests whose blocks wait for ``finished_sending``."""
        with self._lock:
            return len(self._kept)

    def close(self) -> None:
        if self.stepper is not None:
            self.stepper.hooks = None
        self.worker.shutdown()
