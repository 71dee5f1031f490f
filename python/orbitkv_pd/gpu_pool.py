"""KV pages in GPU memory, shared with the transfer worker by CUDA IPC handle.

One allocation per region (layer x part, layer-major; K then V), each ``num_blocks`` pages of
``block_size_tokens x num_kv_heads x head_dim`` elements: vLLM's per-layer paged layout (block, token in block, head,
dim). Every region is its own ``cuMemAlloc`` so that it has its own IPC handle (the engine API names one handle per
region and no offset; PyTorch's caching allocator packs tensors into shared segments). The memory is seen from
PyTorch as tensors through ``__cuda_array_interface__``, without a copy.

Needs the CUDA driver (``libcuda.so.1``) and PyTorch, on the GPU machine only; imported lazily by the real engine.
"""

from __future__ import annotations

import ctypes
from typing import Any, List, Sequence

from .protocol import CudaIpcPool, CudaIpcRegion, Layout

_IPC_HANDLE_BYTES = 64


class CudaError(RuntimeError):
    pass


class _Driver:
    """The few driver calls the pool needs, through ctypes (the standard library)."""

    def __init__(self) -> None:
        try:
            self.lib = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            raise CudaError(f"no CUDA driver here (libcuda.so.1: {e})") from e
        self.lib.cuGetErrorString.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        self.lib.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
        self.lib.cuMemFree_v2.argtypes = [ctypes.c_uint64]
        self.lib.cuIpcGetMemHandle.argtypes = [ctypes.c_char_p, ctypes.c_uint64]
        self.lib.cuMemsetD8_v2.argtypes = [ctypes.c_uint64, ctypes.c_ubyte, ctypes.c_size_t]
        self.lib.cuCtxGetCurrent.argtypes = [ctypes.POINTER(ctypes.c_void_p)]

    def check(self, rc: int, what: str) -> None:
        if rc != 0:
            s = ctypes.c_char_p()
            self.lib.cuGetErrorString(rc, ctypes.byref(s))
            raise CudaError(f"{what}: CUDA error {rc} ({(s.value or b'?').decode()})")

    def require_context(self) -> None:
        ctx = ctypes.c_void_p()
        self.check(self.lib.cuCtxGetCurrent(ctypes.byref(ctx)), "cuCtxGetCurrent")
        if not ctx.value:
            raise CudaError("no current CUDA context on this thread: initialise PyTorch's device first")

    def alloc(self, nbytes: int) -> int:
        ptr = ctypes.c_uint64()
        self.check(self.lib.cuMemAlloc_v2(ctypes.byref(ptr), nbytes), f"cuMemAlloc({nbytes})")
        return ptr.value

    def free(self, ptr: int) -> None:
        self.lib.cuMemFree_v2(ptr)

    def zero(self, ptr: int, nbytes: int) -> None:
        self.check(self.lib.cuMemsetD8_v2(ptr, 0, nbytes), "cuMemsetD8")

    def ipc_handle(self, ptr: int) -> bytes:
        buf = ctypes.create_string_buffer(_IPC_HANDLE_BYTES)
        self.check(self.lib.cuIpcGetMemHandle(buf, ptr), "cuIpcGetMemHandle")
        return buf.raw


class _DeviceArray:
    """Just enough of ``__cuda_array_interface__`` for ``torch.as_tensor`` to view raw device memory."""

    def __init__(self, ptr: int, shape: Sequence[int]) -> None:
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": "<i2", "data": (ptr, False), "version": 3,
                                         "strides": None, "stream": None}


class GpuKvPool:
    """The engine's KV pages in GPU memory: ``keys[layer]`` and ``values[layer]`` are bf16/fp16 tensors of shape
    ``[num_blocks, block_size_tokens, num_kv_heads, head_dim]`` over memory the worker maps by IPC handle."""

    heads_first = False  # a page is token-major: [block tokens, heads, dim]

    def __init__(self, layout: Layout, device: int, torch: Any, dtype: Any) -> None:
        if layout.kv_split != "separate":
            raise ValueError("the GPU pool keeps K and V in separate regions (layout.kv_split=separate)")
        self.layout = layout
        self.device = device
        self._driver = _Driver()
        self._driver.require_context()
        self._ptrs: List[int] = []
        self.keys: List[Any] = []
        self.values: List[Any] = []
        regions: List[CudaIpcRegion] = []
        shape = (layout.num_blocks, layout.block_size_tokens, layout.num_kv_heads, layout.head_dim)
        nbytes = layout.num_blocks * layout.page
        try:
            for layer in range(layout.num_layers):
                for part, into in (("K", self.keys), ("V", self.values)):
                    ptr = self._driver.alloc(nbytes)
                    self._ptrs.append(ptr)
                    self._driver.zero(ptr, nbytes)
                    t = torch.as_tensor(_DeviceArray(ptr, shape), device=f"cuda:{device}").view(dtype)
                    into.append(t)
                    regions.append(CudaIpcRegion(layer, part, nbytes, self._driver.ipc_handle(ptr)))
        except BaseException:
            self.close()
            raise
        self.spec = CudaIpcPool(regions, device)
        self.bytes = nbytes * len(self._ptrs)

    def close(self) -> None:
        self.keys.clear()
        self.values.clear()
        for p in self._ptrs:
            self._driver.free(p)
        self._ptrs.clear()


class VllmKvCaches:
    """The KV cache as vLLM's GPU model runner allocates it at the pinned release: per layer one tensor of
    ``(num_blocks, num_kv_heads, block_size, 2 * head_size)`` (FlashAttention's, K and V packed in the last dimension) from
    one int8 buffer; ``keys[layer]`` and ``values[layer]`` are its two halves (strided views, head-major pages). What the
    vLLM connector's ``register_kv_caches`` is given (``tensors``): it maps them by CUDA IPC handle itself, so this pool
    has no ``spec`` of its own. PyTorch's allocator owns the memory."""

    heads_first = True  # a page is head-major: [heads, block tokens, dim]

    def __init__(self, layout: Layout, device: int, torch: Any, dtype: Any) -> None:
        self.layout = layout
        shape = (layout.num_blocks, layout.num_kv_heads, layout.block_size_tokens, 2 * layout.head_dim)
        elem = 2  # bf16 / fp16
        nbytes = layout.num_blocks * layout.num_kv_heads * layout.block_size_tokens * 2 * layout.head_dim * elem
        dev = torch.device("cuda", device)
        self.tensors: List[Any] = [torch.zeros(nbytes, dtype=torch.int8, device=dev).view(dtype).view(shape)
                                   for _ in range(layout.num_layers)]
        d = layout.head_dim
        self.keys: List[Any] = [t[..., :d] for t in self.tensors]
        self.values: List[Any] = [t[..., d:] for t in self.tensors]
        self.spec = None
        self.bytes = nbytes * layout.num_layers

    def close(self) -> None:
        self.keys.clear()
        self.values.clear()
        self.tensors.clear()
