"""A real transformer as the engine's model: prefill writes the prompt's KV into GPU pages, decode gathers the pages it
holds into the model's cache and generates greedily (the reference engine, ``python -m orbitkv_pd.real_engine``).

The model is a transformers causal LM: a Llama-shaped config with random weights from a fixed seed (two processes
with the same seed, shape and device build bit-identical weights), or a local checkpoint directory (never a hub
download). Its KV lives in :class:`~orbitkv_pd.gpu_pool.GpuKvPool` pages in vLLM's per-layer layout; transformers'
eager attention reads a contiguous cache, so decode gathers the pages into a ``DynamicCache`` first — on every path
(P/D and colocated alike), as a paged attention kernel would read them in place.

One forward pass at a time (a lock): this engine does not batch. Needs PyTorch and transformers (the GPU machine).
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import threading
import time
import zlib
from dataclasses import dataclass
from typing import Any, Callable, Iterator, List, Optional

from .protocol import Layout

log = logging.getLogger("orbitkv_pd.real_model")

# Llama-3-shaped configs for random weights: (layers, hidden, intermediate, heads, kv heads, head dim, vocab).
SHAPES = {
    "8b": (32, 4096, 14336, 32, 8, 128, 128256),
    "1b": (16, 2048, 8192, 32, 8, 64, 128256),
    "tiny": (4, 256, 512, 4, 2, 64, 32000),
}


@dataclass
class RealModelConfig:
    shape: str = "8b"
    path: Optional[str] = None  # a local checkpoint directory (config, weights, tokenizer)
    seed: int = 1234
    device: int = 0
    dtype: str = "bf16"
    num_blocks: int = 4096
    block_size_tokens: int = 16
    max_positions: int = 131072
    kv_layout: str = "paged"  # "vllm": vLLM's FlashAttention tensors, registered through the vLLM connector


class RealModel:
    """The transformer, its tokenizer and its GPU page pool."""

    def __init__(self, cfg: RealModelConfig) -> None:
        self.deterministic = os.environ.get("ORBITKV_DETERMINISTIC", "1") == "1"
        if self.deterministic:
            # cuBLAS is bit-reproducible only with a fixed workspace (read when CUDA starts: before torch touches it).
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        import torch  # the GPU machine's; imported here so the rest of the package needs only the standard library
        import transformers

        self.torch = torch
        self.cfg = cfg
        self.lock = threading.Lock()
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[cfg.dtype]
        self.dtype = dtype
        torch.cuda.set_device(cfg.device)
        self.dev = torch.device("cuda", cfg.device)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        if self.deterministic:
            # The same tokens from the same KV on every run and in every process (P/D must equal colocated):
            # deterministic kernels, no reduced-precision reductions. ORBITKV_DETERMINISTIC=0 turns this off.
            torch.use_deterministic_algorithms(True, warn_only=True)
            torch.backends.cudnn.deterministic = True
            torch.backends.cudnn.benchmark = False
            torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
            torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
        t0 = time.monotonic()
        if cfg.path:
            self.tokenizer = transformers.AutoTokenizer.from_pretrained(cfg.path, local_files_only=True)
            self.model = transformers.AutoModelForCausalLM.from_pretrained(cfg.path, local_files_only=True, **_dtype_kw(transformers, dtype),
                                                                           attn_implementation="sdpa").to(self.dev)
            self.name = cfg.path
        else:
            layers, hidden, inter, heads, kv_heads, head_dim, vocab = SHAPES[cfg.shape]
            config = transformers.LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                                              num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=head_dim,
                                              max_position_embeddings=cfg.max_positions, rope_theta=500000.0, rms_norm_eps=1e-5,
                                              tie_word_embeddings=False, attn_implementation="sdpa")
            torch.manual_seed(cfg.seed)
            torch.cuda.manual_seed_all(cfg.seed)
            with torch.device(self.dev):
                self.model = transformers.LlamaForCausalLM._from_config(config, **_dtype_kw(transformers, dtype))
            self.tokenizer = None
            self.name = f"random-llama-{cfg.shape}-seed{cfg.seed}"
        self.model.eval()
        c = self.model.config
        self.vocab = int(c.vocab_size)
        head_dim = int(getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads)
        self.layout = Layout(num_layers=int(c.num_hidden_layers), num_blocks=cfg.num_blocks, block_size_tokens=cfg.block_size_tokens,
                             num_kv_heads=int(c.num_key_value_heads), head_dim=head_dim, dtype=cfg.dtype)
        torch.cuda.synchronize()
        log.info("model %s on cuda:%d in %.1f s (%d layers, %d KV heads, head dim %d, %.1f GB of weights)", self.name, cfg.device,
                 time.monotonic() - t0, self.layout.num_layers, self.layout.num_kv_heads, head_dim,
                 sum(p.numel() * p.element_size() for p in self.model.parameters()) / 1e9)
        from .gpu_pool import GpuKvPool, VllmKvCaches
        self.pool = VllmKvCaches(self.layout, cfg.device, torch, dtype) if cfg.kv_layout == "vllm" else GpuKvPool(self.layout, cfg.device, torch, dtype)
        log.info("KV pool: %d blocks x %d regions of %d KiB pages (%.2f GB) in GPU memory", cfg.num_blocks, 2 * self.layout.num_layers,
                 self.layout.page // 1024, self.pool.bytes / 1e9)

    # ------------------------------------------------------------------------------------------------ tokens

    def tokenize(self, text: str) -> List[int]:
        if self.tokenizer is not None:
            return list(self.tokenizer.encode(text, add_special_tokens=True))
        # Random weights have no vocabulary: one token per whitespace-separated word, a stable hash into the vocab
        # (so a prompt of N words is N tokens and both engines tokenize alike).
        return [256 + zlib.crc32(w.encode("utf-8")) % (self.vocab - 256) for w in text.split()]

    def token_text(self, token: int) -> str:
        if self.tokenizer is not None:
            return self.tokenizer.decode([token])
        return f" t{token}"

    def blocks_for(self, tokens: int) -> int:
        return (tokens + self.layout.block_size_tokens - 1) // self.layout.block_size_tokens

    # ------------------------------------------------------------------------------------------------ compute

    def prefill(self, tokens: List[int], blocks: List[int], on_layers: Optional[Callable[[int], None]] = None, group: int = 4,
                fail_after: int = 0, cached: int = 0, on_layer_enqueued: Optional[Callable[[int], None]] = None) -> int:
        """Runs the prompt, writes its KV into ``blocks`` (token order) and returns the greedy first token. The pages
        are in device memory when this returns (the worker may copy them from its own context at once).

        With ``on_layers``, layer by layer (docs/worker.md, "Layer by layer"): a hook after each decoder layer's forward
        writes that layer's KV into its pages at once and, every ``group`` layers, records a CUDA event; a reporter
        thread waits for each event and then calls ``on_layers(n)`` (``n`` layers' pages are in device memory), so the
        worker may copy them while the later layers compute. Not for the last layer: the prefill's end says that one.
        Every report is made before this returns. ``fail_after`` > 0 (fault drills): the prefill fails once that many
        layers were reported.

        ``cached`` > 0 (the prefix cache): the first ``cached`` pages hold the KV of the prompt's first blocks already;
        only the tokens after them are computed, over that KV (gathered from the pages as decode gathers them), and only
        the pages after them are written. Not the same arithmetic as computing the whole prompt (other shapes): an engine
        answering the same prompt over the same cached prefix gives the same tokens, one computing it whole may not.

        ``on_layer_enqueued(n)``: called on this thread after each layer's forward and page writes were enqueued, before the
        GPU ran them (vLLM's ``save_kv_layer`` call site: the vLLM connector waits for the GPU itself)."""
        torch = self.torch
        layers = self._decoder_layers() if on_layers is not None or on_layer_enqueued is not None else None
        bs = self.layout.block_size_tokens
        cached = max(0, min(cached, (len(tokens) - 1) // bs, len(blocks)))
        with self.lock, torch.inference_mode():
            ids = torch.tensor([tokens[cached * bs:]], device=self.dev)
            if layers is None and cached == 0:
                out = self.model(input_ids=ids, use_cache=True, logits_to_keep=1)
                first = int(out.logits[0, -1].argmax())
                self._scatter(out.past_key_values, len(tokens), blocks)
                torch.cuda.synchronize()
                return first
            import transformers
            cache = self._gather(cached * bs, blocks[:cached]) if cached else transformers.DynamicCache()
            n = len(tokens)
            idx = torch.tensor(blocks, device=self.dev, dtype=torch.long)
            position = torch.arange(cached * bs, n, device=self.dev)
            if layers is None:  # whole, after the cached prefix
                out = self.model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1, cache_position=position)
                first = int(out.logits[0, -1].argmax())
                for layer in range(self.layout.num_layers):
                    self._scatter_layer(cache, layer, n, idx, len(blocks), cached)
                torch.cuda.synchronize()
                return first
            total = len(layers)
            reporter = self._reporter()
            reporter.target = on_layers

            def after(layer: int) -> Callable[..., None]:
                def hook(module: Any, args: Any, output: Any) -> None:
                    self._scatter_layer(cache, layer, n, idx, len(blocks), cached)
                    done = layer + 1
                    if on_layer_enqueued is not None:
                        on_layer_enqueued(done)
                    if on_layers is not None and done < total and (done % group == 0):
                        ev = torch.cuda.Event()
                        ev.record()
                        reporter.put(ev, done)
                    if fail_after and done >= fail_after:
                        raise PrefillFault(f"the prefill failed after {done} of {total} layers (engine.fault.fail-prefill-midway-prefix)")
                return hook

            hooks = [m.register_forward_hook(after(i)) for i, m in enumerate(layers)]
            try:
                out = self.model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1, cache_position=position)
                torch.cuda.synchronize()  # releases the GIL while the GPU finishes: the reporter thread goes on meanwhile
                return int(out.logits[0, -1].argmax())
            finally:
                for h in hooks:
                    h.remove()
                reporter.drain()

    def _decoder_layers(self) -> Optional[List[Any]]:
        """The model's decoder layers, in order (the hooks' places), or None when the architecture hides them (then the
        prefill is reported whole)."""
        body = getattr(self.model, "model", None)
        layers = getattr(body, "layers", None)
        if layers is None or len(layers) != self.layout.num_layers:
            return None
        return list(layers)

    def _reporter(self) -> "_LayerReporter":
        r = getattr(self, "_layer_reporter", None)
        if r is None:
            r = self._layer_reporter = _LayerReporter()
        return r

    def decode(self, tokens: List[int], blocks: List[int], first: Optional[int], max_tokens: int) -> Iterator[int]:
        """Greedy tokens after the prompt whose KV is in ``blocks``, starting with ``first`` (the prefill's token).
        Without it, the last prompt token is run again over the KV of the others (vLLM's way)."""
        torch = self.torch
        n = len(tokens)
        cache = None
        if first is None:
            with self.lock, torch.inference_mode():
                cache = self._gather(n - 1, blocks)
                first = self._step(tokens[-1], n - 1, cache)
        yield first
        if max_tokens <= 1:
            return
        if cache is None:
            with self.lock, torch.inference_mode():
                cache = self._gather(n, blocks)
        tok = first
        for i in range(max_tokens - 1):
            with self.lock, torch.inference_mode():
                tok = self._step(tok, n + i, cache)
            yield tok

    def _step(self, token: int, pos: int, cache: Any) -> int:
        torch = self.torch
        with self._attention():
            out = self.model(input_ids=torch.tensor([[token]], device=self.dev), past_key_values=cache, use_cache=True,
                             cache_position=torch.tensor([pos], device=self.dev), logits_to_keep=1)
        return int(out.logits[0, -1].argmax())

    def _attention(self) -> Any:
        """The attention backend of decode steps: PyTorch's reference kernel, which gives the same tokens from the same
        KV on every run (measured on the H200: the default choice gave 2 of 5 repeated decodes equal at 1K tokens, this
        one 5 of 5, and was faster at one token per step). ORBITKV_SDPA=default leaves the choice to PyTorch."""
        if os.environ.get("ORBITKV_SDPA", "math") == "math":
            from torch.nn.attention import SDPBackend, sdpa_kernel
            return sdpa_kernel([SDPBackend.MATH])
        return contextlib.nullcontext()

    def kv_digest(self, n: int, blocks: List[int]) -> str:
        """Two sums over the request's pages (all layers, K and V, the first ``n`` token slots): equal KV, equal digest;
        the second weighs by position, so misplaced pages show too. For diagnosing, not on any hot path."""
        torch = self.torch
        idx = torch.tensor(blocks, device=self.dev, dtype=torch.long)
        total, placed = 0, 0
        with self.lock, torch.inference_mode():
            for layer in range(self.layout.num_layers):
                for pool in (self.pool.keys[layer], self.pool.values[layer]):
                    x = self._token_rows(pool, idx).reshape(-1, self.layout.num_kv_heads * self.layout.head_dim)[:n].view(torch.int16)
                    total += int(torch.sum(x, dtype=torch.int64))
                    placed += int(torch.sum(x[:, :8].to(torch.int64) * torch.arange(1, x.shape[0] + 1, device=self.dev).unsqueeze(1)))
        return f"{total & 0xffffffffffff:x}/{placed & 0xffffffffffff:x}"

    def _scatter(self, cache: Any, n: int, blocks: List[int]) -> None:
        idx = self.torch.tensor(blocks, device=self.dev, dtype=self.torch.long)
        for layer in range(self.layout.num_layers):
            self._scatter_layer(cache, layer, n, idx, len(blocks))

    def _scatter_layer(self, cache: Any, layer: int, n: int, idx: Any, nb: int, first: int = 0) -> None:
        """Layer ``layer``'s K and V of the ``n`` prompt tokens in ``cache`` into the pages ``idx`` (token order), from
        page ``first`` on (the pages before it hold a cached prefix: never written again)."""
        bs = self.layout.block_size_tokens
        parts = []
        for src in _layer_kv(cache, layer):
            x = src[0].transpose(0, 1)[first * bs:]  # [tokens, heads, dim]
            m = (nb - first) * bs
            if m != n - first * bs:
                pad = x.new_zeros((m - (n - first * bs),) + tuple(x.shape[1:]))
                x = self.torch.cat([x, pad], 0)
            parts.append(x.reshape(nb - first, bs, x.shape[1], x.shape[2]))
        if self.pool.heads_first:
            # vLLM's layout: one contiguous tensor per layer, a page [heads, block tokens, K dim + V dim]; written whole
            # pages at a time into that tensor (an index_put_ into its strided K or V half would copy and write back the
            # whole half under deterministic algorithms, racing a push landing in other pages)
            self.pool.tensors[layer].index_copy_(0, idx[first:], self.torch.cat(parts, -1).permute(0, 2, 1, 3))
        else:
            self.pool.keys[layer].index_copy_(0, idx[first:], parts[0])
            self.pool.values[layer].index_copy_(0, idx[first:], parts[1])

    def _token_rows(self, pool: Any, idx: Any) -> Any:
        """The pages ``idx`` of one layer's K or V, token after token: ``[pages * block tokens, heads, dim]``."""
        x = pool.index_select(0, idx)  # [blocks, block tokens, heads, dim] (vLLM's layout: [blocks, heads, block tokens, dim])
        if self.pool.heads_first:
            x = x.permute(0, 2, 1, 3)
        return x.reshape(-1, x.shape[2], x.shape[3])

    def _gather(self, n: int, blocks: List[int]) -> Any:
        import transformers
        idx = self.torch.tensor(blocks, device=self.dev, dtype=self.torch.long)
        cache = transformers.DynamicCache()
        for layer in range(self.layout.num_layers):
            kv = []
            for pool in (self.pool.keys[layer], self.pool.values[layer]):
                x = self._token_rows(pool, idx)[:n]  # [tokens, heads, dim]
                kv.append(x.transpose(0, 1).unsqueeze(0).contiguous())  # [1, heads, tokens, dim]
            cache.update(kv[0], kv[1], layer)
        return cache

    def close(self) -> None:
        self.pool.close()


class PrefillFault(RuntimeError):
    """A prefill failed on purpose (engine.fault.fail-prefill-midway-prefix)."""


class _LayerReporter:
    """One thread that waits for the CUDA events a layer-by-layer prefill records and reports each once it completed
    (the engine's report after the event: simpler than handing the worker an IPC event handle, and the worker then copies
    only pages already in memory). The host queues the events well ahead of the GPU; each is reported as soon as it
    completes, and one whose successor has completed too is passed over (events of one stream complete in order)."""

    def __init__(self) -> None:
        self.target: Optional[Callable[[int], None]] = None
        self._q: "queue.Queue[Any]" = queue.Queue()
        threading.Thread(target=self._run, name="layer-reports", daemon=True).start()

    def put(self, event: Any, layers: int) -> None:
        self._q.put((event, layers))

    def drain(self) -> None:
        """Returns once every queued report was made (or passed over for a later one)."""
        self._q.join()

    def _run(self) -> None:
        pending: List[Any] = []
        while True:
            if not pending:
                pending.append(self._q.get())
            while True:
                try:
                    pending.append(self._q.get_nowait())
                except queue.Empty:
                    break
            event, layers = pending[0]
            try:
                if len(pending) > 1 and pending[1][0].query():
                    continue  # the next one is done as well: report that one instead
                event.synchronize()  # the GIL is released while waiting
                target = self.target
                if target is not None:
                    target(layers)
            except Exception:  # a report lost only delays the push to the prefill's end
                log.exception("layer report of %d layers failed", layers)
            finally:
                pending.pop(0)
                self._q.task_done()


def _layer_kv(cache: Any, layer: int) -> Any:
    """(keys, values) of one layer of a transformers cache, across the versions' layouts."""
    if hasattr(cache, "layers"):
        lay = cache.layers[layer]
        return lay.keys, lay.values
    if hasattr(cache, "key_cache"):
        return cache.key_cache[layer], cache.value_cache[layer]
    return cache[layer][0], cache[layer][1]


def _dtype_kw(transformers: Any, dtype: Any) -> dict:
    major = int(transformers.__version__.split(".")[0])
    return {"dtype": dtype} if major >= 5 else {"torch_dtype": dtype}


def _self_test(argv: Optional[List[str]] = None) -> int:
    """``python3 -m orbitkv_pd.real_model --self-test``: on a GPU, the paged path against transformers' own cache.

    For each prompt length: prefill into scattered pages, then decode from the gathered pages, against a plain greedy
    loop on transformers' own ``DynamicCache`` (no pages) — the tokens must be equal. Prints one line per length."""
    import argparse
    import random

    ap = argparse.ArgumentParser(prog="python3 -m orbitkv_pd.real_model")
    ap.add_argument("--self-test", action="store_true", required=True)
    ap.add_argument("--shape", default="tiny", choices=sorted(SHAPES))
    ap.add_argument("--lengths", default="128,1024")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--blocks", type=int, default=2048)
    ap.add_argument("--kv-layout", default="paged", choices=["paged", "vllm"],
                    help="vllm: the KV cache as vLLM's tensors (the connector's layout, engine.vllm-connector)")
    ap.add_argument("--digest", action="store_true", help="print the prefill KV's digest per length (compare across processes)")
    ap.add_argument("--repeat", type=int, default=1, help="decode this many times from the same pages: are the tokens repeatable?")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)-5s %(name)s %(message)s")
    m = RealModel(RealModelConfig(shape=args.shape, num_blocks=args.blocks, kv_layout=args.kv_layout))
    torch = m.torch
    rnd = random.Random(3)
    bad = 0
    for n in (int(x) for x in args.lengths.split(",")):
        tokens = m.tokenize(" ".join(f"w{rnd.randrange(50000)}" for _ in range(n)))
        free = list(range(m.layout.num_blocks))
        rnd.shuffle(free)
        blocks = free[:m.blocks_for(n)]
        t0 = time.monotonic()
        first = m.prefill(tokens, blocks)
        t1 = time.monotonic()
        paged = list(m.decode(tokens, blocks, first, args.max_tokens))
        t2 = time.monotonic()
        recomputed = list(m.decode(tokens, blocks, None, args.max_tokens))
        with torch.inference_mode():
            out = m.model(input_ids=torch.tensor([tokens], device=m.dev), use_cache=True, logits_to_keep=1)
            cache, tok, plain = out.past_key_values, int(out.logits[0, -1].argmax()), []
            for i in range(args.max_tokens):
                plain.append(tok)
                out = m.model(input_ids=torch.tensor([[tok]], device=m.dev), past_key_values=cache, use_cache=True, logits_to_keep=1)
                tok = int(out.logits[0, -1].argmax())
        ok = paged == plain
        bad += 0 if ok else 1
        # layer by layer: the same KV and token, reported in layer groups while the forward pass runs
        group = max(1, m.layout.num_layers // 8)
        blocks2 = free[len(blocks):2 * len(blocks)]
        reports: List[Any] = []
        t3 = time.monotonic()
        first2 = m.prefill(tokens, blocks2, on_layers=lambda k: reports.append((time.monotonic() - t3, k)), group=group)
        t4 = time.monotonic()
        seen = [k for _, k in reports]
        layered_ok = first2 == first and m.kv_digest(n, blocks2) == m.kv_digest(n, blocks) and bool(seen) and seen == sorted(set(seen)) \
            and seen[-1] < m.layout.num_layers
        bad += 0 if layered_ok else 1
        print(f"{n} tokens: layer by layer (groups of {group}) prefill {1000 * (t4 - t3):.1f} ms, the same KV and first token: {layered_ok};"
              f" reports {seen} at {[round(1000 * t, 1) for t, _ in reports]} ms", flush=True)
        # the prefix cache: a prompt of the same length sharing its first 3/4 (whole blocks) computes only the rest over the
        # pages that hold them; twice over the same pages gives the same KV and token (what P/D against colocated needs)
        bs = m.layout.block_size_tokens
        k = (3 * n // 4) // bs
        if k > 0 and 3 * len(blocks) + 2 * (len(blocks) - k) > len(free):
            print(f"{n} tokens: the prefix-cache check needs {3 * len(blocks) + 2 * (len(blocks) - k)} blocks, the pool has {len(free)}:"
                  " skipped (--blocks)", flush=True)
        elif k > 0:
            other = tokens[:k * bs] + m.tokenize(" ".join(f"v{rnd.randrange(50000)}" for _ in range(n - k * bs)))
            fresh = free[2 * len(blocks):2 * len(blocks) + 2 * (len(blocks) - k)]
            b1 = blocks[:k] + fresh[:len(blocks) - k]
            b2 = blocks[:k] + fresh[len(blocks) - k:]
            b3 = free[2 * len(blocks) + 2 * (len(blocks) - k):][:len(blocks)]
            before = m.kv_digest(k * bs, blocks[:k])
            t5 = time.monotonic()
            c1 = m.prefill(other, b1, cached=k)
            t6 = time.monotonic()
            c2 = m.prefill(other, b2, on_layers=lambda _: None, group=group, cached=k)
            t7 = time.monotonic()
            whole = m.prefill(other, b3)
            t8 = time.monotonic()
            same = c1 == c2 and m.kv_digest(n, b1) == m.kv_digest(n, b2) and m.kv_digest(k * bs, blocks[:k]) == before
            bad += 0 if same else 1
            print(f"{n} tokens: over a cached prefix of {k} blocks prefill {1000 * (t6 - t5):.1f} ms, layer by layer"
                  f" {1000 * (t7 - t6):.1f} ms, whole {1000 * (t8 - t7):.1f} ms; twice the same KV and token, the cached pages"
                  f" untouched: {same}; token equal to computing it whole: {c1 == whole}", flush=True)
        if args.digest:
            print(f"{n} tokens: KV digest {m.kv_digest(n, blocks)} first {first}", flush=True)
        if args.repeat > 1:
            again = [list(m.decode(tokens, blocks, first, args.max_tokens)) for _ in range(args.repeat - 1)]
            same = sum(1 for a in again if a == paged)
            bad += 0 if same == len(again) else 1
            print(f"{n} tokens: {same + 1} of {args.repeat} decodes from the same pages equal", flush=True)
        print(f"{n} tokens: prefill {1000 * (t1 - t0):.1f} ms, decode {args.max_tokens} tokens {1000 * (t2 - t1):.1f} ms; paged == plain: {ok};"
              f" recomputing the last token instead: {'equal' if recomputed == plain else 'DIFFERS'}; tokens {paged[:6]}", flush=True)
    m.close()
    return 1 if bad else 0


if __name__ == "__main__":
    import sys
    sys.exit(_self_test())
