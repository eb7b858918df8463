"""headprune: find attention heads whose removal improves a task, and ship the pruned model.

Heavy imports (torch, transformers) happen when the public names are first used, so ``import headprune``
and ``headprune --help`` stay fast.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from headprune._version import __version__

_LAZY = {
    "Head": "headprune.heads",
    "parse_heads": "headprune.heads",
    "format_heads": "headprune.heads",
    "load": "headprune.loading.models",
    "load_model": "headprune.loading.models",
    "LoadedModel": "headprune.loading.models",
    "wrap_model": "headprune.loading.models",
    "ablated": "headprune.surgery.ablation",
    "collect_head_means": "headprune.surgery.ablation",
    "Task": "headprune.tasks",
    "load_task": "headprune.tasks",
    "Evaluator": "headprune.evaluation",
    "EvalResult": "headprune.evaluation",
    "evaluate": "headprune.evaluation",
    "HeadpruneError": "headprune.errors",
    "find": "headprune.search.find",
    "FindResult": "headprune.search.find_result",
    "FindSettings": "headprune.search.settings",
    "export": "headprune.exporter.pipeline",
    "ExportRecord": "headprune.exporter.export_record",
}

__all__ = sorted(_LAZY) + ["__version__"]

if TYPE_CHECKING:  # pragma: no cover
    from headprune.errors import HeadpruneError
    from headprune.evaluation import EvalResult, Evaluator, evaluate
    from headprune.exporter.export_record import ExportRecord
    from headprune.exporter.pipeline import export
    from headprune.heads import Head, format_heads, parse_heads
    from headprune.loading.models import LoadedModel, load, load_model, wrap_model
    from headprune.search.find import find
    from headprune.search.find_result import FindResult
    from headprune.search.settings import FindSettings
    from headprune.surgery.ablation import ablated, collect_head_means
    from headprune.tasks import Task, load_task


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'headprune' has no attribute {name!r}")
