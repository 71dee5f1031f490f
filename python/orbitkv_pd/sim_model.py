"""The simulated model, byte for byte the Java engines' (engine-sim's SimModel): a tokenizer, the KV content of a
prompt, and generation, all pure functions of the model seed and the text. A Python engine and a Java engine with the
same seed produce the same tokens and the same KV bytes, so either can decode what the other prefilled.

KV: token ``i`` of a prompt has a prefix hash ``h_i``; its slot in region ``r`` (a layer's K, V or fused KV) holds
64-bit little-endian lanes ``seed_i ^ ((k + 1) * GOLDEN)`` where ``seed_i`` is mixed from ``h_i``, the layer and the
part. A slot is one big-integer XOR of a fixed step table with the seed repeated in every lane: fast without numpy.
"""

from __future__ import annotations

import unicodedata
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

MASK = (1 << 64) - 1
VOCAB = 32_000
GOLDEN = 0x9E3779B97F4A7C15
_C1 = 0xBF58476D1CE4E5B9
_C2 = 0x94D049BB133111EB
_ONSETS = ["b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "st", "tr", "ch"]
_NUCLEI = ["a", "e", "i", "o", "u", "ai", "ou", "ea"]
_JAVA_SPACE_CONTROLS = frozenset([9, 10, 11, 12, 13, 28, 29, 30, 31])
_NON_BREAKING = frozenset([0x00A0, 0x2007, 0x202F])


def mix(z: int) -> int:
    """SplitMix64's finalizer."""
    z &= MASK
    z = ((z ^ (z >> 30)) * _C1) & MASK
    z = ((z ^ (z >> 27)) * _C2) & MASK
    return z ^ (z >> 31)


def _java_whitespace(unit: int) -> bool:
    # java.lang.Character.isWhitespace(char)
    if unit in _JAVA_SPACE_CONTROLS:
        return True
    if unit in _NON_BREAKING or 0xD800 <= unit <= 0xDFFF:
        return False
    return unicodedata.category(chr(unit)) in ("Zs", "Zl", "Zp")


def _fnv(units: Sequence[int]) -> int:
    data = b"".join(u.to_bytes(2, "little") for u in units).decode("utf-16-le", errors="replace").encode("utf-8")
    h = 0x811C9DC5
    for b in data:
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h  # Java's int


def tokenize(text: str) -> List[int]:
    """Each token is a run of up to 4 non-space UTF-16 units with the whitespace before it, hashed into the
    vocabulary (as Java strings count characters)."""
    raw = text.encode("utf-16-le", errors="surrogatepass")
    units = [int.from_bytes(raw[i:i + 2], "little") for i in range(0, len(raw), 2)]
    out: List[int] = []
    i, n = 0, len(units)
    while i < n:
        start = i
        while i < n and _java_whitespace(units[i]):
            i += 1
        chars = 0
        while i < n and not _java_whitespace(units[i]) and chars < 4:
            i += 1
            chars += 1
        if i == start:
            break
        out.append(_fnv(units[start:i]) % VOCAB)
    return out


def word(token: int) -> str:
    v = token % VOCAB
    parts = []
    syllables = 1 + v % 3
    v //= 3
    for s in range(syllables):
        parts.append(_ONSETS[v % len(_ONSETS)])
        v //= len(_ONSETS)
        parts.append(_NUCLEI[v % len(_NUCLEI)])
        v //= len(_NUCLEI)
        v = v * 7 + s + 1
    return "".join(parts)


def detokenize(tokens: Sequence[int]) -> str:
    return "".join(" " + word(t) for t in tokens)


class SimModel:
    """The model of one seed. Immutable; thread-safe."""

    def __init__(self, seed: int) -> None:
        self.seed = seed & MASK
        self._tables: Dict[int, Tuple[int, int, int]] = {}

    def prefix_hashes(self, tokens: Sequence[int]) -> List[int]:
        h = []
        x = mix(self.seed ^ GOLDEN)
        for t in tokens:
            x = mix(x ^ (((t + 1) * GOLDEN) & MASK))
            h.append(x)
        return h

    def generate(self, prompt: Sequence[int], max_tokens: int) -> List[int]:
        """``max_tokens`` tokens after the prompt; the first is what a prefill engine samples."""
        h = self.prefix_hashes(prompt)
        x = h[-1] if h else mix(self.seed)
        out = []
        for _ in range(max_tokens):
            t = mix(x ^ 0x5DEECE66D) % VOCAB
            out.append(t)
            x = mix(x ^ (((t + 1) * GOLDEN) & MASK))
        return out

    def answer(self, prompt: str, max_tokens: int) -> str:
        return detokenize(self.generate(tokenize(prompt), max_tokens))

    # ------------------------------------------------------------------------------------------------ KV

    def stream_seed(self, prefix_hash: int, layer: int, part: int) -> int:
        return mix(prefix_hash ^ mix((self.seed + (layer + 1) * _C1 + (part + 1) * _C2) & MASK))

    def _table(self, slot_bytes: int) -> Tuple[int, int, int]:
        """(step table as one integer, lane replicator, lanes) of a slot of ``slot_bytes``."""
        t = self._tables.get(slot_bytes)
        if t is None:
            lanes = (slot_bytes + 7) // 8
            table = 0
            rep = 0
            for k in range(lanes):
                table |= (((k + 1) * GOLDEN) & MASK) << (64 * k)
                rep |= 1 << (64 * k)
            t = (table, rep, lanes)
            self._tables[slot_bytes] = t
        return t

    def slot(self, state: int, slot_bytes: int) -> bytes:
        """The bytes of one token slot whose stream seed is ``state``."""
        table, rep, lanes = self._table(slot_bytes)
        return (table ^ (state * rep)).to_bytes(lanes * 8, "little")[:slot_bytes]

    def _slots(self, pool: "KvPoolLike", blocks: Sequence[int], tokens: Sequence[int]) -> Iterator[Tuple[int, int, int, int, bytes]]:
        """Every token slot of the prompt's KV in ``blocks`` (token ``i`` goes to block ``i // block_size``): region,
        token, block, byte offset in the region, and the bytes the model computes for it."""
        g = pool.layout
        tb = token_bytes(g)
        _check_blocks(g, blocks, len(tokens))
        h = self.prefix_hashes(tokens)
        for r in range(g.region_count):
            layer, part = divmod(r, g.parts_per_layer)
            for i in range(len(tokens)):
                block = blocks[i // g.block_size_tokens]
                yield r, i, block, block * g.page + (i % g.block_size_tokens) * tb, self.slot(self.stream_seed(h[i], layer, part), tb)

    def write_kv(self, pool: "KvPoolLike", blocks: Sequence[int], tokens: Sequence[int],
                 layers_done: Optional[Callable[[int], None]] = None) -> None:
        """Writes the KV of every prompt token into ``blocks`` (token ``i`` goes to block ``i // block_size``), layer 0
        first as a forward pass makes them; ``layers_done(n)`` hears each layer's end (``n`` layers written)."""
        g = pool.layout
        last = g.region_count - 1
        for r, i, _, off, data in self._slots(pool, blocks, tokens):
            pool.write(r, off, data)
            if layers_done is not None and i == len(tokens) - 1 and (r % g.parts_per_layer == g.parts_per_layer - 1 or r == last):
                layers_done(r // g.parts_per_layer + 1)

    def verify_kv(self, pool: "KvPoolLike", blocks: Sequence[int], tokens: Sequence[int]) -> Optional[str]:
        """Where the pages differ from what the model computes, or None when every byte is right."""
        g = pool.layout
        for r, i, block, off, want in self._slots(pool, blocks, tokens):
            got = pool.read(r, off, len(want))
            if got != want:
                at = next(k for k in range(len(want)) if got[k] != want[k])
                layer = r // g.parts_per_layer
                return (f"KV of token {i} in block {block} (layer {layer} {g.part_name(r)}) differs at byte {at}")
        return None


class KvPoolLike:
    """What :class:`SimModel` needs of a pool (see :class:`orbitkv_pd.pool.ShmKvPool`)."""

    layout: "object"

    def write(self, region: int, offset: int, data: bytes) -> None:  # pragma: no cover - protocol
        raise NotImplementedError

    def read(self, region: int, offset: int, length: int) -> bytes:  # pragma: no cover - protocol
        raise NotImplementedError


def token_bytes(layout: "object") -> int:
    page = layout.page  # type: ignore[attr-defined]
    block = layout.block_size_tokens  # type: ignore[attr-defined]
    if page % block != 0:
        raise ValueError(f"layout.page_bytes {page} is not a multiple of block_size_tokens {block}: the simulated model "
                         "needs equal token slots")
    return page // block


def blocks_for(layout: "object", tokens: int) -> int:
    block = layout.block_size_tokens  # type: ignore[attr-defined]
    return (tokens + block - 1) // block


def _check_blocks(layout: "object", blocks: Sequence[int], tokens: int) -> None:
    need = blocks_for(layout, tokens)
    if len(blocks) < need:
        raise ValueError(f"{tokens} tokens need {need} blocks, got {len(blocks)}")
