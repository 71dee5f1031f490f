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
device index) and ``engine.model.dtype`` (``bf16``, ``fp16``); for fault tests ``engine.fault.stall-prefill-prefix`` and
``engine.fault.no-heartbeat-prefix``. Docs: docs/gpu.md ("The real-model run").

Decode continues from the token the prefill sampled (``KvReady.first_token``); without one it recomputes the last
prompt token from the KV of the others, as vLLM's decode does. Needs PyTorch, transformers and a CUDA GPU.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import signal
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional

from .protocol import ApiError, Layout
from .sim_engine import Job, SimEngine, parse_duration, read_properties

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

    KEYS = ("engine.id", "engine.role", "engine.api.path", "engine.instance-epoch", "engine.model", "engine.http.host", "engine.http.port",
            "engine.max-prompt-tokens", "engine.lease.duration", "engine.lease.heartbeat", "engine.kv.timeout", "engine.pool.blocks",
            "engine.model.path", "engine.model.shape", "engine.model.seed", "engine.model.device", "engine.model.dtype",
            "engine.fault.stall-prefill-prefix", "engine.fault.no-heartbeat-prefix")

    @classmethod
    def from_properties(cls, p: Dict[str, str]) -> "RealEngineConfig":
        unknown = sorted(k for k in p if k not in cls.KEYS)
        if unknown:
            raise ValueError(f"unknown keys {unknown}: the real engine reads {list(cls.KEYS)}")
        engine_id = p.get("engine.id", "")
        if not re.fullmatch(r"[A-Za-z0-9._:-]+", engine_id):
            raise ValueError(f"engine.id: required; letters, digits, '.', '_', ':' and '-' only, got '{engine_id}'")
        role = p.get("engine.role", "both").lower()
        if role not in ("prefill", "decode", "both"):
            raise ValueError(f"engine.role: must be prefill, decode or both, got '{role}'")
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
        return cls(engine_id=engine_id, role=role, api_path=p.get("engine.api.path") or None,
                   instance_epoch=int(p.get("engine.instance-epoch", str(int(time.time() * 1000)))),
                   model=p.get("engine.model", "orbitkv-real-" + (os.path.basename(path.rstrip("/")) if path else shape)),
                   host=p.get("engine.http.host", "127.0.0.1"), port=int(p.get("engine.http.port", "8100")),
                   max_prompt_tokens=int(p.get("engine.max-prompt-tokens", "32768")),
                   lease_s=parse_duration("engine.lease.duration", p.get("engine.lease.duration", "30s")),
                   heartbeat_s=parse_duration("engine.lease.heartbeat", p.get("engine.lease.heartbeat", "10s")),
                   kv_timeout_s=parse_duration("engine.kv.timeout", p.get("engine.kv.timeout", "60s")),
                   num_blocks=blocks, model_path=path, shape=shape, seed=int(p.get("engine.model.seed", "1234")),
                   device=int(p.get("engine.model.device", "0")), dtype=dtype,
                   stall_prefix=p.get("engine.fault.stall-prefill-prefix") or None,
                   no_heartbeat_prefix=p.get("engine.fault.no-heartbeat-prefix") or None)


class RealBackend:
    """The engine's model backend (see :class:`~orbitkv_pd.sim_engine.SimBackend`) on a real transformer."""

    def __init__(self, config: RealEngineConfig) -> None:
        from .real_model import RealModel, RealModelConfig
        self.model = RealModel(RealModelConfig(shape=config.shape, path=config.model_path, seed=config.seed, device=config.device,
                                               dtype=config.dtype, num_blocks=config.num_blocks))
        self.layout: Layout = self.model.layout
        self.step_s = 0.0  # real decode steps take their own time
        self.checks_kv = False  # a real engine never checks received KV (the answers are compared instead)
        self.kind = "python-transformers"
        # ORBITKV_KV_DIGEST=1: log a digest of each request's pages at prefill and before decode (diagnosing).
        self.digest = os.environ.get("ORBITKV_KV_DIGEST", "0") == "1"

    def pool_spec(self) -> Any:
        return self.model.pool.spec

    def tokenize(self, prompt: str) -> List[int]:
        return self.model.tokenize(prompt)

    def blocks_for(self, tokens: int) -> int:
        return self.model.blocks_for(tokens)

    def token_text(self, token: int) -> str:
        return self.model.token_text(token)

    def prefill(self, job: Job, blocks: List[int], mode: str) -> int:
        first = self.model.prefill(job.tokens, blocks)
        if self.digest:
            log.info("kv-digest %s %s %s first=%d", job.rid, mode, self.model.kv_digest(len(job.tokens), blocks), first)
        return first

    def tokens(self, job: Job, blocks: List[int], first: Optional[int], max_tokens: int) -> Iterator[int]:
        if self.digest:
            log.info("kv-digest %s decode %s first=%s", job.rid, self.model.kv_digest(len(job.tokens), blocks), first)
        return self.model.decode(job.tokens, blocks, first, max_tokens)

    def verify(self, blocks: List[int], tokens: List[int]) -> Optional[str]:
        return None

    def close(self) -> None:
        self.model.close()


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m orbitkv_pd.real_engine", description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True, help="properties file with the engine.* keys")
    ap.add_argument("--parent-pid", type=int, default=0, help="exit when this process is gone (a launcher that died)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)-5s %(name)s %(message)s")
    try:
        config = RealEngineConfig.from_properties(read_properties(args.config))
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
        backend = RealBackend(config)
    except Exception as e:  # no GPU, no torch, a bad checkpoint: say which, and stop
        log.exception("cannot build the model")
        print(f"engine: cannot build the model: {e}", file=sys.stderr)
        return 1
    engine = SimEngine(config, backend)
    try:
        engine.start()
    except (ApiError, OSError) as e:
        print(f"engine: cannot join through the engine API: {e}", file=sys.stderr)
        return 1
    assert engine.server is not None
    print(f"engine running: id={config.engine_id} role={config.role} url=http://{config.host}:{engine.server.server_address[1]}"
          f" model={backend.model.name} (python, transformers)", flush=True)
    stop.wait()
    engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
