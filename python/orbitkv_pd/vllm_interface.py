"""vLLM's ``KVConnectorBase_V1`` as the release docs/vllm.md pins defines it, recorded by reading
``vllm/distributed/kv_transfer/kv_connector/v1/base.py`` at upstream commit ``6adad087`` (2026-08-14): each method's
parameters in order (``self`` left out; ``**kwargs`` as written), whether vLLM declares it abstract, and the line. Our own
record of an interface, not vLLM's code: the contract test (``tests/test_vllm_contract.py``) fails when the connector's
methods differ from it, and a new pin means re-reading the file and updating this record.
"""

from __future__ import annotations

from typing import Dict, NamedTuple, Tuple

PINNED_COMMIT = "6adad08767583f52eb4d2122111af0bf638ed5e6"
PINNED_FILE = "vllm/distributed/kv_transfer/kv_connector/v1/base.py"


class Method(NamedTuple):
    params: Tuple[str, ...]
    abstract: bool
    line: int


#: ``__init__(self, vllm_config, role, kv_cache_config)``: the factory passes all three positionally and refuses a class
#: without a ``kv_cache_config`` keyword (vllm/distributed/kv_transfer/kv_connector/factory.py).
CONSTRUCTOR = ("vllm_config", "role", "kv_cache_config")

#: The scheduler process's calls (EngineCore, ``role=SCHEDULER``).
SCHEDULER: Dict[str, Method] = {
    "bind_gpu_block_pool": Method(("gpu_block_pool",), False, 464),
    "get_num_new_matched_tokens": Method(("request", "num_computed_tokens"), True, 475),
    "update_state_after_alloc": Method(("request", "blocks", "num_external_tokens"), True, 510),
    "build_connector_meta": Method(("scheduler_output",), True, 536),
    "on_new_request": Method(("request",), False, 550),
    "update_connector_output": Method(("connector_output",), False, 558),
    "request_finished": Method(("request", "block_ids"), False, 568),
    "take_events": Method((), False, 589),
    "has_pending_push_work": Method((), False, 598),
    "get_finished_count": Method((), False, 651),
    "set_xfer_handshake_metadata": Method(("metadata",), False, 674),
    "reset_cache": Method((), False, 717),
}

#: Each GPU worker process's calls (``role=WORKER``).
WORKER: Dict[str, Method] = {
    "bind_connector_metadata": Method(("connector_metadata",), False, 232),
    "clear_connector_metadata": Method((), False, 244),
    "has_connector_metadata": Method((), False, 264),
    "register_kv_caches": Method(("kv_caches",), False, 272),
    "register_cross_layers_kv_cache": Method(("kv_cache", "attn_backend"), False, 282),
    "set_host_xfer_buffer_ops": Method(("copy_operation",), False, 299),
    "handle_preemptions": Method(("kv_connector_metadata",), False, 306),
    "start_load_kv": Method(("forward_context", "**kwargs"), True, 314),
    "wait_for_layer_load": Method(("layer_name",), True, 332),
    "save_kv_layer": Method(("layer_name", "kv_layer", "attn_metadata", "**kwargs"), True, 346),
    "wait_for_save": Method((), True, 368),
    "get_finished": Method(("finished_req_ids",), False, 378),
    "get_block_ids_with_load_errors": Method((), False, 396),
    "shutdown": Method((), False, 416),
    "get_kv_connector_stats": Method((), False, 424),
    "get_kv_connector_kv_cache_events": Method((), False, 430),
    "get_handshake_metadata": Method((), False, 438),
    "build_connector_worker_meta": Method((), False, 450),
}
