"""A KV pool in a shared-memory file, laid out exactly as the Java HostKvPool maps it: one region per layer and part
(layer-major), each ``num_blocks`` pages, regions 4 KiB aligned. The engine writes and reads its pages here; its
transfer worker maps the same file (``ShmPool(path)`` in the hello)."""

from __future__ import annotations

import mmap
import os
from typing import Optional

from .protocol import Layout

ALIGNMENT = 4096


def stride(layout: Layout) -> int:
    return (layout.region_bytes + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


def file_bytes(layout: Layout) -> int:
    return stride(layout) * layout.region_count


class ShmKvPool:
    """The engine's side of a shared pool file (created at the right size when missing)."""

    def __init__(self, layout: Layout, path: str) -> None:
        self.layout = layout
        self.path = path
        size = file_bytes(layout)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            existing = os.fstat(fd).st_size
            if existing not in (0, size):
                raise ValueError(f"pool file {path} is {existing} bytes but this layout needs {size}")
            if existing == 0:
                os.ftruncate(fd, size)
            self._mm: Optional[mmap.mmap] = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        self._stride = stride(layout)
        self._view = memoryview(self._mm)

    def _at(self, region: int, offset: int, length: int) -> int:
        if not 0 <= region < self.layout.region_count:
            raise IndexError(f"region {region} outside 0..{self.layout.region_count - 1}")
        if offset < 0 or offset + length > self.layout.region_bytes:
            raise IndexError(f"bytes {offset}..{offset + length} outside the region of {self.layout.region_bytes}")
        return region * self._stride + offset

    def write(self, region: int, offset: int, data: bytes) -> None:
        at = self._at(region, offset, len(data))
        self._view[at:at + len(data)] = data

    def read(self, region: int, offset: int, length: int) -> bytes:
        at = self._at(region, offset, length)
        return bytes(self._view[at:at + length])

    def page(self, region: int, block: int) -> bytes:
        return self.read(region, block * self.layout.page, self.layout.page)

    def close(self) -> None:
        if self._mm is not None:
            self._view.release()
            self._mm.close()
            self._mm = None

    def __enter__(self) -> "ShmKvPool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
