"""What the benchmarks share, written once: the machine a figure was measured on, best-of-N timing, the float32
matrix-product rate, left padding, and the JSON record every benchmark writes (``--json PATH``; by default
``runs/bench/NAME.json``), from which ``scripts/bench/render.py`` makes the tables of docs/benchmarks.md.

torch is imported inside the functions that need it: ``render.py`` reads records without it.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

SCHEMA = 1  # of the JSON record: {"bench", "schema", "machine", "settings", "results"}


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what the platform says."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def machine() -> dict[str, Any]:
    """What a figure depends on: CPU (and GPU), cores, torch's threads and CPU kernels, load, versions."""
    import torch
    import transformers

    import headprune

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {"cpu": cpu_name(), "cores": cores(), "torch_threads": torch.get_num_threads(),
            "kernels": torch.backends.cpu.get_cpu_capability(), "gpu": gpu,
            "load_average": round(os.getloadavg()[0], 2), "python": platform.python_version(),
            "torch": torch.__version__, "transformers": transformers.__version__, "headprune": headprune.__version__}


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    """``fn()``'s value and the seconds it took."""
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def best_of(fn: Callable[[], Any], runs: int, sync: Callable[[], None] = lambda: None) -> float:
    """The fewest seconds of ``runs`` calls of ``fn`` (``sync`` waits for a device before each clock read): on a
    shared machine the best run is the one least slowed by others."""
    best = float("inf")
    for _ in range(runs):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - start)
    return best


def product_rate(product: Callable[[], Any], size: int, *, repeats: int = 10, runs: int = 3, warmup: int = 1,
                 sync: Callable[[], None] = lambda: None) -> float:
    """The rate (GFLOP/s) of ``product``, a ``size`` x ``size`` x ``size`` matrix product: the best of ``runs``
    timings of ``repeats`` products each, after ``warmup`` untimed ones."""
    for _ in range(warmup):
        product()

    def repeated() -> None:
        for _ in range(repeats):
            product()

    return 2 * size**3 * repeats / best_of(repeated, runs, sync) / 1e9


def matmul_rates(size: int = 1024) -> dict[str, float]:
    """This machine's float32 rate (GFLOP/s) of a 1024^3 product, best of three runs of ten: torch's own product
    (MKL's sgemm) and oneDNN's (what ``headprune.core.cpu_linear`` routes linear layers to)."""
    import torch

    from headprune.core import cpu_linear

    a, b = torch.randn(size, size), torch.randn(size, size)
    return {"torch": product_rate(lambda: a @ b, size),
            "onednn": product_rate(lambda: cpu_linear.onednn_linear(a, b, None), size)}


def pad_id(tokenizer: Any) -> int:
    """The id that pads a batch: the tokenizer's pad token, else its end-of-sequence token."""
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id


def left_padded(rows: list[list[int]], pad: int, device: Any = None) -> tuple[Any, Any]:
    """``(B, T)`` ids and attention mask of ``rows`` padded on the left with ``pad`` (as causal LMs batch), on
    ``device`` (the model's: a model on a GPU takes no CPU inputs)."""
    import torch

    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, row in enumerate(rows):
        ids[i, width - len(row):] = torch.tensor(row)
        mask[i, width - len(row):] = 1
    return (ids, mask) if device is None else (ids.to(device), mask.to(device))


def add_json_option(parser: argparse.ArgumentParser, bench: str) -> None:
    parser.add_argument("--json", type=Path, default=Path("runs") / "bench" / f"{bench}.json",
                        help="where the JSON record goes (default: %(default)s); scripts/bench/render.py tabulates it")


def write_json(path: Path, bench: str, settings: dict[str, Any] | argparse.Namespace, results: Any,
               **extra: Any) -> dict[str, Any]:
    """Write the benchmark's record (its name, the machine, its settings, its results and ``extra``) to ``path``
    (atomically, strict JSON) and return it."""
    from headprune.core.io import atomic_write_json

    settings = vars(settings) if isinstance(settings, argparse.Namespace) else settings
    record = {"bench": bench, "schema": SCHEMA, "machine": machine(),
              "settings": {k: str(v) if isinstance(v, Path) else v for k, v in settings.items() if k != "json"},
              **extra, "results": results}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, record)
    print(f"wrote {path}", file=sys.stderr)
    return record
