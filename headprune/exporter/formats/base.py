"""What every export format does, and the registry the pipeline, the CLI and the card pick one from.

A format is one class (as llama.cpp's converter has one per architecture), registered by its name with
:func:`register`; nothing outside its module branches on the format. Its steps, in the order the pipeline calls
them:

1. :meth:`ExportFormat.check_options`: the options alone, before the model is loaded;
2. :meth:`ExportFormat.check_model`: what the loaded model must be for this format, before anything is built;
3. :meth:`ExportFormat.layout_for`: the layout the artifact is built in (ONNX may need the dense one);
4. :meth:`ExportFormat.write`: the files, into the staging folder, and what the verification runs on;
5. :meth:`ExportFormat.runtime_check`: the written file run in the runtime people deploy it with, and the
   format's own details for the record (``ExportRecord.format_details``, of type ``details_type``).

What people see of it is the class's too, read from its record (no model, no torch): the options only it
takes (``takes``: keys of ``export``'s ``format_options`` and the CLI's flags), its ``--format`` help, the CLI's
summary lines and load hint, the card's verification lines and how-to-load section. This module imports no torch
at the top, so the CLI can read the classes to build ``--help``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from headprune.core.extras import require
from headprune.core.record_json import from_json
from headprune.core.registry import Registry
from headprune.errors import ExportSettingsError, UnsupportedModelError
from headprune.heads import Head

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from headprune.exporter.export_record import ExportRecord
    from headprune.loading.models import LoadedModel
    from headprune.tasks import Task


@dataclass(frozen=True)
class FormatOption:
    """An option only one format takes: a key of ``export(format_options=...)`` and a CLI flag (``name`` with
    dashes: ``gguf_type`` is ``--gguf-type``), offered only with that format and refused with any other."""

    name: str
    choices: tuple[str, ...]
    default: str
    help: str


@dataclass(frozen=True)
class ExportOptions:
    """The options that say how an export is written (checked before the model loads)."""

    layout: str = "sliced"
    dtype: str | None = None  # the dtype the model is loaded in (None: the checkpoint's, or a loaded model's own)
    max_shard_size: int | str | None = None
    format_options: Mapping[str, str] = field(default_factory=dict)  # the format's own (FormatOption names)


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
    files: Any = None  # what the format wrote, as its runtime check reads it (GGUF: gguf.writer.GgufFiles)

    def close(self) -> None:
        for closer in self.closers:
            closer.close()


class ExportFormat:
    """One export format. An instance serves one export: options are checked, then the model, then it writes.
    Its class methods read a written export's record (the CLI's lines, the card's)."""

    name: ClassVar[str]
    title: ClassVar[str] = ""  # how prose names it ("GGUF"; empty: its name)
    help: ClassVar[str] = ""  # what --format's help says of it (empty: nothing)
    library_name: ClassVar[str | None] = None  # the card's Hub library_name (None: the format's name)
    extra: ClassVar[str | None] = None  # the optional install (headprune[extra]) it needs
    tolerance: ClassVar[float | None] = None  # its default logit tolerance (None: the dtype's)
    kv_map: ClassVar[bool] = True  # sliced layers map query heads to key/value heads (llama.cpp repeats evenly)
    writes_through: ClassVar[bool] = False  # can carry checkpoint tensors the loading class does not use
    takes: ClassVar[tuple[FormatOption, ...]] = ()  # the options only this format takes
    details_type: ClassVar[type | None] = None  # the record class of its format_details (None: it records none)
    weight_suffixes: ClassVar[tuple[str, ...]] = ()  # its weight files, counted in the record's bytes

    def __init__(self, options: ExportOptions) -> None:
        self.options = options
        self.chosen = {option.name: options.format_options.get(option.name, option.default)
                       for option in self.takes}  # this format's options, defaults filled in
        self.passthrough: tuple[str, ...] = ()
        self.quantization: Any = None  # QuantizedExport: how a quantized checkpoint's weights were written
        self.layout_note = ""  # why the layout written is what it is, where the format chose (layout_for)

    def check_options(self) -> None:
        """Refuse options this format cannot take; the model is not loaded yet.

        Raises:
            ExportSettingsError, MissingExtraError.
        """
        from headprune.exporter.shards import shard_size

        for name in self.options.format_options:
            if name not in self.chosen:
                owners = [cls.name for cls in REGISTRY.values() if any(o.name == name for o in cls.takes)]
                where = f"with format {' or '.join(owners)}" if owners else "with no export format"
                raise ExportSettingsError(f"{name} applies only {where}; it would be ignored here", settings=(name,))
        for option in self.takes:
            if self.chosen[option.name] not in option.choices:
                raise ExportSettingsError(f"{option.name} must be one of {', '.join(option.choices)}, not "
                                          f"{self.chosen[option.name]!r}", settings=(option.name,))
        shard_size(self.options.max_shard_size, self.name)
        if self.extra is not None:
            require(self.extra, f"export format {self.name!r}")

    def check_model(self, lm: LoadedModel) -> None:
        """Refuse a loaded model this format cannot hold, before anything is built.

        Raises:
            UnsupportedModelError, ExportSettingsError.
        """
        if self.options.layout == "sliced" and lm.adapter.dense_only:
            raise ExportSettingsError(f"{lm.name} ({lm.model.config.model_type}) cannot be exported with layout "
                                      f"sliced: {lm.adapter.dense_only}; layout dense is exact",
                                      settings=("layout",))
        from headprune.exporter.quantized import dequantized

        self.passthrough = passthrough_tensors(lm, self.name, self.writes_through)
        self.quantization = dequantized(lm, self.title or self.name)  # a format that keeps it says so in write

    def layout_for(self, lm: LoadedModel, plans: Sequence[Any]) -> str:
        """The layout the artifact is built in (the one asked for, unless the format cannot run it; a format that
        decides sets ``layout_note`` to what it wrote and why, which the record, the CLI and the card give)."""
        return self.options.layout

    def write(self, job: Job, staging: Path, scratch: Path) -> Written:
        """Write the export into ``staging`` (``scratch``: files that are not part of it)."""
        raise NotImplementedError

    def runtime_check(self, job: Job, written: Written) -> tuple[Any, Any]:
        """``(RuntimeCheck or None, details or None)``: the written files run in their own runtime, and the
        format's details for the record (a ``details_type``).

        Raises:
            VerificationError: the runtime disagrees with the masked original.
        """
        return None, None

    # What people see of a written export, read from its record alone.

    @classmethod
    def details(cls, record: ExportRecord) -> Any:
        """The record's format details as a ``details_type`` (None: the format records none, or this record has
        none)."""
        if cls.details_type is None or not record.format_details:
            return None
        return from_json(cls.details_type, record.format_details)

    @classmethod
    def summary_lines(cls, record: ExportRecord) -> list[str]:
        """What ``headprune export`` prints of this format after its verification line (plain text)."""
        return []

    @classmethod
    def load_hint(cls, record: ExportRecord, out: str) -> str:
        """How to load the export written to ``out``: the CLI's ``(load with ...)``."""
        raise NotImplementedError

    @classmethod
    def card_lines(cls, record: ExportRecord) -> list[str]:
        """The card's verification lines of this format (markdown list items)."""
        return []

    @classmethod
    def card_usage(cls, record: ExportRecord) -> list[str]:
        """The card's "How to load" section (markdown)."""
        raise NotImplementedError

    @classmethod
    def credential_place(cls, path: Path, offset: int) -> str | None:
        """Where byte ``offset`` of one of its binary files lies, in the format's own terms (a GGUF file's metadata
        key): what a refusal of a credential found there names (None: only the byte is named)."""
        return None


