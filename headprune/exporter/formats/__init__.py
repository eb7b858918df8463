"""Export formats, one class each, picked by name from a registry (:mod:`headprune.exporter.formats.base`)."""

from __future__ import annotations

from headprune.core.choices import EXPORT_FORMATS
from headprune.errors import ExportSettingsError
from headprune.exporter.formats import gguf, onnx, safetensors  # noqa: F401 - each registers its class
from headprune.exporter.formats.base import REGISTRY, ExportFormat, ExportOptions, FormatOption, Job, Written

# The order messages list them in (the most portable first); a format registered elsewhere comes after these.
FORMATS = tuple(sorted(REGISTRY, key=lambda name: (*EXPORT_FORMATS, name).index(name)))


def format_class(name: str) -> type[ExportFormat]:
    """The class of the format called ``name`` (what the CLI and the card read of a written export).

    Raises:
        ExportSettingsError: no such format.
    """
    if name not in REGISTRY:
        raise ExportSettingsError(f"format must be one of {', '.join(FORMATS)}, not {name!r}", settings=("format",))
    return REGISTRY[name]


def format_for(name: str, options: ExportOptions) -> ExportFormat:
    """The format called ``name``, for one export with ``options``.

    Raises:
        ExportSettingsError: no such format.
    """
    return format_class(name)(options)


def format_options() -> list[tuple[str, FormatOption]]:
    """``(format name, option)`` for every option only one format takes, in the formats' order (the CLI's flags)."""
    return [(name, option) for name in FORMATS for option in REGISTRY[name].takes]


__all__ = ["FORMATS", "ExportFormat", "ExportOptions", "FormatOption", "Job", "Written", "format_class", "format_for",
           "format_options"]
