"""One engine's forward steps, one at a time, as a continuously batching serving engine (vLLM v1) schedules them.

The same rules as the Java engine's ``io.orbitkv.pd.engine.sim.model.StepScheduler`` (docs/engine-model.md; the
cross-language golden test, engine-sim/src/test/resources/engine-model/golden.json, holds both to the same steps and
times). Pure: no clock, no thread — :meth:`StepScheduler.plan` says what the next step computes and how long it takes,
:meth:`StepScheduler.complete` applies it; the caller owns time (a virtual clock in :func:`simulate`, a timer in an
engine).

A step: every running sequence that decodes adds one token; prefill chunks fill the rest of the token budget
(``max_batched_tokens``), first for running sequences whose prompt is partly computed, then for waiting ones in arrival
order (FCFS) while the running set is below ``max_num_seqs`` and the pool has the blocks the request needs for its
prompt and its whole output. A request that does not fit waits, and so does every one behind it: no preemption.
Cached prompt tokens (a prefix-cache hit, :class:`PrefixCache`, :func:`cached_tokens`) cost no compute.

Each request names the part of its work this engine does (prefill only, decode only, or both), defaulting to the
engine's role: a P/D engine that also serves colocated requests, or a decode engine that recomputes a prompt whose KV
never came, runs different parts in the same steps. A request that ends early (its client gone, an error) is aborted,
so its blocks do not stay reserved for a sequence nobody reads.
"""

from __future__ import annotations

import collections
import hashlib
import math
from dataclasses import dataclass
from typing import Deque, Dict, List, Optional, Tuple

PREFILL = "prefill"
DECODE = "decode"
BOTH = "both"

FIRST_TOKEN = "FIRST_TOKEN"
TOKEN = "TOKEN"
FINISHED = "FINISHED"


@dataclass(frozen=True)
class Limits:
    """Scheduler limits (vLLM's ``max_num_batched_tokens``, ``max_num_seqs``)."""

    max_batched_tokens: int
    max_num_seqs: int
    block_tokens: int
    num_blocks: int

    def __post_init__(self) -> None:
        if min(self.max_batched_tokens, self.max_num_seqs, self.block_tokens, self.num_blocks) < 1:
            raise ValueError(f"engine limits must be >= 1, got {self}")


@dataclass(frozen=True)
class CostModel:
    """A step's duration in integer picoseconds (docs/engine-model.md, "The cost model"):
    fixed + prefill_token × tokens + prefill_pair × attention pairs + decode_seq × decoding sequences + kv_token × KV
    tokens the decoding sequences read."""

    fixed_ps: int
    prefill_token_ps: int
    prefill_pair_ps: int
    decode_seq_ps: int
    kv_token_ps: int

    @staticmethod
    def pairs(start: int, n: int) -> int:
        """Attention pairs of prompt tokens start .. start+n-1: n·start + n(n+1)/2."""
        return n * start + n * (n + 1) // 2

    def step_ps(self, prefills: List["Chunk"], decodes: int, decode_context_tokens: int) -> int:
        tokens = sum(c.tokens for c in prefills)
        pairs = sum(CostModel.pairs(c.start, c.tokens) for c in prefills)
        return (self.fixed_ps + self.prefill_token_ps * tokens + self.prefill_pair_ps * pairs + self.decode_seq_ps * decodes
                + self.kv_token_ps * decode_context_tokens)


FREE = CostModel(0, 0, 0, 0, 0)

# The presets' cost models, the same numbers as the Java CostModels (docs/engine-model.md, "Calibration").
LLAMA_8B_H100 = CostModel(6_440_000_000, 22_300_000, 1_000, 28_000_000, 43_700)
LLAMA_70B_TP4 = CostModel(15_600_000_000, 58_000_000, 1_100, 60_000_000, 27_000)
TINY = CostModel(200_000_000, 2_000_000, 0, 10_000_000, 0)

# The cost models an engine names by ``engine.cost`` (besides ``per-token``, see :func:`per_token_costs`).
COSTS: Dict[str, CostModel] = {"llama-8b-h100": LLAMA_8B_H100, "llama-70b-tp4": LLAMA_70B_TP4, "tiny": TINY}


def per_token_costs(prefill_ms_per_token: float, decode_ms_per_token: float) -> CostModel:
    """The cost model of the legacy keys (``engine.compute.prefill-ms-per-token``, ``...decode-ms-per-token``): a step
    costs the decode time, plus the per-token prefill time for each prompt token it computes. So a lone decode emits a
    token every ``decode_ms``, and a lone prompt of n tokens takes ``decode_ms + n × prefill_ms``, as those keys always
    meant, while steps still batch."""
    return CostModel(_round_half_up(decode_ms_per_token * 1e9), _round_half_up(prefill_ms_per_token * 1e9), 0, 0, 0)


