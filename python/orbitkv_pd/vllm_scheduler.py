"""The scheduler half of the OrbitKV connector for vLLM (docs/vllm.md): what vLLM's v1 scheduler calls on a
``KVConnectorBase_V1`` in its EngineCore process, as pure bookkeeping. It holds no connection: the worker half owns the
engine API connection (the layer-by-layer reports come from ``save_kv_layer`` in the worker process), and the facts
decided here — decode pages ready, prefill done, a request ended — ride to it in the next step's connector metadata
(``build_connector_meta`` → the workers' ``bind_connector_metadata``), as vLLM lets the two halves talk.

Written against vLLM's scheduler at the release docs/vllm.md pins (``vllm/v1/core/sched/scheduler.py``): it calls
``get_num_new_matched_tokens(request, num_computed_tokens)`` for a waiting request with nothing computed (again on a
later step if the allocation failed), ``update_state_after_alloc(request, blocks, num_external_tokens)`` after the
allocation (and once more with 0 when an asynchronous load finished), ``build_connector_meta(scheduler_output)`` every
step, ``request_finished(request, block_ids)`` when a request stops (``(delay_free_blocks, kv_transfer_params)``), and
``update_connector_output(connector_output)`` with what the workers finished. Nothing of vLLM is imported here.

A request takes part when its ``kv_transfer_params`` (the OpenAI request's field; vLLM puts it on the ``Request``) are
those ``./orbitkv-pd proxy`` sends, in the form vLLM's P/D proxies use: ``{"request_id": <the id the proxy admitted>,
"do_remote_decode": true}`` to the prefill engine, ``{"request_id": ..., "do_remote_prefill": true}`` to the decode engine
(both at once: the push needs no answer from the prefill first). Every other request is vLLM's alone.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

log = logging.getLogger("orbitkv_pd.vllm")

#: The key of ``kv_transfer_params`` that names the request the proxy admitted (the handoff's id in the log; vLLM's own
#: request id gets a random suffix in its OpenAI server, so it cannot be that id).
KEY = "request_id"

#: vLLM's finished states in which the prompt's KV is whole (``RequestStatus`` names): any other ending (aborted, an
#: error, the prompt refused) reports no prefill.
FINISHED_WHOLE = ("FINISHED_STOPPED", "FINISHED_LENGTH_CAPPED")


@dataclasses.dataclass(frozen=True)
class DecodeReady:
    """The decode engine allocated the prompt's pages: ``dest_blocks`` in token order, the first ``cached_blocks`` of them
    filled from its own prefix cache (the order moves only the rest)."""
    request_id: str
    vllm_request_id: str
    dest_blocks: Tuple[int, ...]
    num_tokens: int
    cached_blocks: int
    in_us: int = 0  # the request's arrival at vLLM (its ``arrival_time``): the timing marks of the facts (docs/tracing.md)


@dataclasses.dataclass(frozen=True)
class PrefillCompleted:
    """The prefill engine's KV is whole in ``source_blocks`` (token order); vLLM keeps them until released."""
    request_id: str
    vllm_request_id: str
    source_blocks: Tuple[int, ...]
    num_tokens: int
    first_token: Optional[int]
    in_us: int = 0  # arrival
    c0_us: int = 0  # its first prefill step scheduled
    c1_us: int = 0  # finished (the first token sampled)


@dataclasses.dataclass(frozen=True)
class RequestEnded:
    """A request of the handoff ended in vLLM: the decode answered (``output_tokens``), or either side stopped early.
    ``held``: a decode that ended while its KV was still awaited: vLLM itself keeps its blocks until the connector reports
    it finished receiving (``Scheduler.finish_requests``, scheduler.py:2374-2384 at the pinned commit) — which the worker
    half does once the handoff ended at the decider, so no push can still write into them."""
    request_id: str
    vllm_request_id: str
    role: str
    output_tokens: int
    whole: bool
    status: str
    held: bool = False
    in_us: int = 0


@dataclasses.dataclass(frozen=True)
class SaveChunk:
    """This step computes prompt tokens ``[start, end)`` of a prefill whose KV goes to another engine: the worker half
    reports each layer of them as ``save_kv_layer`` is called (``blocks``: the prompt's pages, token order)."""
    request_id: str
    vllm_request_id: str
    blocks: Tuple[int, ...]
    num_tokens: int
    start: int
    end: int


