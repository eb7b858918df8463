"""Export formats, one class each, picked by name from a registry (:mod:`headprune.exporter.formats.base`)."""

from __future__ import annotations

from headprune.core.choices import EXPORT_FORMATS
from headprune.errors import ExportSettingsError
from headprune.exporter.formats import gguf, onnx, safetensors  # noqa: F401 - each registers its class
from headprune.exporter.formats.base import REGISTRY, ExportFormat, ExportOptions, Job, Written

# The order messages list them in (the most portable first); a format registered elsewhere comes after these.
FORMATS = tuple(sorted(REGISTRY, key=lambda name: (*EXPORT_FORMATS, name).index(name)))


def format_for(name: str, options: ExportOptions) -> ExportFormat:
    """The format called ``name``, for one export with ``options``.

    Raises:
        ExportSettingsError: no such format.
    """
    if name not in REGISTRY:
        raise ExportSettingsError(f"format must be one of {', '.join(FORMATS)}, not {name!r}", settings=("format",))
    return REGISTRY[name](options)


__all__ = ["FORMATS", "ExportFormat", "ExportOptions", "Job", "Written", "format_for"]