def _round_half_up(x: float) -> int:
    """As Java's Math.round (Python's round() goes to even at .5: the two engines would differ by a picosecond)."""
    return math.floor(x + 0.5)


@dataclass(frozen=True)
class Request:
    """A request given to the scheduler; ``cached_tokens``: prompt tokens already in cached blocks (no compute)."""

    id: str
    prompt_tokens: int
    output_tokens: int
    cached_tokens: int = 0

    def __post_init__(self) -> None:
        if self.prompt_tokens < 1 or self.output_tokens < 1 or not 0 <= self.cached_tokens <= self.prompt_tokens:
            raise ValueError(f"request {self.id}: prompt >= 1, output >= 1, 0 <= cached <= prompt, got "
                             f"{self.prompt_tokens}/{self.output_tokens}/{self.cached_tokens}")


@dataclass(frozen=True)
class Chunk:
    """``tokens`` prompt tokens of ``id`` computed in a step, on top of ``start`` already there."""

    id: str
    start: int
    tokens: int


@dataclass(frozen=True)
class Plan:
    """One planned step: who decodes, which chunks prefill, and how long it takes (picoseconds)."""

    decodes: Tuple[str, ...]
    prefills: Tuple[Chunk, ...]
    decode_context_tokens: int
    duration_ps: int

    @property
    def tokens(self) -> int:
        return len(self.decodes) + sum(c.tokens for c in self.prefills)


class _Seq:
    __slots__ = ("r", "part", "computed", "generated", "blocks")

    def __init__(self, r: Request, part: str) -> None:
        self.r = r
        self.part = part
        self.computed = r.cached_tokens
        self.generated = 0
        self.blocks = 0

    def decoding(self) -> bool:
        return self.computed == self.r.prompt_tokens


