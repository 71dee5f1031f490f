"""The reference engine on a real transformer: the simulated engine's OpenAI-compatible server and P/D flow (prefill /
decode / colocated per request, streaming or not, the same facts, leases, heartbeats and releases) over a transformers
causal LM whose KV cache lives in paged pools in GPU memory, registered with its transfer worker by CUDA IPC handle,
so the worker's ``cuda`` transport copies pages straight from the prefill engine's pool into the decode engine's.

    python3 -m orbitkv_pd.real_engine --config engine.properties

Keys: ``engine.id``, ``engine.role``, ``engine.api.path`` (the worker's socket; without it: colocated only),
``engine.instance-epoch``, ``engine.model`` (served name), ``engine.http.host``, ``engine.http.port``,
``engine.max-prompt-tokens``, ``engine.lease.duration``, ``engine.lease.heartbeat``, ``engine.kv.timeout``,
``engine.pool.blocks`` (16-token pages per layer and part, default 4096), and the model:
``engine.model.path`` (a local checkpoint directory; never a hub download) or ``engine.model.shape`` (``8b``, ``1b``,
``tiny``: a Llama-3-shaped config with random weights) with ``engine.model.seed``, ``engine.model.device`` (CUDA
device index) and ``engine.model.dtype`` (``bf16``, ``fp16``); layer by layer: ``engine.layerwise.group`` (layers per progress report,
default 4; 0: the prefill is reported whole), ``engine.layerwise.min-tokens`` (shorter prompts are reported whole;
default 2048) and ``engine.layerwise.skip-prefix`` (requests reported whole, to compare);
for fault tests ``engine.fault.stall-prefill-prefix``, ``engine.fault.no-heartbeat-prefix`` and
``engine.fault.fail-prefill-midway-prefix`` (a prefill that fails after half its layers were reported). Docs: docs/gpu.md
("The real-model run").

Decode continues from the token the prefill sampled (``KvReady.first_token``); without one it recomputes the last
prompt token from the KV of the others, as vLLM's decode does. Needs PyTorch, transformers and a CUDA GPU.
"""

from __future__ import annotations

import logging
import os
import queue
import sys
import threading
from concurrent.futures import Future
from types import SimpleNamespace
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Tuple

from .protocol import Layout
from . import engine_model as em
from .sim_engine import Job, SimEngine, common_settings, run_engine

log = logging.getLogger("orbitkv_pd.real_engine")


