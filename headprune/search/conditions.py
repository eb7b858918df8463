"""Conditions: (set, head set) pairs evaluated once each, through the journal.

Every stage of find asks for lists of conditions on a named set (``discovery``, ``heldout``, ``control:0``,
...); a condition already in the journal is read back, the others are evaluated and appended. The intact
model's run on each set is the baseline every condition is paired against.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from headprune.devices import dtype_name
from headprune.evaluation import EvalResult, Evaluator
from headprune.heads import Head
from headprune.models import LoadedModel
from headprune.progress import Progress
from headprune.records import to_json
from headprune.search.determinism import run_environment
from headprune.search.journal import Journal
from headprune.search.result import FindSettings
from headprune.search.split import Split
from headprune.tasks import Task


def condition_key(split: str, heads: Sequence[Head]) -> str:
    return f"{split}|{','.join(str(h) for h in sorted(heads))}"


@dataclass
class Conditions:
    """The evaluators of one find run, its journal and its ablation settings."""

    evaluators: dict[str, Evaluator]
    journal: Journal
    mode: str
    means: torch.Tensor | None
    progress: bool = False  # a progress bar (a terminal); otherwise timed log lines
    seconds: dict[str, float] = field(default_factory=dict)  # seconds of each intact run computed here

    @classmethod
    def start(cls, lm: LoadedModel, split: Split, controls: Sequence[Task], settings: FindSettings, *,
              out: Path | None, resume: bool, progress: bool) -> Conditions:
        """Open (or resume) the journal for these inputs and build one evaluator per set."""
        identity = {"model": lm.name, "model_hash": lm.weight_hash, "task": split.discovery.content_hash(),
                    "heldout": split.heldout.content_hash(), "controls": [c.content_hash() for c in controls],
                    "dtype": dtype_name(lm.dtype), **to_json(settings), "environment": run_environment(lm)}
        journal = Journal(out, identity, resume=resume)
        batch = settings.batch_size
        # Discovery is evaluated hundreds of times: it reuses the intact model's layer inputs.
        evaluators = {"discovery": Evaluator(lm, split.discovery, batch_size=batch, reuse_layers=True),
                      "heldout": Evaluator(lm, split.heldout, batch_size=batch)}
        for index, control in enumerate(controls):
            evaluators[f"control:{index}"] = Evaluator(lm, control, batch_size=batch)
        means = evaluators["discovery"].head_means() if settings.ablation == "mean" else None
        return cls(evaluators, journal, settings.ablation, means, progress)

    @property
    def control_names(self) -> list[str]:
        return [name for name in self.evaluators if name.startswith("control:")]

    def get(self, split: str, heads: Sequence[Head]) -> EvalResult:
        """One condition, from the journal or evaluated now (and journalled)."""
        evaluator = self.evaluators[split]
        key = condition_key(split, heads)
        cached = self.journal.get(key, evaluator.task)
        if cached is not None:
            return cached
        result = evaluator.run(heads, mode=self.mode, means=self.means)  # type: ignore[arg-type]
        self.journal.put(key, result)
        return result

    def many(self, split: str, head_sets: Sequence[Sequence[Head]], label: str) -> list[EvalResult]:
        """Several conditions on one set, in order, with progress."""
        progress = Progress(len(head_sets), label, bar=self.progress)
        results = []
        for heads in head_sets:
            results.append(self.get(split, heads))
            progress.update()
        progress.close()
        return results

    def baselines(self) -> dict[str, EvalResult]:
        """The intact model on every set (timed where computed, not read from the journal); the discovery
        evaluator's layer cache is filled on the way."""
        base = {}
        for name in self.evaluators:
            started, journalled = time.perf_counter(), self.journal.has(condition_key(name, ()))
            base[name] = self.get(name, ())
            if not journalled:
                self.seconds[name] = time.perf_counter() - started
        self.evaluators["discovery"].warm_layer_cache()  # a resumed run has its baseline from the journal
        return base
