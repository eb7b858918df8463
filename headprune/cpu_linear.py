"""Float32 linear layers on a CPU through oneDNN, where it computes them faster than torch's own product.

torch's float32 ``F.linear`` on a CPU calls MKL's sgemm. On CPUs MKL does not tune for (AMD's: it runs its
AVX2 kernels on an AVX-512 EPYC) that is about half of what the cores can do; oneDNN, the other matrix library
inside every torch build, picks its kernels from the instructions the CPU has. Measured on this project's
2-core AMD EPYC: 1024 x 1024 products at 185 GFLOP/s through ``F.linear``, 400 through oneDNN, the same
product (float32 throughout; the results differ by float rounding, as a different batch size's do).

Which one runs is measured, not assumed: once per process, both compute a 512 x 1024 x 1024 product and
oneDNN is used when it takes at most 85% of torch's time and agrees with it to float32 rounding. So a CPU
where MKL is at its best keeps torch's own path. ``HEADPRUNE_CPU_LINEAR`` (``auto``, ``onednn``, ``torch``)
sets it instead. Only plain ``nn.Linear`` modules with float32 weights on the CPU are routed, and only while
:func:`fast_linears` is entered (the evaluator's passes, under ``torch.inference_mode``: the oneDNN op has no
gradient); a module whose ``forward`` is already replaced (accelerate's offload hooks) is left alone, and
forward hooks (the ablation's) run as before. A product of fewer than :data:`SMALL` multiply-adds stays torch's.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch import nn

from headprune.errors import SettingsError

ENV = "HEADPRUNE_CPU_LINEAR"
CHOICES = ("auto", "onednn", "torch")
FASTER = 0.85  # oneDNN is used when it takes at most this share of torch's time
# Below this many multiply-adds a product stays torch's: oneDNN's call costs about 10 us more (measured here: even
# at 64 x 64 x 256, faster from 4 x 576 x 576).
SMALL = 1 << 20


def _onednn(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")  # noqa: SLF001 - torch's own op


def _best_seconds(product: Callable[[], object], repeats: int = 5) -> float:
    product()  # the first call sets up kernels
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        product()
        best = min(best, time.perf_counter() - start)
    return best


@functools.cache
def _works() -> bool:
    """Whether this torch build has oneDNN's linear op and it agrees with ``F.linear`` to float32 rounding."""
    if not torch.backends.mkldnn.is_available():
        return False
    generator = torch.Generator().manual_seed(0)
    x, weight = torch.randn(64, 256, generator=generator), torch.randn(128, 256, generator=generator)
    with torch.inference_mode():
        try:
            ours = _onednn(x, weight, None)
        except (RuntimeError, AttributeError, NotImplementedError):  # an op this torch build lacks
            return False
        theirs = torch.nn.functional.linear(x, weight)
    return torch.allclose(ours, theirs, rtol=1e-4, atol=1e-4 * float(theirs.abs().max()))


@functools.cache
def _measured() -> str:
    """``onednn`` when it works and computes a float32 product clearly faster than ``F.linear`` here."""
    if not _works():
        return "torch"
    generator = torch.Generator().manual_seed(0)
    x, weight = torch.randn(512, 1024, generator=generator), torch.randn(1024, 1024, generator=generator)
    with torch.inference_mode():
        onednn = _best_seconds(lambda: _onednn(x, weight, None))
        plain = _best_seconds(lambda: torch.nn.functional.linear(x, weight))
    return "onednn" if onednn <= FASTER * plain else "torch"


def kernel() -> str:
    """The CPU float32 linear kernel this process uses: ``onednn`` or ``torch`` (``HEADPRUNE_CPU_LINEAR``, else
    measured once).

    Raises:
        SettingsError: ``HEADPRUNE_CPU_LINEAR`` is not ``auto``, ``onednn`` or ``torch``, or asks for oneDNN where
            this torch build has no working oneDNN linear.
    """
    wanted = os.environ.get(ENV, "auto").strip().lower() or "auto"
    if wanted not in CHOICES:
        raise SettingsError(f"{ENV}={os.environ[ENV]!r}: use one of {', '.join(CHOICES)}")
    if wanted == "onednn" and not _works():
        raise SettingsError(f"{ENV}=onednn: this torch build ({torch.__version__}) has no working oneDNN linear; "
                            "use auto or torch")
    return _measured() if wanted == "auto" else wanted


def _routed(module: nn.Module) -> bool:
    if type(module) is not nn.Linear or "forward" in vars(module):
        return False
    weight = module.weight
    return weight.device.type == "cpu" and weight.dtype == torch.float32 and not weight.is_meta


@contextmanager
def fast_linears(model: object) -> Iterator[int]:
    """Route ``model``'s float32 CPU linear layers through oneDNN while entered, when :func:`kernel` says so;
    yields how many were routed (0: torch's own path, or a model that is not a torch module: a runtime's)."""
    routing = isinstance(model, nn.Module) and kernel() == "onednn"
    modules = [m for m in model.modules() if _routed(m)] if routing else []  # type: ignore[union-attr]
    for module in modules:
        module.forward = functools.partial(_linear, module)  # type: ignore[method-assign]
    try:
        yield len(modules)
    finally:
        for module in modules:
            vars(module).pop("forward", None)


def _linear(module: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    if x.numel() * module.out_features < SMALL:  # rows x in x out: oneDNN's set-up would cost more than it saves
        return torch.nn.functional.linear(x, module.weight, module.bias)
    return _onednn(x, module.weight, module.bias)