@dataclass
class RealEngineConfig:
    engine_id: str
    role: str
    api_path: Optional[str]
    instance_epoch: int
    model: str
    host: str
    port: int
    max_prompt_tokens: int
    lease_s: float
    heartbeat_s: float
    kv_timeout_s: float
    num_blocks: int
    model_path: Optional[str]
    shape: str
    seed: int
    device: int
    dtype: str
    stall_prefix: Optional[str] = None
    no_heartbeat_prefix: Optional[str] = None
    fail_prefix: Optional[str] = None
    advertised_url: Optional[str] = None
    lease_margin_s: float = 3.0
    kv_confirm_s: float = 6.0
    kv_wait_s: float = 30.0
    # engine.vllm-connector: the P/D flow through the vLLM connector, called as vLLM calls it (RealStepper), on KV tensors
    # in vLLM's layout registered by register_kv_caches
    vllm_connector: bool = False
    kv_load_failure_policy: str = "recompute"
    report_interval_s: float = 0.001
    recompute_last_token: bool = False
    layer_group: int = 4
    layerwise_min_tokens: int = 2048
    layerwise_skip_prefix: Optional[str] = None
    fail_midway_prefix: Optional[str] = None
    prefix_cache: bool = False
    prefix_cache_seed: str = "orbitkv"
    prefix_scope: Optional[str] = None
    prefix_read_only: Optional[str] = None

    KEYS = ("engine.id", "engine.role", "engine.api.path", "engine.instance-epoch", "engine.model", "engine.http.host", "engine.http.port", "engine.http.advertised-url",
            "engine.max-prompt-tokens", "engine.lease.duration", "engine.lease.heartbeat", "engine.lease.margin", "engine.kv.timeout", "engine.kv.confirm-timeout", "engine.pool.blocks",
            "engine.model.path", "engine.model.shape", "engine.model.seed", "engine.model.device", "engine.model.dtype",
            "engine.fault.stall-prefill-prefix", "engine.fault.no-heartbeat-prefix", "engine.fault.fail-prefill-prefix", "engine.kv-wait",
            "engine.layerwise.group", "engine.layerwise.min-tokens", "engine.layerwise.skip-prefix", "engine.fault.fail-prefill-midway-prefix",
            "engine.prefix-cache.enabled", "engine.prefix-cache.seed", "engine.prefix-cache.scope-prefix", "engine.prefix-cache.read-only-prefix",
            "engine.vllm-connector", "engine.vllm.kv-load-failure-policy", "engine.decode.recompute-last-token")

    @classmethod
    def from_properties(cls, p: Dict[str, str]) -> "RealEngineConfig":
        common = common_settings(p, cls.KEYS, "the real engine")
        from .real_model import SHAPES
        shape = p.get("engine.model.shape", "8b").lower()
        if shape not in SHAPES:
            raise ValueError(f"engine.model.shape: must be one of {list(SHAPES)}, got '{shape}'")
        path = p.get("engine.model.path") or None
        if path and not os.path.isdir(path):
            raise ValueError(f"engine.model.path: not a directory: {path} (a local checkpoint; nothing is downloaded)")
        dtype = p.get("engine.model.dtype", "bf16").lower()
        if dtype not in ("bf16", "fp16"):
            raise ValueError(f"engine.model.dtype: must be bf16 or fp16, got '{dtype}'")
        blocks = int(p.get("engine.pool.blocks", "4096"))
        if blocks < 1:
            raise ValueError(f"engine.pool.blocks: must be >= 1, got {blocks}")
        group = int(p.get("engine.layerwise.group", "4"))
        if group < 0:
            raise ValueError(f"engine.layerwise.group: layers per progress report, >= 1, or 0 for none, got {group}")
        via = _bool(p, "engine.vllm-connector", False)
        if via and not common["api_path"]:
            raise ValueError("engine.vllm-connector: needs engine.api.path (the connector joins the engine's transfer worker)")
        policy = p.get("engine.vllm.kv-load-failure-policy", "recompute").strip().lower()
        if policy not in ("recompute", "fail"):
            raise ValueError(f"engine.vllm.kv-load-failure-policy: recompute or fail (vLLM's kv_load_failure_policy), got '{policy}'")
        if via and _bool(p, "engine.prefix-cache.enabled", False):
            # the connector's scheduler half would have to claim the cached tokens (get_num_new_matched_tokens) so that the
            # order skips their pages: not built, and a push would overwrite pages other requests share
            raise ValueError("engine.prefix-cache.enabled: not with engine.vllm-connector (the connector does not announce cached pages)")
        min_tokens = int(p.get("engine.layerwise.min-tokens", "2048"))
        if min_tokens < 0:
            raise ValueError(f"engine.layerwise.min-tokens: prompt tokens, >= 0, got {min_tokens}")
        return cls(**common, model=p.get("engine.model", "orbitkv-real-" + (os.path.basename(path.rstrip("/")) if path else shape)),
                   num_blocks=blocks, model_path=path, shape=shape, seed=int(p.get("engine.model.seed", "1234")),
                   device=int(p.get("engine.model.device", "0")), dtype=dtype, layer_group=group, layerwise_min_tokens=min_tokens,
                   layerwise_skip_prefix=p.get("engine.layerwise.skip-prefix") or None,
                   fail_midway_prefix=p.get("engine.fault.fail-prefill-midway-prefix") or None,
                   prefix_cache=_bool(p, "engine.prefix-cache.enabled", False), prefix_cache_seed=p.get("engine.prefix-cache.seed", "orbitkv"),
                   prefix_scope=p.get("engine.prefix-cache.scope-prefix") or None,
                   prefix_read_only=p.get("engine.prefix-cache.read-only-prefix") or None,
                   vllm_connector=via, kv_load_failure_policy=policy,
                   recompute_last_token=_bool(p, "engine.decode.recompute-last-token", via))


def _bool(p: Dict[str, str], key: str, default: bool) -> bool:
    v = p.get(key, "true" if default else "false").strip().lower()
    if v not in ("true", "false"):
        raise ValueError(f"{key}: true or false, got '{v}'")
    return v == "true"