class StepScheduler:
    def __init__(self, role: str, limits: Limits, costs: CostModel) -> None:
        if role not in (PREFILL, DECODE, BOTH):
            raise ValueError(f"role: prefill, decode or both, got {role!r}")
        self.role = role
        self.limits = limits
        self.costs = costs
        self._running: List[_Seq] = []
        self._waiting: Deque[_Seq] = collections.deque()
        self.blocks_used = 0

    def add(self, r: Request, part: Optional[str] = None) -> bool:
        """Queues ``r`` (FCFS) for ``part`` of its work (PREFILL, DECODE or BOTH; default: the engine's role). One engine
        may serve different parts of different requests (a colocated engine that also decodes transferred KV), so the
        part is the request's, the role only its default. A DECODE part arrives with its prompt computed and its first
        token out: one that asks for a single token has nothing left to decode and is not queued (False). A PREFILL part
        holds blocks for its prompt only and leaves at its first token."""
        part = self.role if part is None else part
        if part not in (PREFILL, DECODE, BOTH):
            raise ValueError(f"part: prefill, decode or both, got {part!r}")
        s = _Seq(r, part)
        if part == DECODE:
            if r.output_tokens == 1:
                return False
            s.computed = r.prompt_tokens
            s.generated = 1
        self._waiting.append(s)
        return True

    def abort(self, rid: str) -> bool:
        """Removes the sequence ``rid``, waiting or running (its blocks freed): its request ended early (the client
        left, an error). False when no such sequence is here (never added, not queued, or already finished). Safe between
        :meth:`plan` and :meth:`complete`: the plan's other sequences complete as planned, the aborted one yields
        nothing."""
        for s in self._waiting:
            if s.r.id == rid:
                self._waiting.remove(s)
                return True
        for s in self._running:
            if s.r.id == rid:
                self._running.remove(s)
                self.blocks_used -= s.blocks
                return True
        return False

    def blocks_for(self, prompt_tokens: int, output_tokens: int, part: str) -> int:
        """Blocks a sequence holds while it runs: its prompt, plus its whole output unless it only prefills."""
        tokens = prompt_tokens + (0 if part == PREFILL else output_tokens)
        return (tokens + self.limits.block_tokens - 1) // self.limits.block_tokens

    def _blocks_for(self, s: _Seq) -> int:
        return self.blocks_for(s.r.prompt_tokens, s.r.output_tokens, s.part)

    def plan(self) -> Optional[Plan]:
        """The next step, or None when nothing can run."""
        budget = self.limits.max_batched_tokens
        decodes: List[str] = []
        prefills: List[Chunk] = []
        context = 0
        for s in self._running:
            if s.decoding() and budget > 0:
                decodes.append(s.r.id)
                context += s.r.prompt_tokens + s.generated
                budget -= 1
        for s in self._running:
            if not s.decoding() and budget > 0:
                n = min(budget, s.r.prompt_tokens - s.computed)
                prefills.append(Chunk(s.r.id, s.computed, n))
                budget -= n
        admitted = len(self._running)
        free = self.limits.num_blocks - self.blocks_used
        for s in self._waiting:
            need = self._blocks_for(s)
            if admitted >= self.limits.max_num_seqs or budget <= 0 or need > free:
                break
            free -= need
            admitted += 1
            if s.decoding():
                decodes.append(s.r.id)
                context += s.r.prompt_tokens + s.generated
                budget -= 1
            else:
                n = min(budget, s.r.prompt_tokens - s.computed)
                prefills.append(Chunk(s.r.id, s.computed, n))
                budget -= n
        if not decodes and not prefills:
            return None
        return Plan(tuple(decodes), tuple(prefills), context, self.costs.step_ps(prefills, len(decodes), context))

    def complete(self, p: Plan) -> List[Tuple[str, str]]:
        """Applies ``p`` (the plan :meth:`plan` just returned): the tokens it produced, as (id, kind)."""
        in_plan = set(p.decodes) | {c.id for c in p.prefills}
        while self._waiting and self._waiting[0].r.id in in_plan:
            s = self._waiting.popleft()
            s.blocks = self._blocks_for(s)
            self.blocks_used += s.blocks
            self._running.append(s)
        chunks: Dict[str, Chunk] = {c.id: c for c in p.prefills}
        decoding = set(p.decodes)
        out: List[Tuple[str, str]] = []
        done: List[_Seq] = []
        for s in self._running:
            if s.r.id in decoding:
                s.generated += 1
                last = s.generated >= s.r.output_tokens
                out.append((s.r.id, FINISHED if last else TOKEN))
                if last:
                    done.append(s)
                continue
            c = chunks.get(s.r.id)
            if c is not None:
                s.computed += c.tokens
                if s.decoding():
                    s.generated = 1
                    out.append((s.r.id, FIRST_TOKEN))
                    if s.part == PREFILL or s.r.output_tokens == 1:
                        out.append((s.r.id, FINISHED))
                        done.append(s)
        for s in done:
            self._running.remove(s)
            self.blocks_used -= s.blocks
        return out

    @property
    def running_count(self) -> int:
        return len(self._running)

    @property
    def waiting_count(self) -> int:
        return len(self._waiting)


@dataclass(frozen=True)
class SimStep:
    start_us: int
    duration_us: int
    decodes: Tuple[str, ...]
    prefills: Tuple[Chunk, ...]
    running: int
    waiting: int
    blocks_used: int


def simulate(role: str, limits: Limits, costs: CostModel,
             arrivals: List[Tuple[int, Request]]) -> Tuple[List[SimStep], List[Tuple[int, str, str]]]:
    """Runs the engine in virtual time over ``arrivals`` ((time µs, request), sorted): a step starts when the previous
    one ended (or at the next arrival, when idle) and sees every request that arrived by its start. Durations are the
    cost model's picoseconds rounded down to whole microseconds; returns the steps and the (time, id, kind) events."""
    s = StepScheduler(role, limits, costs)
    steps: List[SimStep] = []
    events: List[Tuple[int, str, str]] = []
    now = 0
    nxt = 0
    while True:
        while nxt < len(arrivals) and arrivals[nxt][0] <= now:
            s.add(arrivals[nxt][1])
            nxt += 1
        p = s.plan()
        if p is None:
            if nxt >= len(arrivals):
                break
            now = max(now, arrivals[nxt][0])
            continue
        dt = p.duration_ps // 1_000_000
        steps.append(SimStep(now, dt, p.decodes, p.prefills, s.running_count, s.waiting_count, s.blocks_used))
        now += dt
        for rid, kind in s.complete(p):
            events.append((now, rid, kind))
    return steps, events


# ---------------------------------------------------------------------------------------------------- prefix cache