def refuse_unless_float32(dtype: torch.dtype | str | None, message: str) -> None:
    """Refuse a dtype other than float32 for a format verified in float32: a dtype asked for (checked before the
    model loads) or the loaded model's own (``None``: the checkpoint's, not known before loading).

    Raises:
        ExportSettingsError
    """
    import torch

    if isinstance(dtype, torch.dtype):
        wrong = dtype != torch.float32
    else:  # a name asked for; "auto" and "checkpoint" are known only once the model is loaded
        wrong = str(dtype) in ("float16", "bfloat16")
    if wrong:
        raise ExportSettingsError(message, settings=("dtype", "format"))


def passthrough_tensors(lm: LoadedModel, format_name: str, writes_through: bool) -> tuple[str, ...]:
    """The checkpoint tensors an export writes through unchanged (those the class that stands in for one
    transformers lacks does not use, and those the class drops by design: multi-token-prediction layers, which a
    format that cannot hold them leaves out, as the record says); refuses an export that would lose checkpoint
    tensors a model uses.

    Raises:
        UnsupportedModelError
    """
    from headprune.core.checkpoint_files import has_weights

    dropped = lm.dropped_tensors if writes_through and has_weights(lm.folder) else ()
    if not lm.unused_tensors:
        return dropped
    chosen = lm.model_class.name if lm.model_class else "the loaded class"
    shown = ", ".join(lm.unused_tensors[:4]) + (" ..." if len(lm.unused_tensors) > 4 else "")
    lost = f"{lm.name}: {len(lm.unused_tensors)} checkpoint tensors are not used by {chosen} ({shown})"
    if lm.model_class is not None and lm.model_class.stands_in_for:
        if writes_through and has_weights(lm.folder):
            return lm.unused_tensors + dropped
        raise UnsupportedModelError(f"{lost}; a safetensors export writes them through, a {format_name} file cannot "
                                    "hold them", settings=("format",))
    raise UnsupportedModelError(f"{lost}; an export would lose them. Give the checkpoint an architectures entry in "
                                "config.json that names its head class")


REGISTRY: Registry[str, type[ExportFormat]] = Registry("export format")


def register(cls: type[ExportFormat]) -> type[ExportFormat]:
    """Class decorator: make ``cls`` the format named ``cls.name``."""
    return REGISTRY.add(cls.name, cls)
