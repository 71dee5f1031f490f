"""The worker's local engine API, version 1: framing, messages and errors (docs/engine-api.md is the specification).

A frame is a 4-byte big-endian length and that many bytes of one UTF-8 JSON object. This module has no I/O of its
own beyond reading and writing frames on a socket; :mod:`orbitkv_pd.client` is the client built on it.
"""

from __future__ import annotations

import base64
import json
import socket
import struct
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

VERSION = 1
DEFAULT_MAX_FRAME_BYTES = 1 << 20

# client -> worker
HELLO = "hello"
PREFILL_COMPLETED = "prefill_completed"
PREFILL_FAILED = "prefill_failed"
DECODE_READY = "decode_ready"
DECODE_REJECTED = "decode_rejected"
HEARTBEAT = "heartbeat"
DECODE_COMPLETED = "decode_completed"
CANCEL = "cancel"
KV_EVENTS = "kv_events"
PREFILL_PROGRESS = "prefill_progress"
PING = "ping"
BYE = "bye"
# worker -> client
WELCOME = "welcome"
ACK = "ack"
ERROR = "error"
PONG = "pong"
DECISION = "decision"

# decision kinds
KV_READY = "kv_ready"
RELEASE = "release"
RECOMPUTE = "recompute"
OUTCOME = "outcome"

# error codes (see ApiException on the worker side)
BAD_FRAME = "bad_frame"
TOO_LARGE = "too_large"
BAD_REQUEST = "bad_request"
UNKNOWN_OP = "unknown_op"
UNSUPPORTED_VERSION = "unsupported_version"
NOT_REGISTERED = "not_registered"
WRONG_ENGINE = "wrong_engine"
ENGINE_TAKEN = "engine_taken"
FENCED = "fenced"
POOL = "pool"
UNAVAILABLE = "unavailable"
FATAL_CODES = frozenset({BAD_FRAME, TOO_LARGE, FENCED, ENGINE_TAKEN, WRONG_ENGINE, UNSUPPORTED_VERSION})

_HEADER = struct.Struct(">I")


class ApiError(Exception):
    """What the worker refused: a stable ``code``, the JSON ``field`` that was wrong (or None) and a message."""

    def __init__(self, code: str, message: str, field: Optional[str] = None, min_instance_epoch: int = 0) -> None:
        super().__init__(message)
        self.code = code
        self.field = field
        self.message = message
        # A fenced hello of a new instance older than the engine's last one: the smallest instance epoch the worker takes.
        self.min_instance_epoch = min_instance_epoch

    @property
    def fatal(self) -> bool:
        """Whether the connection ended with this error (the stream broke, or this client no longer counts)."""
        return self.code in FATAL_CODES

    @classmethod
    def from_frame(cls, m: Dict[str, Any]) -> "ApiError":
        return cls(str(m.get("code", "unknown")), str(m.get("message", "")), m.get("field"), int(m.get("min_instance_epoch") or 0))

    def __repr__(self) -> str:
        return f"ApiError(code={self.code!r}, field={self.field!r}, message={self.message!r})"


class ConnectionClosed(Exception):
    """The stream ended (cleanly between frames, or inside one)."""


def encode(message: Dict[str, Any]) -> bytes:
    """One frame carrying ``message``."""
    body = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return _HEADER.pack(len(body)) + body


def _read_exactly(sock: socket.socket, n: int, may_end: bool) -> Optional[bytes]:
    chunks = []
    got = 0
    while got < n:
        b = sock.recv(n - got)
        if not b:
            if may_end and got == 0:
                return None
            raise ConnectionClosed(f"stream ended inside a frame ({got} of {n} bytes)")
        chunks.append(b)
        got += len(b)
    return b"".join(chunks)