class PrefixCache:
    """Which prompt blocks an engine still has computed, by block hash (:func:`block_hashes`), least recently used
    evicted first, as vLLM's prefix cache keeps freed blocks until their memory is needed. Only the hashes: what a hit
    saves is compute (:func:`cached_tokens` of the prompt cost nothing); the cached blocks are not counted against the
    scheduler's pool. Not thread-safe (its owner locks)."""

    def __init__(self, capacity_blocks: int) -> None:
        if capacity_blocks < 1:
            raise ValueError(f"prefix cache capacity must be >= 1 blocks, got {capacity_blocks}")
        self.capacity = capacity_blocks
        self._lru: "collections.OrderedDict[bytes, None]" = collections.OrderedDict()

    def lookup(self, hashes: List[bytes]) -> int:
        """The number of leading ``hashes`` present, stopping at the first miss (a block is only reusable when every
        block before it is: its hash chains them); the hits become the most recently used, the first most recent."""
        n = 0
        for h in hashes:
            if h not in self._lru:
                break
            n += 1
        self._touch(hashes[:n])
        return n

    def _touch(self, chain: List[bytes]) -> None:
        # Last block first: the chain's tail becomes the least recent of it and is evicted before its head, as vLLM frees a
        # request's blocks in reverse order. A head evicted first would break the chain for every prompt sharing it.
        for h in reversed(chain):
            self._lru[h] = None
            self._lru.move_to_end(h)

    def insert(self, hashes: List[bytes]) -> Tuple[List[int], List[bytes]]:
        """Adds each of ``hashes`` (or touches it) as the most recently used, the first most recent of all (the tail is
        evicted before the head); then evicts the least recently used while over capacity. Returns what changed: the positions of ``hashes`` not cached before, and the hashes evicted
        (as the Java ``PrefixCache.insert``'s ``Change``)."""
        added = [i for i, h in enumerate(hashes) if h not in self._lru]
        self._touch(hashes)
        evicted: List[bytes] = []
        while len(self._lru) > self.capacity:
            evicted.append(self._lru.popitem(last=False)[0])
        return added, evicted

    @property
    def size(self) -> int:
        return len(self._lru)


def cached_tokens(hit_blocks: int, block_tokens: int, prompt_tokens: int) -> int:
    """Prompt tokens a prefix-cache hit of ``hit_blocks`` spares: the hit blocks' tokens, but never the last prompt
    token — as vLLM does, a full hit still computes it, to sample the first token from its logits."""
    return max(0, min(hit_blocks * block_tokens, prompt_tokens - 1))


# ---------------------------------------------------------------------------------------------------- block hashes

def _cbor_head(out: bytearray, major: int, value: int) -> None:
    """A CBOR head: major type and argument in the shortest form (canonical)."""
    m = major << 5
    if value < 24:
        out.append(m | value)
    elif value < 0x100:
        out += bytes((m | 24, value))
    elif value < 0x10000:
        out.append(m | 25)
        out += value.to_bytes(2, "big")
    elif value < 0x1_0000_0000:
        out.append(m | 26)
        out += value.to_bytes(4, "big")
    else:
        out.append(m | 27)
        out += value.to_bytes(8, "big")


def _cbor_text(out: bytearray, s: str) -> None:
    b = s.encode("utf-8")
    _cbor_head(out, 3, len(b))
    out += b


def block_cbor(parent: bytes, tokens: List[int], extra_keys: Optional[List[str]]) -> bytes:
    """The canonical CBOR of [parent, [tokens...], extra_keys or null] (what vLLM's sha256_cbor hashes for a block)."""
    out = bytearray()
    _cbor_head(out, 4, 3)
    _cbor_head(out, 2, len(parent))
    out += parent
    _cbor_head(out, 4, len(tokens))
    for t in tokens:
        if t < 0:
            raise ValueError(f"token ids are >= 0, got {t}")
        _cbor_head(out, 0, t)
    if extra_keys is None:
        out.append(0xF6)
    else:
        _cbor_head(out, 4, len(extra_keys))
        for k in extra_keys:
            _cbor_text(out, k)
    return bytes(out)


def root_hash(seed: str) -> bytes:
    """The first block's parent: SHA-256 of the CBOR text string ``seed``."""
    out = bytearray()
    _cbor_text(out, seed)
    return hashlib.sha256(bytes(out)).digest()


def block_hashes(seed: str, block_tokens: int, tokens: List[int], extra_keys: Optional[List[str]] = None) -> List[bytes]:
    """The hashes of every full block of ``tokens``, chained from :func:`root_hash` (the same as the Java BlockHashes)."""
    out: List[bytes] = []
    parent = root_hash(seed)
    for start in range(0, len(tokens) - block_tokens + 1, block_tokens):
        parent = hashlib.sha256(block_cbor(parent, tokens[start:start + block_tokens], extra_keys)).digest()
        out.append(parent)
    return out
