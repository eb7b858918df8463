"""Devices and precision: what ``--device`` and ``--dtype`` mean.

``auto`` device: the first CUDA GPU when there is one, else Apple's MPS, else the CPU. ``auto`` dtype:
bfloat16 on a GPU that supports it (float16 on one that does not), float32 on a CPU or MPS. Margins and
statistics are computed in float32 whatever the model's dtype (the evaluator casts logits up).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from headprune.core.choices import DEVICE_MAPS, DTYPES as DTYPE_NAMES
from headprune.errors import SearchSettingsError

DEVICES = ("auto", "cpu", "cuda", "cuda:N", "mps")
_MEMORY = re.compile(r"\d+(\.\d+)?\s*([KMGT]i?B|B)", re.IGNORECASE)
DTYPES = {name: getattr(torch, name) for name in DTYPE_NAMES}  # torch.float32, ...


def resolve_device(spec: str | torch.device | None = "auto") -> torch.device:
    """The device ``spec`` names, checked to exist here.

    Raises:
        SearchSettingsError: an unknown spec, or a device this machine does not have.
    """
    if isinstance(spec, torch.device):
        return spec
    spec = (spec or "auto").strip().lower()
    if spec == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", 0)
        mps = getattr(torch.backends, "mps", None)
        return torch.device("mps") if mps is not None and mps.is_available() else torch.device("cpu")
    if spec == "cpu":
        return torch.device("cpu")
    match = re.fullmatch(r"cuda(?::(\d+))?", spec)
    if match:
        index = int(match.group(1) or 0)
        if not torch.cuda.is_available():
            raise SearchSettingsError(f"device {spec!r}: this machine has no CUDA GPU (torch {torch.__version__})",
                                      settings=("device",))
        if index >= torch.cuda.device_count():
            raise SearchSettingsError(f"device {spec!r}: this machine has {torch.cuda.device_count()} CUDA GPU(s) "
                                      f"(cuda:0..cuda:{torch.cuda.device_count() - 1})", settings=("device",))
        return torch.device("cuda", index)
    if spec == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            raise SearchSettingsError("device 'mps': Apple's Metal backend is not available here", settings=("device",))
        return torch.device("mps")
    raise SearchSettingsError(f"unknown device {spec!r}; choose one of {', '.join(DEVICES)}", settings=("device",))


def resolve_dtype(spec: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    """The dtype ``spec`` names; ``auto`` (or ``None``) picks by device (see the module docstring).

    Raises:
        SearchSettingsError: an unknown dtype name.
    """
    if isinstance(spec, torch.dtype):
        return spec
    spec = (spec or "auto").strip().lower()
    if spec == "auto":
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.float32
    if spec not in DTYPES:
        raise SearchSettingsError(f"unknown dtype {spec!r}; choose one of auto, {', '.join(DTYPES)}",
                                  settings=("dtype",))
    return DTYPES[spec]


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


@contextmanager
def widened(model: torch.nn.Module) -> Iterator[bool]:
    """The model's bfloat16 and float16 parameters and buffers in float32 while entered, then the very tensors
    they were again. Every half-precision value is exactly a float32 value, so the model computes with the same
    weights, in float32. Yields whether it did; it changes nothing (yields False) where weights are offloaded by a
    device map (they live outside the model, on the meta device) or the float32 copy does not fit in memory."""
    halves = list({id(t): t for m in model.modules() for store in (m._parameters, m._buffers)  # noqa: SLF001
                   for t in store.values() if t is not None and t.dtype in (torch.bfloat16, torch.float16)}.values())
    saved: list[tuple[torch.Tensor, torch.Tensor]] = []

    def restore() -> None:
        for tensor, data in saved:
            tensor.data = data
        saved.clear()

    done = False
    try:
        if not any(t.is_meta for t in halves):
            try:
                for tensor in halves:
                    saved.append((tensor, tensor.data))
                    tensor.data = tensor.data.float()
                done = True
            except torch.OutOfMemoryError:
                restore()
        yield done
    finally:
        restore()


def check_device_map(spec: str | None) -> str | None:
    """A device-map strategy transformers and accelerate understand (big-model dispatch), or ``None``.

    Raises:
        SearchSettingsError: an unknown strategy.
    """
    if spec is None or spec in DEVICE_MAPS:
        return spec
    raise SearchSettingsError(f"unknown device_map {spec!r}; choose one of {', '.join(DEVICE_MAPS)}",
                              settings=("device_map",))


def parse_max_memory(spec: str | dict | None) -> dict[int | str, str] | None:
    """``"0=20GiB,1=20GiB,cpu=64GiB"`` -> ``{0: "20GiB", 1: "20GiB", "cpu": "64GiB"}`` (GPU indices as ints).

    Raises:
        SearchSettingsError: a part that is not ``DEVICE=SIZE``.
    """
    if spec is None or isinstance(spec, dict):
        return spec
    limits: dict[int | str, str] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        device, _, size = (x.strip() for x in part.partition("="))
        if not (device.isdigit() or device in ("cpu", "mps")) or not _MEMORY.fullmatch(size):
            raise SearchSettingsError(f"max_memory: {part!r} is not DEVICE=SIZE (e.g. 0=20GiB,cpu=64GiB; DEVICE is "
                                      "a GPU index, cpu or mps)", settings=("max_memory",))
        limits[int(device) if device.isdigit() else device] = size.replace(" ", "")
    if not limits:
        raise SearchSettingsError("max_memory is empty (e.g. 0=20GiB,cpu=64GiB)", settings=("max_memory",))
    return limits
