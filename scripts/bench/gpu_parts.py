"""What ``gpu_check`` measures each part with: the device's two ceilings, a part's time and peak memory, and the
work its forward passes really did against the roofline those ceilings draw.

- **Ceilings**, both measured as the matmul peak always was: a large bfloat16 matrix product (TFLOP/s) and a
  large device-to-device copy (GB/s, bytes read plus bytes written).
- **Peak memory per part**: on a GPU ``torch.cuda.max_memory_allocated`` since the part began; on a CPU the peak
  resident set size of the process while the part ran (sampled every few milliseconds from ``/proc``).
- **Work**: hooks on every decoder layer and on the output head count what each call computed and read: weights
  (every call reads the layer's weights once), keys and values in the cache (a decoding step reads them all), and
  multiply-adds. A layer skipped by the layer cache is swapped out and never called, so it is not counted. Each
  call's floor is the roofline's: ``max(FLOP / peak, bytes / bandwidth)``; a part's limit is the sum, and
  ``of_limit`` is that limit over the time it took. Decoding steps (a few tokens per row) are memory-bound: their
  limit is the bytes they read over the bandwidth, which is the yardstick for decoding, not the matmul peak.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from headprune.core.compat import cache_name

from .common import product_rate

DATASHEET_BF16_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0, "A10G": 125.0, "L4": 121.0}
DECODE_TOKENS = 8  # a call with at most this many new tokens per row is a decoding step (drafts included)


@dataclass(frozen=True)
class Ceilings:
    """The device and its measured limits."""

    device: str
    tflops: float  # bfloat16 matrix product, measured
    bandwidth_gbs: float  # device-to-device copy, bytes read + written per second, measured
    datasheet_tflops: float | None


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure_ceilings(device: torch.device) -> Ceilings:
    """The bfloat16 matmul rate and the copy bandwidth of ``device`` (sized for a GPU, or small on a CPU)."""
    gpu = device.type == "cuda"
    name = torch.cuda.get_device_name(device) if gpu else "CPU"
    size = 8192 if gpu else 1024
    a, b = (torch.randn(size, size, device=device, dtype=torch.bfloat16) for _ in range(2))
    tflops = product_rate(lambda: a @ b, size, repeats=20 if gpu else 3, runs=3 if gpu else 1, warmup=2,
                          sync=lambda: sync(device)) / 1e3
    del a, b
    # 4 GiB on a GPU (far past its 60 MB L2), 256 MiB on a CPU (past its caches); random, not zeros.
    count = (4 << 30 if gpu else 256 << 20) // 2
    source = torch.randn(count, device=device, dtype=torch.bfloat16)
    target = torch.empty_like(source)
    target.copy_(source)
    repeats = 10 if gpu else 3
    best = float("inf")
    for _ in range(3):
        sync(device)
        start = time.perf_counter()
        for _ in range(repeats):
            target.copy_(source)
        sync(device)
        best = min(best, time.perf_counter() - start)
    bandwidth = 2 * source.numel() * source.element_size() * repeats / best / 1e9
    del source, target
    if gpu:
        torch.cuda.empty_cache()
    datasheet = next((v for k, v in DATASHEET_BF16_TFLOPS.items() if k in name), None)
    return Ceilings(name, tflops, bandwidth, datasheet)


def _rss() -> int:
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * 4096


@contextmanager
def peak_memory(device: torch.device) -> Iterator[list[int]]:
    """Yields a list that holds, once the block ends, the peak bytes while it ran (see the module docstring)."""
    peak = [0]
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        yield peak
        peak[0] = int(torch.cuda.max_memory_allocated(device))
        return
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.005):
            peak[0] = max(peak[0], _rss())

    sampler = threading.Thread(target=sample, daemon=True)
    peak[0] = _rss()
    sampler.start()
    try:
        yield peak
    finally:
        done.set()
        sampler.join()
        peak[0] = max(peak[0], _rss())


@dataclass
class Work:
    """What counted calls computed and read, and their roofline floor in seconds."""

    flop: float = 0.0
    bytes: float = 0.0
    limit_s: float = 0.0
    decode_steps: int = 0  # layer calls of at most DECODE_TOKENS tokens per row
    decode_bytes: float = 0.0
    decode_limit_s: float = 0.0
    calls: int = 0
    per_layer: dict[int, int] = field(default_factory=dict)

    def add(self, flop: float, moved: float, ceilings: Ceilings, decode: bool) -> None:
        limit = max(flop / (ceilings.tflops * 1e12), moved / (ceilings.bandwidth_gbs * 1e9))
        self.flop += flop
        self.bytes += moved
        self.limit_s += limit
        self.calls += 1
        if decode:
            self.decode_steps += 1
            self.decode_bytes += moved
            self.decode_limit_s += limit


def _cached_tokens(kwargs: dict, layer: int) -> int:
    """Keys and values already in the cache a layer call reads (0 without a cache)."""
    cache = kwargs.get(cache_name())  # ``cache`` from transformers 5.24, ``past_key_values`` before
    if cache is None or not hasattr(cache, "get_seq_length"):
        return 0
    try:
        return int(cache.get_seq_length(layer))
    except (IndexError, KeyError, TypeError, AttributeError):
        return 0


@contextmanager
def counted(lm: Any, ceilings: Ceilings) -> Iterator[Work]:
    """Count the work of every decoder-layer call and output-head call of ``lm`` while entered."""
    work = Work()
    config = lm.model.config
    grid = lm.grid
    kv_row = 2 * grid.num_kv_heads * grid.head_dim  # keys and values per token, elements
    layers = lm.adapter.layers(lm.model)
    sizes = [(sum(p.numel() for p in layer.parameters()), next(layer.parameters()).element_size()) for layer in layers]
    hooks = []

    def on_layer(index: int) -> Callable:
        def hook(module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
            hidden = args[0] if args else kwargs["hidden_states"]
            rows, tokens = hidden.shape[0], hidden.shape[1]
            keys = tokens + _cached_tokens(kwargs, index)
            params, element = sizes[index]
            flop = 2.0 * params * rows * tokens + 4.0 * rows * tokens * keys * grid.num_heads * grid.head_dim
            moved = (params + rows * keys * kv_row + 2.0 * rows * tokens * config.hidden_size) * element
            work.add(flop, moved, ceilings, tokens <= DECODE_TOKENS)
            work.per_layer[index] = work.per_layer.get(index, 0) + 1
        return hook

    def on_head(module: torch.nn.Module, args: tuple, output: torch.Tensor) -> None:
        rows = args[0].numel() // args[0].shape[-1]
        weight = module.weight
        flop = 2.0 * weight.numel() * rows
        work.add(flop, weight.numel() * weight.element_size() + rows * weight.shape[0] * output.element_size(),
                 ceilings, False)

    try:
        for index, layer in enumerate(layers):
            hooks.append(layer.register_forward_pre_hook(on_layer(index), with_kwargs=True))
        head = lm.model.get_output_embeddings() if hasattr(lm.model, "get_output_embeddings") else None
        if head is not None and hasattr(head, "weight"):
            hooks.append(head.register_forward_hook(on_head))
        yield work
    finally:
        for hook in hooks:
            hook.remove()


def figure(value: float) -> float:
    """Four significant digits (a CPU's TFLOP/s and a GPU's are orders of magnitude apart)."""
    return float(f"{value:.4g}")


def part(name: str, run: Callable[[], Any], *, device: torch.device, ceilings: Ceilings, lm: Any = None,
         examples: int = 0, tokens: int = 0, flop: float = 0.0) -> dict:
    """Run ``run`` once and return its row (printed as one JSON line): seconds, peak memory, and with ``flop`` the
    effective rate (``flop``: 2 x parameters x tokens covered) against the measured peak; with ``lm`` the work its
    layers really did against the roofline (``of_limit``), decoding steps apart. The value is under ``value``."""
    sync(device)
    with peak_memory(device) as peak:
        with (counted(lm, ceilings) if lm is not None else _nothing()) as work:
            start = time.perf_counter()
            value = run()
            sync(device)
            seconds = time.perf_counter() - start
    row: dict[str, Any] = {"part": name, "seconds": figure(seconds), "peak_memory_gib": round(peak[0] / 2**30, 3)}
    if examples:
        row["examples_per_s"] = figure(examples / seconds)
    if tokens:
        row["tokens_per_s"] = figure(tokens / seconds)
    if flop:
        achieved = flop / seconds / 1e12
        row.update(effective_tflops=figure(achieved), of_measured_peak=figure(achieved / ceilings.tflops),
                   of_datasheet_peak=None if ceilings.datasheet_tflops is None
                   else figure(achieved / ceilings.datasheet_tflops))
    if work is not None and work.calls:
        row.update(counted_tflop=figure(work.flop / 1e12), read_gb=figure(work.bytes / 1e9),
                   limit_s=figure(work.limit_s), of_limit=figure(work.limit_s / seconds))
        if work.decode_steps:
            row.update(decode_steps=work.decode_steps, decode_read_gb=figure(work.decode_bytes / 1e9),
                       decode_limit_s=figure(work.decode_limit_s),
                       decode_share_of_limit=figure(work.decode_limit_s / work.limit_s))
    print(json.dumps(row), flush=True)
    return {**row, "value": value}


@contextmanager
def _nothing() -> Iterator[None]:
    yield None
