"""What every export format does, and the registry the pipeline picks one from.

A format is one class (as llama.cpp's converter has one per architecture), registered by its name with
:func:`register`; the pipeline never branches on the format. Its steps, in the order the pipeline calls them:

1. :meth:`ExportFormat.check_options`: the options alone, before the model is loaded;
2. :meth:`ExportFormat.check_model`: what the loaded model must be for this format, before anything is built;
3. :meth:`ExportFormat.layout_for`: the layout the artifact is built in (ONNX may need the dense one);
4. :meth:`ExportFormat.write`: the files, into the staging folder, and what the verification runs on;
5. :meth:`ExportFormat.runtime_check`: the written file run in the runtime people deploy it with.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch

from headprune.core.checkpoint_files import has_weights
from headprune.core.extras import require
from headprune.core.registry import Registry
from headprune.errors import ExportSettingsError, UnsupportedModelError
from headprune.heads import Head
from headprune.loading.models import LoadedModel
from headprune.tasks import Task


@dataclass(frozen=True)
class ExportOptions:
    """The options that say how an export is written (checked before the model loads)."""

    layout: str = "sliced"
    dtype: str | None = None  # the dtype the model is loaded in (None: the checkpoint's, or a loaded model's own)
    gguf_type: str = "f32"
    max_shard_size: int | str | None = None


@dataclass
class Job:
    """What a format's write and runtime check read: the original, the built artifact and how it is verified."""

    lm: LoadedModel
    artifact: torch.nn.Module
    removed: tuple[Head, ...]
    plans: Sequence[Any]  # LayerPlan per layer
    layout: str
    task: Task
    ablation: str
    means: torch.Tensor | None
    tolerance: float
    batch_size: int | str
    greedy_prompts: int  # task prompts decoded greedily in a runtime check
    greedy_steps: int


@dataclass
class Written:
    """A written export, as the verification sees it.

    ``runner`` is compared with the masked original on the verification inputs (logits), ``exported`` has the
    task re-measured on it, and ``weights`` has its tensors compared by name. ``closers`` are released once the
    record is written (a llama.cpp context holds memory).
    """

    exported: LoadedModel
    runner: Any
    weights: torch.nn.Module
    measured_on: str
    closers: list[Any] = field(default_factory=list)
    files: Any = None  # what the format wrote, as its runtime check reads it (GGUF: gguf_export.GgufFiles)

    def close(self) -> None:
        for closer in self.closers:
            closer.close()


class ExportFormat:
    """One export format. An instance serves one export: options are checked, then the model, then it writes."""

    name: ClassVar[str]
    extra: ClassVar[str | None] = None  # the optional install (headprune[extra]) it needs
    tolerance: ClassVar[float | None] = None  # its default logit tolerance (None: the dtype's)
    kv_map: ClassVar[bool] = True  # sliced layers map query heads to key/value heads (llama.cpp repeats evenly)
    writes_through: ClassVar[bool] = False  # can carry checkpoint tensors the loading class does not use

    def __init__(self, options: ExportOptions) -> None:
        self.options = options
        self.passthrough: tuple[str, ...] = ()

    def check_options(self) -> None:
        """Refuse options this format cannot take; the model is not loaded yet.

        Raises:
            ExportSettingsError, MissingExtraError.
        """
        from headprune.exporter.shards import shard_size

        shard_size(self.options.max_shard_size, self.name)
        if self.extra is not None:
            require(self.extra, f"export format {self.name!r}")

    def check_model(self, lm: LoadedModel) -> None:
        """Refuse a loaded model this format cannot hold, before anything is built.

        Raises:
            UnsupportedModelError, ExportSettingsError.
        """
        self.passthrough = passthrough_tensors(lm, self.name, self.writes_through)

    def layout_for(self, lm: LoadedModel, plans: Sequence[Any]) -> str:
        """The layout the artifact is built in (the one asked for, unless the format cannot run it)."""
        return self.options.layout

    def write(self, job: Job, staging: Path, scratch: Path) -> Written:
        """Write the export into ``staging`` (``scratch``: files that are not part of it)."""
        raise NotImplementedError

    def runtime_check(self, job: Job, written: Written) -> tuple[Any, Any]:
        """``(RuntimeCheck or None, GgufInfo or None)``: the written files run in their own runtime.

        Raises:
            VerificationError: the runtime disagrees with the masked original.
        """
        return None, None


def refuse_unless_float32(dtype: torch.dtype | str | None, message: str) -> None:
    """Refuse a dtype other than float32 for a format verified in float32: a dtype asked for (checked before the
    model loads) or the loaded model's own (``None``: the checkpoint's, not known before loading).

    Raises:
        ExportSettingsError
    """
    if isinstance(dtype, torch.dtype):
        wrong = dtype != torch.float32
    else:  # a name asked for; "auto" and "checkpoint" are known only once the model is loaded
        wrong = str(dtype) in ("float16", "bfloat16")
    if wrong:
        raise ExportSettingsError(message, settings=("dtype", "format"))


def passthrough_tensors(lm: LoadedModel, format_name: str, writes_through: bool) -> tuple[str, ...]:
    """The checkpoint tensors an export writes through unchanged (those the class that stands in for one
    transformers lacks does not use); refuses an export that would lose checkpoint tensors.

    Raises:
        UnsupportedModelError
    """
    if not lm.unused_tensors:
        return ()
    chosen = lm.model_class.name if lm.model_class else "the loaded class"
    shown = ", ".join(lm.unused_tensors[:4]) + (" ..." if len(lm.unused_tensors) > 4 else "")
    lost = f"{lm.name}: {len(lm.unused_tensors)} checkpoint tensors are not used by {chosen} ({shown})"
    if lm.model_class is not None and lm.model_class.stands_in_for:
        if writes_through and has_weights(lm.folder):
            return lm.unused_tensors
        raise UnsupportedModelError(f"{lost}; a safetensors export writes them through, a {format_name} file cannot "
                                    "hold them", settings=("format",))
    raise UnsupportedModelError(f"{lost}; an export would lose them. Give the checkpoint an architectures entry in "
                                "config.json that names its head class")


REGISTRY: Registry[str, type[ExportFormat]] = Registry("export format")


def register(cls: type[ExportFormat]) -> type[ExportFormat]:
    """Class decorator: make ``cls`` the format named ``cls.name``."""
    return REGISTRY.add(cls.name, cls)
