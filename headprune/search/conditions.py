"""Conditions: (set, head set) pairs evaluated once each, through the journal.

Every stage of find asks for lists of conditions on a named set (``discovery``, ``heldout``, ``control:0``,
...); a condition already in the journal is read back, the others are evaluated and appended. The intact
model's run on each set is the baseline every condition is paired against.

In a data-parallel run (``headprune.core.distributed``) each call's missing conditions are dealt out to the
processes one per process per round; the results are gathered to every process and journalled by rank 0, so
every process holds the same journal and returns the same results as a run on its own.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from headprune.core.devices import dtype_name
from headprune.core.distributed import Team, deal
from headprune.core.progress import Progress
from headprune.core.record_json import to_json
from headprune.evaluation import EvalResult, Evaluator
from headprune.heads import Head
from headprune.loading.models import LoadedModel
from headprune.search.determinism import run_environment
from headprune.search.find_result import FindSettings
from headprune.search.journal import Journal
from headprune.search.split import GuardInput, Split
from headprune.tasks import Task

log = logging.getLogger("headprune")


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
    team: Team = field(default_factory=Team)

    @classmethod
    def start(cls, lm: LoadedModel, split: Split, controls: Sequence[Task], settings: FindSettings, *,
              out: Path | None, resume: bool, progress: bool, rule: str, team: Team | None = None,
              guards: Sequence[GuardInput] = (), fresh: Task | None = None) -> Conditions:
        """Open (or resume) the journal for these inputs and build one evaluator per set (a guard's discovery and
        held-out examples are two sets, ``guard-discovery:i`` and ``guard-heldout:i``; ``find --shrink``'s fresh
        examples are the set ``fresh``). ``rule``: the selection rule's journal sentence
        (``headprune.search.rules``), so that a run of another rule is not resumed.

        In a data-parallel run rank 0 owns the journal file and the other processes get its entries.
        """
        team = team or Team()
        identity = {"model": lm.name, "model_hash": lm.weight_hash, "task": split.discovery.content_hash(),
                    "heldout": split.heldout.content_hash(), "controls": [c.content_hash() for c in controls],
                    "dtype": dtype_name(lm.dtype), **to_json(settings), "environment": run_environment(lm),
                    "selection": rule, "sizes": {"discovery": len(split.discovery),
                                                           "heldout": len(split.heldout)}}
        if guards:  # only then: a journal of a run without guards resumes as before
            identity["guards"] = [{"task": g.task.content_hash(), "discovery": g.split.discovery.content_hash(),
                                   "margin": g.margin} for g in guards]
        if fresh is not None:  # only then, as guards
            identity["fresh"] = fresh.content_hash()
        batch = settings.batch_size
        # Discovery is evaluated hundreds of times: it reuses the intact model's layer inputs. Every input is
        # checked against the model (lengths, then finite outputs) before a journal is written.
        evaluators = {"discovery": Evaluator(lm, split.discovery, batch_size=batch, reuse_layers=True),
                      "heldout": Evaluator(lm, split.heldout, batch_size=batch)}
        for index, control in enumerate(controls):
            evaluators[f"control:{index}"] = Evaluator(lm, control, batch_size=batch)
        for index, guard in enumerate(guards):
            evaluators[f"guard-discovery:{index}"] = Evaluator(lm, guard.split.discovery, batch_size=batch)
            evaluators[f"guard-heldout:{index}"] = Evaluator(lm, guard.split.heldout, batch_size=batch)
        if fresh is not None:
            evaluators["fresh"] = Evaluator(lm, fresh, batch_size=batch)
        evaluators["discovery"].check_finite()
        opened: list[Journal] = []  # rank 0's, with the file and its lock; the others get its entries

        def open_journal() -> dict[str, dict]:
            opened.append(Journal(out, identity, resume=resume))
            return opened[0].entries

        entries = team.from_main(open_journal)
        journal = opened[0] if team.is_main else Journal(None, identity, entries=entries)
        means = evaluators["discovery"].head_means() if settings.ablation == "mean" else None
        means = team.broadcast(means)  # one set of means for all processes, whatever their devices
        return cls(evaluators, journal, settings.ablation, means, progress and team.is_main, team=team)

    @property
    def control_names(self) -> list[str]:
        return [name for name in self.evaluators if name.startswith("control:")]

    def get(self, split: str, heads: Sequence[Head]) -> EvalResult:
        """One condition, from the journal or evaluated now (and journalled)."""
        return self.many(split, [heads], "", quiet=True)[0]

    def many(self, split: str, head_sets: Sequence[Sequence[Head]], label: str, *,
             quiet: bool = False) -> list[EvalResult]:
        """Several conditions on one set, in order, with progress; those not in the journal are evaluated
        (spread over the processes of a data-parallel run) and journalled."""
        progress = None if quiet else Progress(len(head_sets), label, bar=self.progress)
        self._fill([(split, tuple(heads)) for heads in head_sets], progress)
        if progress is not None:
            progress.close()
        task = self.evaluators[split].task
        return [self.journal.get(condition_key(split, heads), task) for heads in head_sets]

    def _fill(self, wanted: Sequence[tuple[str, tuple[Head, ...]]], progress: Progress | None = None) -> None:
        """Evaluate and journal the conditions of ``wanted`` the journal lacks, one per process per round."""
        keys = [condition_key(split, heads) for split, heads in wanted]
        missing = [keys.index(key) for key in dict.fromkeys(keys) if not self.journal.has(key)]
        if progress is not None and len(missing) < len(wanted):
            progress.update(len(wanted) - len(missing))
        for round_ in deal(missing, self.team):
            mine = round_[self.team.rank] if self.team.rank < len(round_) else None
            result = self._evaluate(*wanted[mine]) if mine is not None else None
            for index, gathered in zip(round_, self.team.gather(result)):
                self.journal.put(keys[index], gathered)
            if progress is not None:
                progress.update(len(round_))

    def _evaluate(self, split: str, heads: Sequence[Head]) -> EvalResult:
        started = time.perf_counter()
        result = self.evaluators[split].run(heads, mode=self.mode, means=self.means)  # type: ignore[arg-type]
        if not heads:
            self.seconds[split] = time.perf_counter() - started
        return result

    def baselines(self) -> dict[str, EvalResult]:
        """The intact model on every set (timed where computed here, not read from the journal).

        Every process runs the intact discovery pass itself (it fills the layer cache the ablated runs start
        from); rank 0's results are the ones kept. The other sets are dealt out like any condition.
        """
        intact = condition_key("discovery", ())
        missing = [name for name in self.evaluators if not self.journal.has(condition_key(name, ()))]
        if missing:
            log.info("baseline: the intact model on %s", ", ".join(
                f"{name} ({len(self.evaluators[name].task)} examples)" for name in missing))
        if not self.journal.has(intact):
            self.journal.put(intact, self.team.broadcast(self._evaluate("discovery", ())))
        self._fill([(name, ()) for name in self.evaluators])
        self.evaluators["discovery"].warm_layer_cache()  # a resumed run has its baseline from the journal
        return {name: self.journal.get(condition_key(name, ()), evaluator.task)
                for name, evaluator in self.evaluators.items()}