class RealBackend:
    """The engine's model backend (see :class:`~orbitkv_pd.sim_engine.SimBackend`) on a real transformer."""

    def __init__(self, config: RealEngineConfig) -> None:
        from .real_model import RealModel, RealModelConfig
        self.model = RealModel(RealModelConfig(shape=config.shape, path=config.model_path, seed=config.seed, device=config.device,
                                               dtype=config.dtype, num_blocks=config.num_blocks,
                                               kv_layout="vllm" if config.vllm_connector else "paged"))
        self.layout: Layout = self.model.layout
        self.step_s = 0.0  # real decode steps take their own time
        self.checks_kv = False  # a real engine never checks received KV (the answers are compared instead)
        self.kind = "python-transformers"
        # ORBITKV_KV_DIGEST=1: log a digest of each request's pages at prefill and before decode (diagnosing).
        self.digest = os.environ.get("ORBITKV_KV_DIGEST", "0") == "1"
        self.config = config
        self.report_to: Optional[Any] = None  # the engine's worker client, set by the engine (layer reports)
        # engine.vllm-connector: vLLM's engine loop (the connector's calls in its order) and what the call sites set
        self.stepper: Optional[RealStepper] = RealStepper() if config.vllm_connector else None
        self.on_filled: Optional[Any] = None
        self.report_progress = True
        self.block_hash = ("sha256_cbor", config.prefix_cache_seed) if config.prefix_cache else None
        # A layer report made after its CUDA event waits for the GIL while the request thread launches the next layers'
        # kernels: the default switch interval (5 ms) would delay it by up to that much.
        sys.setswitchinterval(0.0005)

    def pool_spec(self) -> Any:
        return self.model.pool.spec

    def tokenize(self, prompt: str) -> List[int]:
        return self.model.tokenize(prompt)

    def blocks_for(self, tokens: int) -> int:
        return self.model.blocks_for(tokens)

    def token_text(self, token: int) -> str:
        return self.model.token_text(token)

    @property
    def prefix_pages(self) -> bool:
        """engine.prefix-cache.enabled: the engine's pages keep their KV for later prompts (SimEngine's PrefixBlockPool)."""
        return self.config.prefix_cache

    def page_hashes(self, job: Job) -> Optional[Tuple[List[bytes], int, bool]]:
        """For the prefix cache (docs/gpu.md, "The prefix cache"): the hashes of the prompt's full blocks (vLLM's
        ``sha256_cbor`` chain), how many of them a lookup may reuse (the last prompt token is always computed), and whether
        the request caches its blocks once written; None when the cache does not apply to it
        (``engine.prefix-cache.scope-prefix``: only requests of that id prefix use it; ``engine.prefix-cache.read-only-prefix``:
        those look up without adding — a run comparing engines keeps their caches alike)."""
        c = self.config
        if not c.prefix_cache or (c.prefix_scope and not job.rid.startswith(c.prefix_scope)):
            return None
        bs = self.layout.block_size_tokens
        hashes = em.block_hashes(c.prefix_cache_seed, bs, job.tokens)
        return hashes, (len(job.tokens) - 1) // bs, not (c.prefix_read_only and job.rid.startswith(c.prefix_read_only))

    def vllm_kv_caches(self, names: List[str]) -> Dict[str, Any]:
        """What ``register_kv_caches`` gets (engine.vllm-connector): layer name → the layer's tensor in vLLM's layout."""
        return dict(zip(names, self.model.pool.tensors))

    def prefill(self, job: Job, blocks: List[int], mode: str) -> int:
        """The prompt's KV into ``blocks``. A prefill for another engine reports its layers as they land in the pages
        (``prefill_progress`` every ``engine.layerwise.group`` layers, after the CUDA event of those layers), so the
        worker pushes them while the later layers compute; ``engine.layerwise.skip-prefix`` requests are reported whole
        (a run comparing both ways)."""
        c = self.config
        fail_after = 0
        if c.fail_midway_prefix and job.rid.startswith(c.fail_midway_prefix) and mode == "prefill":
            fail_after = max(1, self.layout.num_layers // 2)
        if self.stepper is not None:
            return self._prefill_in_step(job, blocks, mode, fail_after)
        client = self.report_to() if self.report_to is not None and mode == "prefill" and c.layer_group > 0 else None
        on_layers = None
        # Shorter prompts are prefilled whole: their forward pass is bound by the host's kernel launches, which the hooks
        # lengthen (measured on an H100, 8B shape: prefill compute p50 57 vs 49 ms at 128 tokens, 63 vs 57 ms at 1K; equal
        # at 4K and beyond, docs/bench/real-model.md), more than the push they would hide (under 0.5 ms there).
        if client is not None and hasattr(client, "prefill_progress") and len(job.tokens) >= c.layerwise_min_tokens \
                and not (c.layerwise_skip_prefix and job.rid.startswith(c.layerwise_skip_prefix)):
            n, first_report = len(job.tokens), [True]

            def on_layers(layers: int) -> None:
                # prompt tokens [0, n) computed in layers [0, layers); the first report names the pages
                client.prefill_progress(job.rid, blocks if first_report[0] else None, n, 0, n, layers)
                first_report[0] = False
        if fail_after:
            if on_layers is None:
                on_layers = lambda layers: None  # noqa: E731 — the hooks still run, so the failure comes mid-way
        first = self.model.prefill(job.tokens, blocks, on_layers=on_layers, group=c.layer_group or 4, fail_after=fail_after,
                                   cached=job.cached_blocks)
        if self.digest:
            log.info("kv-digest %s %s %s first=%d", job.rid, mode, self.model.kv_digest(len(job.tokens), blocks), first)
        return first

    def _prefill_in_step(self, job: Job, blocks: List[int], mode: str, fail_after: int) -> int:
        """Through the vLLM connector: the forward pass in a step of the engine loop, its layers saved
        (``save_kv_layer``, by the call sites' ``layers_done``) as each is enqueued, as vLLM's attention layers call it."""
        bs = self.layout.block_size_tokens
        start = job.cached_blocks * bs

        def run(layer_done: Any) -> int:
            def enqueued(n: int) -> None:
                if self.on_filled is not None:
                    self.on_filled(job.rid, n)  # the layer's pages are written (enqueued: the connector waits for the GPU)
                layer_done(n)
            return self.model.prefill(job.tokens, blocks, cached=job.cached_blocks, fail_after=fail_after,
                                      on_layer_enqueued=enqueued if mode == "prefill" or fail_after else None)
        assert self.stepper is not None
        return self.stepper.run_prefill(run, job.rid, start, len(job.tokens) - start)

    def tokens(self, job: Job, blocks: List[int], first: Optional[int], max_tokens: int) -> Iterator[int]:
        if self.digest:
            log.info("kv-digest %s decode %s first=%s", job.rid, self.model.kv_digest(len(job.tokens), blocks), first)
        # engine.decode.recompute-last-token (on with the vLLM connector): vLLM's decode recomputes the prompt's last token over
        # the KV of the others; colocated does the same then, so both answers come from the same arithmetic
        return self.model.decode(job.tokens, blocks, None if self.config.recompute_last_token else first, max_tokens)

    def verify(self, blocks: List[int], tokens: List[int]) -> Optional[str]:
        return None

    def close(self) -> None:
        if self.stepper is not None:
            self.stepper.close()
        self.model.close()


class RealStepper:
    """vLLM's engine loop for the reference engine through the vLLM connector (the call sites, orbitkv_pd.vllm_sim, take
    its ``hooks``): one prefill per step — ``begin_step`` (the scheduler's output, the connector's metadata), the forward
    pass on this thread with each layer saved as it is enqueued, ``end_step`` (``wait_for_save``, ``get_finished``) — and
    steps without a forward pass whenever the connector has work (a load or a send to finish, a release). Decode steps
    stay on the requests' threads (this engine does not batch)."""

    def __init__(self, poll_s: float = 0.01) -> None:
        self.hooks: Any = None
        self.poll_s = poll_s
        self._q: "queue.Queue[Any]" = queue.Queue()
        self._wake = threading.Event()
        self._closed = False
        threading.Thread(target=self._run, name="engine-loop", daemon=True).start()

    def wake(self) -> None:
        self._wake.set()

    def run_prefill(self, compute: Any, rid: str, start: int, tokens: int) -> int:
        """Runs ``compute(layer_done)`` in a step whose plan prefills ``tokens`` tokens of ``rid`` from ``start``; its result."""
        done: "Future[int]" = Future()
        self._q.put((compute, rid, start, tokens, done))
        self.wake()
        return done.result()

    def close(self) -> None:
        self._closed = True
        self.wake()
        while True:  # what never ran fails, rather than leave its request waiting
            try:
                item = self._q.get_nowait()
            except queue.Empty:
                return
            item[-1].set_exception(RuntimeError("the engine closed before the prefill ran"))

    def _run(self) -> None:
        while not self._closed:
            self._wake.wait(self.poll_s)
            self._wake.clear()
            try:
                while True:
                    try:
                        item = self._q.get_nowait()
                    except queue.Empty:
                        item = None
                    if item is None:
                        hooks = self.hooks
                        if hooks is not None and hooks.wants_step():
                            hooks.begin_step(None)
                            hooks.end_step(None)
                        break
                    self._step(*item)
            except Exception:  # the loop goes on: a failed step fails its request only
                log.exception("engine loop step failed")

    def _step(self, compute: Any, rid: str, start: int, tokens: int, done: "Future[int]") -> None:
        hooks = self.hooks
        plan = SimpleNamespace(prefills=[SimpleNamespace(id=rid, start=start, tokens=tokens)])
        began = False
        try:
            if hooks is not None:
                hooks.begin_step(plan)
                began = True
            saving = hooks is not None and hooks.saves()
            done.set_result(compute(hooks.layers_done if saving else (lambda n: None)))
        except BaseException as e:
            if began and hasattr(hooks, "step_failed"):
                hooks.step_failed()  # the layers not computed are never saved (nor waited for)
            done.set_exception(e)
        finally:
            if began:
                hooks.end_step(plan)


def main(argv: Optional[List[str]] = None) -> int:
    return run_engine(argv, "python3 -m orbitkv_pd.real_engine", (__doc__ or "").split("\n\n")[0], RealEngineConfig.from_properties,
                      lambda c: SimEngine(c, RealBackend(c)), "python, transformers")


if __name__ == "__main__":
    sys.exit(main())