@dataclasses.dataclass
class OrbitKVPdMetadata:
    """One step's facts for the worker half (vLLM's ``KVConnectorMetadata``; a plain dataclass, so it pickles)."""
    decode_ready: List[DecodeReady] = dataclasses.field(default_factory=list)
    prefill_completed: List[PrefillCompleted] = dataclasses.field(default_factory=list)
    ended: List[RequestEnded] = dataclasses.field(default_factory=list)
    saving: List[SaveChunk] = dataclasses.field(default_factory=list)
    #: decodes whose KV cannot come (too few blocks for the prompt): (vLLM id, their blocks), reported as load errors
    refused: List[Tuple[str, Tuple[int, ...]]] = dataclasses.field(default_factory=list)

    def empty(self) -> bool:
        return not (self.decode_ready or self.prefill_completed or self.ended or self.saving or self.refused)


def handoff(request: Any) -> Optional[Dict[str, Any]]:
    """The request's part in a handoff, ``{"request_id": <the proxy's id>, "role": "prefill" | "decode"}``, or None when it
    has none (no ``kv_transfer_params``, or neither flag set: vLLM serves it alone).

    Raises ValueError naming the field when the parameters ask for a handoff but are malformed: a request the proxy sent
    must not silently lose its handoff, and one another connector's proxy sent (no ``request_id``) is not ours to guess."""
    params = getattr(request, "kv_transfer_params", None)
    if params is None:
        return None
    if not isinstance(params, dict):
        raise ValueError(f"kv_transfer_params: an object, got {type(params).__name__}")
    decode, prefill = params.get("do_remote_decode", False), params.get("do_remote_prefill", False)
    for name, v in (("do_remote_decode", decode), ("do_remote_prefill", prefill)):
        if not isinstance(v, bool):
            raise ValueError(f"kv_transfer_params.{name}: true or false, got {v!r}")
    if not decode and not prefill:
        return None
    if decode and prefill:
        raise ValueError("kv_transfer_params: do_remote_decode and do_remote_prefill both true (a request is either side of a handoff)")
    rid = params.get(KEY)
    if not isinstance(rid, str) or not rid:
        raise ValueError(f"kv_transfer_params.{KEY}: the id ./orbitkv-pd proxy admitted the request under, a non-empty string; "
                         f"got {rid!r} (a request from a proxy for another connector?)")
    return {"request_id": rid, "role": "prefill" if decode else "decode"}


def _mark_used(request: Any) -> None:
    """The handoff's parameters are spent: a preempted request computes its prompt itself when scheduled again."""
    params = getattr(request, "kv_transfer_params", None)
    if isinstance(params, dict):
        params["do_remote_prefill"] = False


def _now_us() -> int:
    return time.time_ns() // 1000


def _arrival_us(request: Any) -> int:
    t = getattr(request, "arrival_time", None)
    return int(t * 1_000_000) if isinstance(t, (int, float)) and t > 0 else 0


def _status(request: Any) -> str:
    s = getattr(request, "status", None)
    return getattr(s, "name", str(s))


