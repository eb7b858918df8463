"""Export: pruned checkpoints, verified before they are written (``pipeline``), and their records.

The names below are imported on first use, so that reading an export's record (``push``) loads no torch.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_LAZY = {
    "export": "headprune.exporter.pipeline",
    "resolve_heads": "headprune.exporter.resolve",
    "ExportRecord": "headprune.exporter.export_record",
    "RECORD_NAME": "headprune.exporter.export_record",
    "file_hashes": "headprune.exporter.export_record",
    "read_record": "headprune.exporter.export_record",
    "verify_record": "headprune.exporter.export_record",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'headprune.exporter' has no attribute {name!r}")
