"""``OrbitKVPdConnector``: OrbitKV P/D as a vLLM v1 KV connector (docs/vllm.md), loaded out of tree::

    vllm serve MODEL --kv-transfer-config '{"kv_connector": "OrbitKVPdConnector",
        "kv_connector_module_path": "orbitkv_pd.vllm", "kv_role": "kv_consumer",
        "kv_load_failure_policy": "recompute",
        "kv_connector_extra_config": {"engine_api_path": "/run/orbitkv/decode-0.sock", "engine_id": "decode-0",
                                      "http_url": "http://10.0.0.7:8000"}}'

vLLM makes one connector object per process and role: ``SCHEDULER`` in its EngineCore, ``WORKER`` in each GPU worker.
This class is both, delegating to :class:`~orbitkv_pd.vllm_scheduler.SchedulerSide` (bookkeeping: which requests hand
off, which pages, the facts) or :class:`~orbitkv_pd.vllm_worker.WorkerSide` (the engine API connection: facts, leases,
layer-by-layer reports, decisions). The scheduler half's facts reach the worker half in the step's connector metadata.

When vLLM is importable the class derives from its ``KVConnectorBase_V1`` (the factory wants a subclass); without vLLM
(this project's machines, its tests and its simulated engine) it stands alone with the same methods and signatures,
checked against the recorded interface of the pinned release by ``tests/test_vllm_contract.py``.
"""

from __future__ import annotations

import logging
from typing import Any, Optional, Set, Tuple

from .vllm_scheduler import OrbitKVPdMetadata, SchedulerSide
from .vllm_worker import WorkerSettings, WorkerSide

log = logging.getLogger("orbitkv_pd.vllm")

try:  # pragma: no cover - only where vLLM is installed
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorBase_V1 as _Base  # type: ignore
except ImportError:
    _Base = object

__all__ = ["OrbitKVPdConnector", "OrbitKVPdMetadata"]

#: vLLM's ``kv_role`` → the role the engine registers with
_ROLES = {"kv_producer": "prefill", "kv_consumer": "decode", "kv_both": "both"}


def _get(obj: Any, *path: str) -> Any:
    for name in path:
        obj = getattr(obj, name, None) if not isinstance(obj, dict) else obj.get(name)
        if obj is None:
            return None
    return obj


class OrbitKVPdConnector(_Base):  # type: ignore[misc, valid-type]
    """vLLM's ``KVConnectorBase_V1`` on OrbitKV P/D: a prefill pushes (its worker writes the KV into the decode engine's
    pages once the decider matched the two), a decode waits for ``kv_ready``; every decision is the decider's, in Kafka."""

    def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any = None) -> None:
        if _Base is not object:  # pragma: no cover - only inside vLLM
            super().__init__(vllm_config, role, kv_cache_config)
        self.role = str(getattr(role, "name", role)).upper()
        if self.role not in ("SCHEDULER", "WORKER"):
            raise ValueError(f"role: SCHEDULER or WORKER, got {role!r}")
        tp = _get(vllm_config, "parallel_config", "tensor_parallel_size") or 1
        if tp != 1:
            raise ValueError(f"tensor_parallel_size {tp}: the OrbitKV connector registers one KV pool per engine (one rank) for now")
        block_size = _get(vllm_config, "cache_config", "block_size")
        if not isinstance(block_size, int) or block_size < 1:
            raise ValueError(f"cache_config.block_size: a positive integer, got {block_size!r}")
        kv_role = _get(vllm_config, "kv_transfer_config", "kv_role") or "kv_both"
        if kv_role not in _ROLES:
            raise ValueError(f"kv_transfer_config.kv_role: one of {sorted(_ROLES)}, got {kv_role!r}")
        extra = _get(vllm_config, "kv_transfer_config", "kv_connector_extra_config") or {}
        served = _get(vllm_config, "model_config", "served_model_name")
        model = served[0] if isinstance(served, (list, tuple)) and served else served or _get(vllm_config, "model_config", "model") or ""
        # Both roles read the settings, so that a mistake fails vLLM's start in the scheduler's process too.
        self.settings = WorkerSettings.from_extra(extra, _ROLES[kv_role], str(model))
        self._scheduler: Optional[SchedulerSide] = SchedulerSide(block_size) if self.role == "SCHEDULER" else None
        num_blocks = _get(kv_cache_config, "num_blocks")
        self._worker: Optional[WorkerSide] = WorkerSide(self.settings, block_size, num_blocks if isinstance(num_blocks, int) else None) \
            if self.role == "WORKER" else None

    # ------------------------------------------------------------------------------------------------ the halves

    @property
    def scheduler_side(self) -> SchedulerSide:
        if self._scheduler is None:
            raise RuntimeError("a scheduler call on the worker's connector: vLLM calls it on the SCHEDULER role's")
        return self._scheduler

    @property
    def worker_side(self) -> WorkerSide:
        if self._worker is None:
            raise RuntimeError("a worker call on the scheduler's connector: vLLM calls it on the WORKER role's")
        return self._worker

    # ------------------------------------------------------------------------------------------------ scheduler

    def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int) -> Tuple[Optional[int], bool]:
        return self.scheduler_side.get_num_new_matched_tokens(request, num_computed_tokens)

    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
        self.scheduler_side.update_state_after_alloc(request, blocks, num_external_tokens)

    def build_connector_meta(self, scheduler_output: Any) -> OrbitKVPdMetadata:
        return self.scheduler_side.build_connector_meta(scheduler_output)

    def request_finished(self, request: Any, block_ids: Any) -> Tuple[bool, Optional[dict]]:
        return self.scheduler_side.request_finished(request, block_ids)

    def update_connector_output(self, connector_output: Any) -> None:
        self.scheduler_side.update_connector_output(connector_output)

    def has_pending_push_work(self) -> bool:
        return self.scheduler_side.has_pending_push_work()

    # ------------------------------------------------------------------------------------------------ worker

    def register_kv_caches(self, kv_caches: Any) -> None:
        self.worker_side.register_kv_caches(kv_caches)

    def bind_connector_metadata(self, connector_metadata: Any) -> None:
        if _Base is not object:  # pragma: no cover - vLLM's base keeps it too
            super().bind_connector_metadata(connector_metadata)
        self.worker_side.bind_connector_metadata(connector_metadata)

    def clear_connector_metadata(self) -> None:
        if _Base is not object:  # pragma: no cover
            super().clear_connector_metadata()
        self.worker_side.clear_connector_metadata()

    def has_connector_metadata(self) -> bool:
        return self.worker_side.has_connector_metadata()

    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        self.worker_side.start_load_kv(forward_context, **kwargs)

    def wait_for_layer_load(self, layer_name: str) -> None:
        self.worker_side.wait_for_layer_load(layer_name)

    def save_kv_layer(self, layer_name: str, kv_layer: Any, attn_metadata: Any, **kwargs: Any) -> None:
        self.worker_side.save_kv_layer(layer_name, kv_layer, attn_metadata, **kwargs)

    def wait_for_save(self) -> None:
        self.worker_side.wait_for_save()

    def get_finished(self, finished_req_ids: Set[str]) -> Tuple[Optional[Set[str]], Optional[Set[str]]]:
        return self.worker_side.get_finished(finished_req_ids)

    def get_block_ids_with_load_errors(self) -> Set[int]:
        return self.worker_side.get_block_ids_with_load_errors()

    def shutdown(self) -> None:
        if self._worker is not None:
            self._worker.shutdown()