class SchedulerSide:
    """The scheduler's calls, for one vLLM engine whose blocks hold ``block_size`` tokens.

    None of them raises: vLLM calls them inside its scheduler's step, where an exception ends the whole engine. A request
    whose parameters cannot be taken is logged and served as vLLM's alone (the proxy refuses bad parameters before)."""

    def __init__(self, block_size: int) -> None:
        if block_size < 1:
            raise ValueError(f"block_size: must be positive, got {block_size}")
        self.block_size = block_size
        self._pending = OrbitKVPdMetadata()
        #: decode requests whose KV load is outstanding: vLLM request id → OrbitKV request id
        self._loading: Dict[str, str] = {}
        #: prefill requests whose blocks vLLM keeps for the push: vLLM id → OrbitKV id
        self._sending: Dict[str, str] = {}
        #: prefill requests being computed: vLLM id → [OrbitKV id, pages so far, prompt tokens, tokens computed, first step µs]
        self._prefilling: Dict[str, List[Any]] = {}
        #: every request taking part, from its allocation to its end: vLLM id → (OrbitKV id, role). Its parameters are
        #: marked used once announced (as vLLM's NIXL connector does), so a preempted request is not announced twice.
        self._part: Dict[str, Tuple[str, str]] = {}
        #: prefills preempted after their pages were reported: ended as failed, their finish reports nothing more
        self._abandoned: Dict[str, None] = {}

    def _pages(self, tokens: int) -> int:
        """The pages ``tokens`` prompt tokens fill."""
        return -(-tokens // self.block_size)

    def _handoff(self, request: Any) -> Optional[Dict[str, Any]]:
        try:
            return handoff(request)
        except ValueError as e:
            log.error("request %s: served without a handoff: %s", getattr(request, "request_id", "?"), e)
            return None

    # -------------------------------------------------------------------------------------------------- decode side

    def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int) -> Tuple[Optional[int], bool]:
        """A decode request's prompt tokens beyond its local prefix hit arrive from the prefill engine, asynchronously:
        ``(tokens, True)``; anything else ``(0, False)``. Asked again for the same request when its allocation failed."""
        o = self._handoff(request)
        if o is None or o["role"] != "decode":
            return 0, False
        prompt = len(request.prompt_token_ids)
        remote = prompt - num_computed_tokens
        return (remote, True) if remote > 0 else (0, False)

    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
        """The pages vLLM allocated: a decode's whose prompt arrives are the destination (decode ready); a prefill's are
        where its prompt is computed (the first chunk's: later chunks' come with their steps). Called again with 0 once a
        load finished, and after a preemption: a prefill preempted after its pages were reported is ended as failed (the
        decider decides again; its pages went back to vLLM)."""
        vid = request.request_id
        if vid in self._prefilling:
            st = self._prefilling.pop(vid)
            self._abandoned[vid] = None
            self._pending.ended.append(RequestEnded(st[0], vid, "prefill", 0, False, "PREEMPTED", False, _arrival_us(request)))
            log.warning("prefill %s (%s) preempted: reported failed", st[0], vid)
            return
        if vid in self._part or vid in self._abandoned:
            return
        o = self._handoff(request)
        if o is None:
            return
        prompt = len(request.prompt_token_ids)
        needed = self._pages(prompt)
        ids = list(blocks.get_block_ids()[0])  # one KV-cache group (the hybrid manager is off for this connector)
        if o["role"] == "prefill":
            # the tokens already computed (a local prefix hit) count as done
            done = int(getattr(request, "num_computed_tokens", 0) or 0)
            self._prefilling[vid] = [o["request_id"], ids[:needed], prompt, done, 0]
            self._part[vid] = (o["request_id"], "prefill")
            return
        if num_external_tokens <= 0:
            return
        self._part[vid] = (o["request_id"], "decode")
        _mark_used(request)
        if len(ids) < needed:
            log.error("request %s: %d blocks allocated for a prompt of %d tokens (%d needed): its KV cannot come", vid, len(ids), prompt,
                      needed)
            self._pending.refused.append((vid, tuple(ids)))
            return
        cached = (prompt - num_external_tokens) // self.block_size
        self._loading[vid] = o["request_id"]
        self._pending.decode_ready.append(DecodeReady(o["request_id"], vid, tuple(ids[:needed]), prompt, cached, _arrival_us(request)))

    # -------------------------------------------------------------------------------------------------- both sides

    def build_connector_meta(self, scheduler_output: Any) -> OrbitKVPdMetadata:
        """This step's facts for the worker half, and the prefill chunks it computes (``scheduler_output
        .num_scheduled_tokens``: vLLM id → tokens this step; a request's first step is in ``scheduled_new_reqs`` with the
        tokens its prefix-cache hit spares as ``num_computed_tokens``, a later step's new blocks in
        ``scheduled_cached_reqs.new_block_ids``) so that the worker can report them layer by layer — once every page of
        the prompt is allocated (the first report names them all); the next step starts empty."""
        out, self._pending = self._pending, OrbitKVPdMetadata()
        scheduled = getattr(scheduler_output, "num_scheduled_tokens", None) or {}
        for new in getattr(scheduler_output, "scheduled_new_reqs", None) or ():
            st = self._prefilling.get(getattr(new, "req_id", None))
            if st is not None:  # its first step: what the prefix cache held is computed already
                st[3] = max(st[3], int(getattr(new, "num_computed_tokens", 0) or 0))
        cached = getattr(scheduler_output, "scheduled_cached_reqs", None)
        if cached is not None and self._prefilling:
            for vid, new_ids in zip(getattr(cached, "req_ids", None) or (), getattr(cached, "new_block_ids", None) or ()):
                st = self._prefilling.get(vid)
                if st is not None and new_ids:
                    st[1].extend(list(new_ids[0])[: self._pages(st[2]) - len(st[1])])
        for vid, st in self._prefilling.items():
            n = scheduled.get(vid, 0)
            if n > 0 and st[3] < st[2]:
                st[4] = st[4] or _now_us()
                end = min(st[2], st[3] + n)
                if len(st[1]) >= self._pages(st[2]):
                    out.saving.append(SaveChunk(st[0], vid, tuple(st[1]), st[2], st[3], end))
                st[3] = end
        return out

    def request_finished(self, request: Any, block_ids: Sequence[int]) -> Tuple[bool, Optional[Dict[str, Any]]]:
        """A prefill that ended whole: its KV is in ``block_ids``, kept (``delay_free_blocks``) until the release decision
        comes back as finished sending; the answer's ``kv_transfer_params`` name the handoff for the proxy. A decode, or
        a prefill that ended otherwise: reported ended, the blocks free as vLLM frees them."""
        vid = request.request_id
        part = self._part.pop(vid, None)
        st = self._prefilling.pop(vid, None)
        if self._abandoned.pop(vid, "no") is None:
            return False, None
        if part is None:  # ended before a step allocated it (aborted while waiting): its side still hears of it
            o = self._handoff(request)
            part = (o["request_id"], o["role"]) if o is not None else None
        if part is None:
            return False, None
        rid, role = part
        status = _status(request)
        whole = status in FINISHED_WHOLE
        outputs = list(getattr(request, "output_token_ids", []) or [])
        if role == "prefill" and whole and block_ids:
            prompt = len(request.prompt_token_ids)
            needed = self._pages(prompt)
            self._pending.prefill_completed.append(PrefillCompleted(rid, vid, tuple(block_ids[:needed]), prompt,
                                                                    outputs[0] if outputs else None, _arrival_us(request),
                                                                    st[4] if st is not None else 0, _now_us()))
            self._sending[vid] = rid
            # vLLM answers the prefill with these: what the proxy would hand to a decode engine that pulls (the push
            # needs none of it, the decider names the pages); the same fields as the simulated engines answer
            return True, {KEY: rid, "do_remote_prefill": True, "do_remote_decode": False, "remote_block_ids": list(block_ids[:needed])}
        # A decode still waiting for its KV: a push may be writing into its blocks. vLLM keeps them until it is reported
        # finished receiving (it does so for any request aborted while WAITING_FOR_REMOTE_KVS), so nothing is delayed here.
        held = self._loading.pop(vid, None) is not None and role == "decode"
        self._pending.ended.append(RequestEnded(rid, vid, role, len(outputs), whole, status, held, _arrival_us(request)))
        return False, None

    def update_connector_output(self, connector_output: Any) -> None:
        """What the workers finished: a load (the decode may run) or a send (vLLM frees the blocks it kept)."""
        for vid in getattr(connector_output, "finished_recving", None) or ():
            self._loading.pop(vid, None)
        for vid in getattr(connector_output, "finished_sending", None) or ():
            self._sending.pop(vid, None)

    def has_pending_push_work(self) -> bool:
        """vLLM keeps stepping while this is true (``Scheduler.has_requests``): blocks kept until a release, loads
        outstanding, facts to send — else an idle engine would not collect a release until its next request."""
        return self.outstanding()

    # -------------------------------------------------------------------------------------------------- introspection

    def loading(self) -> Dict[str, str]:
        """Decode requests waiting for their KV (vLLM id → OrbitKV id)."""
        return dict(self._loading)

    def sending(self) -> Dict[str, str]:
        """Requests whose blocks vLLM keeps until a release (vLLM id → OrbitKV id)."""
        return dict(self._sending)

    def outstanding(self) -> bool:
        """Whether a step is owed to the worker half: facts to send, a load or a send not finished (vLLM keeps stepping
        while a connector has such work: ``has_pending_push_work``)."""
        return not self._pending.empty() or bool(self._loading) or bool(self._sending)
