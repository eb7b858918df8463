"""Float32 linear layers on a CPU through oneDNN, where it computes them faster than torch's own product.

torch's float32 ``F.linear`` on a CPU calls MKL's sgemm. On AMD CPUs with AVX-512 MKL runs its AVX2 kernels;
oneDNN, the other matrix library inside every torch build, picks its kernels from the instructions the CPU has.
Measured on this project's 2-core AMD EPYCs, 1024 x 1024 x 1024 products: a Zen 5 at 185-220 GFLOP/s through
``F.linear`` and 400-507 through oneDNN; a Zen 4 at 145 and 200. The same product, float32 throughout; the results
differ by float rounding, as a different batch size's do.

Which one runs follows from the CPU, not from a timing (on a loaded machine a timing decides differently from one
run to the next, and a run's results should not depend on the load): oneDNN on an AMD CPU with AVX-512 where this
torch build's oneDNN linear works and agrees with ``F.linear`` to float32 rounding; elsewhere (Intel, where MKL
is at its best, or without AVX-512) torch's own. ``HEADPRUNE_CPU_LINEAR`` (``auto``, ``onednn``, ``torch``) sets
it instead, and the processes of a data-parallel run all use rank 0's (:func:`agreed`).
Only plain ``nn.Linear`` modules with float32 weights on the CPU are routed, and only while :func:`fast_linears`
is entered (the evaluator's passes, under ``torch.inference_mode``: the oneDNN op has no gradient); a module
whose ``forward`` is already replaced (accelerate's offload hooks) is left alone, and forward hooks (the
ablation's) run as before. A product of fewer than :data:`SMALL` multiply-adds stays torch's.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import nn

from headprune.core.limits import WORDS, word
from headprune.errors import SettingsError

log = logging.getLogger("headprune")
ENV = "HEADPRUNE_CPU_LINEAR"
CHOICES = WORDS[ENV]
# Below this many multiply-adds a product stays torch's: oneDNN's call costs about 10 us more (measured here: even
# at 64 x 64 x 256, faster from 4 x 576 x 576).
SMALL = 1 << 20
_agreed: str | None = None  # the run's kernel while agreed() is entered


def onednn_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` computed by oneDNN (float32, under ``torch.inference_mode``)."""
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")  # noqa: SLF001 - torch's own op


@functools.cache
def _works() -> bool:
    """Whether this torch build has oneDNN's linear op and it agrees with ``F.linear`` to float32 rounding."""
    if not torch.backends.mkldnn.is_available():
        return False
    generator = torch.Generator().manual_seed(0)
    x, weight = torch.randn(64, 256, generator=generator), torch.randn(128, 256, generator=generator)
    with torch.inference_mode():
        try:
            ours = onednn_linear(x, weight, None)
        except (RuntimeError, AttributeError, NotImplementedError):  # an op this torch build lacks
            return False
        theirs = torch.nn.functional.linear(x, weight)
    return torch.allclose(ours, theirs, rtol=1e-4, atol=1e-4 * float(theirs.abs().max()))


def suits_onednn(cpuinfo: str) -> bool:
    """Whether a CPU, described by its ``/proc/cpuinfo``, is one where oneDNN's float32 product beats MKL's: an AMD
    CPU with AVX-512 (MKL runs its AVX2 kernels there; oneDNN uses the AVX-512 the CPU has)."""
    first = cpuinfo.split("\n\n", 1)[0]  # the first logical CPU's block
    vendor = re.search(r"^vendor_id\s*:\s*(\S+)", first, re.MULTILINE)
    flags = re.search(r"^flags\s*:(.*)$", first, re.MULTILINE)
    return bool(vendor and vendor.group(1) == "AuthenticAMD" and flags and "avx512f" in flags.group(1).split())


@functools.cache
def _for_this_cpu() -> str:
    """``onednn`` on a CPU that suits it (:func:`suits_onednn`) where this torch build's oneDNN linear works."""
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:  # not Linux: torch's own product
        return "torch"
    return "onednn" if suits_onednn(cpuinfo) and _works() else "torch"


def setting() -> str:
    """``HEADPRUNE_CPU_LINEAR``: ``auto`` (the default), ``onednn`` or ``torch``.

    Raises:
        SettingsError: another value.
    """
    return word(ENV)


def kernel() -> str:
    """The CPU float32 linear kernel this process uses: ``onednn`` or ``torch`` (the one :func:`agreed` set, else
    ``HEADPRUNE_CPU_LINEAR``'s, else the one for this CPU).

    Raises:
        SettingsError: ``HEADPRUNE_CPU_LINEAR`` is not ``auto``, ``onednn`` or ``torch``, or asks for oneDNN where
            this torch build has no working oneDNN linear.
    """
    if _agreed is not None:
        return _agreed
    wanted = setting()
    if wanted == "onednn" and not _works():
        raise SettingsError(f"{ENV}=onednn: this torch build ({torch.__version__}) has no working oneDNN linear; "
                            "use auto or torch")
    return _for_this_cpu() if wanted == "auto" else wanted


@contextmanager
def agreed(chosen: str, whose: str) -> Iterator[str]:
    """Use ``chosen`` (``whose`` kernel: a data-parallel run's rank 0's) while entered, so that one run computes
    alike on every process, even on a mixed cluster; torch's own product where this process has no working oneDNN
    linear (said in a warning). Yields the kernel used."""
    global _agreed
    if chosen == "onednn" and not _works():
        log.warning("%s used oneDNN's float32 linear; this process has none that works (torch %s): it uses torch's "
                    "own product, equal up to float rounding", whose, torch.__version__)
        chosen = "torch"
    before, _agreed = _agreed, chosen
    try:
        yield chosen
    finally:
        _agreed = before


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
    return onednn_linear(x, module.weight, module.bias)