def read_frame(sock: socket.socket, max_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> Optional[Dict[str, Any]]:
    """Reads one frame; None at a clean end of stream. Raises ApiError for a frame that breaks the stream."""
    header = _read_exactly(sock, 4, True)
    if header is None:
        return None
    (length,) = _HEADER.unpack(header)
    if length == 0:
        raise ApiError(BAD_FRAME, "frame length 0")
    if length > max_bytes:
        raise ApiError(TOO_LARGE, f"frame of {length} bytes: the limit is {max_bytes}")
    body = _read_exactly(sock, length, False)
    try:
        m = json.loads(body.decode("utf-8")) if body is not None else None
    except (UnicodeDecodeError, ValueError) as e:
        raise ApiError(BAD_FRAME, f"frame body is not JSON: {e}") from e
    if not isinstance(m, dict):
        raise ApiError(BAD_FRAME, "frame body must be one JSON object")
    return m


# ---------------------------------------------------------------------------------------------------- registration


@dataclass(frozen=True)
class Layout:
    """The engine's KV layout: one region per layer and part (K and V when ``kv_split`` is separate), each
    ``num_blocks`` pages of ``page_bytes``."""

    num_layers: int
    num_blocks: int
    block_size_tokens: int = 16
    num_kv_heads: int = 8
    head_dim: int = 128
    dtype: str = "bf16"
    kv_split: str = "separate"
    page_bytes: Optional[int] = None
    tp_rank: int = 0
    tp_size: int = 1

    DTYPE_BYTES = {"fp16": 2, "bf16": 2, "fp32": 4, "fp8_e4m3": 1, "fp8_e5m2": 1, "int8": 1}

    @property
    def page(self) -> int:
        if self.page_bytes is not None:
            return self.page_bytes
        per = self.block_size_tokens * self.num_kv_heads * self.head_dim * self.DTYPE_BYTES[self.dtype]
        return per * (2 if self.kv_split == "fused" else 1)

    @property
    def parts_per_layer(self) -> int:
        return 2 if self.kv_split == "separate" else 1

    @property
    def region_count(self) -> int:
        return self.num_layers * self.parts_per_layer

    @property
    def region_bytes(self) -> int:
        return self.num_blocks * self.page

    def part_name(self, region: int) -> str:
        if self.kv_split != "separate":
            return "KV"
        return "K" if region % 2 == 0 else "V"

    def to_json(self) -> Dict[str, Any]:
        return {
            "num_layers": self.num_layers, "kv_split": self.kv_split, "block_size_tokens": self.block_size_tokens,
            "num_kv_heads": self.num_kv_heads, "head_dim": self.head_dim, "dtype": self.dtype, "page_bytes": self.page,
            "num_blocks": self.num_blocks, "tp_rank": self.tp_rank, "tp_size": self.tp_size,
        }


@dataclass(frozen=True)
class ShmPool:
    """A pool in a shared-memory file both the engine and its worker map (e.g. under /dev/shm)."""

    path: str

    def to_json(self) -> Dict[str, Any]:
        return {"kind": "shm", "path": self.path}


@dataclass(frozen=True)
class CudaIpcRegion:
    layer: int
    part: str
    length_bytes: int
    ipc_handle: bytes  # the 64 bytes of cudaIpcMemHandle_t


@dataclass(frozen=True)
class CudaIpcPool:
    """Device memory the worker opens by CUDA IPC handle: one handle per region, layer-major."""

    regions: Sequence[CudaIpcRegion]
    device: int = 0

    def to_json(self) -> Dict[str, Any]:
        return {"kind": "cuda_ipc", "device": self.device, "regions": [
            {"layer": r.layer, "part": r.part, "length_bytes": r.length_bytes,
             "ipc_handle": base64.b64encode(r.ipc_handle).decode("ascii")} for r in self.regions]}


@dataclass(frozen=True)
class Registration:
    """Who the engine is and where its KV pages are (the hello)."""

    engine_id: str
    instance_epoch: int
    role: str  # prefill | decode | both
    layout: Layout
    pool: Optional[Any] = None  # ShmPool | CudaIpcPool | None (the worker's configured pool)
    model: str = ""
    http_url: str = ""
    # How the engine hashes its prefix-cache blocks, e.g. ("sha256_cbor", seed): announced in its registration so that a
    # router hashes prompts the same way (docs/routing.md); None: it does not say.
    block_hash: Optional[Tuple[str, str]] = None

    def hello(self, resume: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        m: Dict[str, Any] = {
            "op": HELLO, "version": VERSION, "engine_id": self.engine_id, "instance_epoch": self.instance_epoch,
            "role": self.role, "model": self.model, "http_url": self.http_url, "layout": self.layout.to_json(),
        }
        if self.pool is not None:
            m["pool"] = self.pool.to_json()
        if resume is not None:
            m["resume"] = resume
        if self.block_hash is not None:
            m["block_hash"] = {"algorithm": self.block_hash[0], "seed": self.block_hash[1]}
        return m


# ---------------------------------------------------------------------------------------------------- decisions


@dataclass(frozen=True)
class Decision:
    """One decision for this engine. ``kind`` is kv_ready, release, recompute or outcome; ``fields`` holds the rest
    (order_id and bytes of a kv_ready; side, blocks as [start, count] runs, lease_id, lease_epoch and reason of a
    release; reason of a recompute; outcome, reason, attempts of an outcome)."""

    seq: int
    decision_id: str
    request_id: str
    kind: str
    fields: Dict[str, Any] = field(default_factory=dict)
    traceparent: Optional[str] = None
    timing: Optional[str] = None
    worker_us: int = 0
    received_us: int = 0

    @classmethod
    def from_frame(cls, m: Dict[str, Any], received_us: int) -> "Decision":
        known = {"op", "seq", "decision_id", "request_id", "kind", "traceparent", "timing", "worker_us"}
        return cls(seq=int(m["seq"]), decision_id=str(m["decision_id"]), request_id=str(m["request_id"]), kind=str(m["kind"]),
                   fields={k: v for k, v in m.items() if k not in known}, traceparent=m.get("traceparent"),
                   timing=m.get("timing"), worker_us=int(m.get("worker_us", 0)), received_us=received_us)

    def blocks(self) -> List[int]:
        """The block ids of a release (its runs expanded)."""
        out: List[int] = []
        for start, count in self.fields.get("blocks", []):
            out.extend(range(start, start + count))
        return out

    def marks(self) -> Dict[str, int]:
        """The decider's timing marks (name -> wall-clock microseconds), e.g. ``out``: when it handed this to Kafka."""
        out: Dict[str, int] = {}
        if self.timing:
            for pair in self.timing.split(","):
                name, _, value = pair.partition("=")
                if value.isdigit():
                    out[name] = int(value)
        return out


def timing(marks: Dict[str, int]) -> str:
    """The ``timing`` field of a fact: the engine's marks (name -> wall-clock microseconds)."""
    return ",".join(f"{k}={int(v)}" for k, v in marks.items())
