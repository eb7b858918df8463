"""The stages both objectives of ``find`` share: baseline, screen, finalists (held-out and controls) and the record.

An objective (``headprune.search.improve``, ``headprune.search.compress``) is a function of a :class:`Stages`
and the loaded inputs: it runs the baseline and the screen, chooses its sets on discovery through
:meth:`Stages.evaluate`, freezes them, and only then asks :meth:`Stages.finalists` for the held-out numbers.
Every condition goes through the journal (``Conditions``), so each stage resumes where it was interrupted,
and each stage's wall time is kept under its name in ``timings`` (stages do not overlap).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import numpy as np

from headprune.evaluation import EvalResult, Evaluator
from headprune.heads import Head
from headprune.loading.model_download import commit_of
from headprune.loading.models import LoadedModel
from headprune.search.conditions import Conditions, condition_key
from headprune.search.determinism import check_determinism
from headprune.search.effects import ControlEffect
from headprune.search.find_result import (
    Baseline,
    Finalist,
    FindResult,
    FindSettings,
    GuardTask,
    ModelInfo,
    Prescreen,
    ScreenRow,
    SetRecord,
    SplitInfo,
    TaskInfo,
)
from headprune.search.folds import Folds
from headprune.search.generations import heldout_generations
from headprune.search.guard_search import heldout_effects
from headprune.search.guards import Guard
from headprune.search.paired import Paired, compare
from headprune.search.score import score_intervals
from headprune.search.split import Inputs
from headprune.search.stats import exploratory, spearman, verdict
from headprune.surgery.ablation import means_digest
from headprune.tasks import Task

Screened = list[tuple[Head, Paired, float | None]]  # each screened head, its discovery result, its estimate
Evaluated = dict[tuple[Head, ...], Paired]  # head set (sorted) -> discovery result paired with the intact model


def rank_key(paired: Paired, heads: Sequence[Head], rank_by: str) -> tuple:
    """Sort key, best first.

    ``gain`` (the research protocol's order): discovery gain, then fewer damaged, then fewer heads, then the
    margin change; a head that changes no answer can therefore never put a larger set ahead of a smaller one.
    ``margin``: the mean margin change first (the user's chosen measure, continuous, so exact ties are rare),
    then gain, fewer damaged, fewer heads. Under either key a set is frozen as a finalist only when every one
    of its heads earns its place on the same measure (``headprune.search.parsimony``).
    """
    names = tuple(str(h) for h in heads)
    if rank_by == "margin":
        return (-paired.margin_change, -paired.gain, paired.damaged, len(heads), names)
    return (-paired.gain, paired.damaged, len(heads), -paired.margin_change, names)


SINGLE_LEVEL = 0.7  # single heads are ranked by the lower end of this score interval of their discovery gain


def single_order(screened: Sequence[tuple[Head, Paired, object]], rank: Callable[..., tuple], rank_by: str
                 ) -> list[Head]:
    """The screened heads best first on all of discovery, as single-head finalists are taken.

    Under ``rank_by=gain``, by the lower end of the 70% score interval of the gain (about one standard error
    below it: the improvement the discovery data firmly support), then find's ranking key. A raw gain favours a
    head whose gain is the luck of many answers flipped at random over a head that rescues a few answers
    consistently; the held-out test then confirms the lucky one rarely. Measured through find's own code
    (scripts/passengers.py, one real head of +0.6 points among 17 null heads): the real head is taken about as
    often as by the raw gain where null heads flip 0.1-1% of answers, and 0.69 against 0.48 of the time where
    they flip 3%; the 95% bound takes it still more often there but less where null heads flip few answers.
    Under ``rank_by=margin`` (the user's chosen measure), find's ranking key alone (``"key"``: the same for
    gain, the rule before 0.2, which the simulation compares against)."""
    rows = list(screened)
    keys = [rank(paired, (head,)) for head, paired, _ in rows]
    if rank_by == "gain" and rows:
        lows, _ = score_intervals([p.rescued for _, p, _ in rows], [p.damaged for _, p, _ in rows],
                                  [p.n for _, p, _ in rows], alpha=1 - SINGLE_LEVEL)
        keys = [(-float(low), *key) for low, key in zip(lows, keys)]
    return [row[0] for _, row in sorted(zip(keys, rows), key=lambda item: item[0])]



class Stages:
    """The shared stages of one find run, each reading the conditions it needs through the journal.

    Attributes:
        base: the intact model's results per evaluated set (``discovery``, ``heldout``, each control), once
            :meth:`baseline` has run.
        timings: seconds per stage, by stage name.
    """

    def __init__(self, lm: LoadedModel, conditions: Conditions, settings: FindSettings) -> None:
        self.lm, self.conditions, self.settings = lm, conditions, settings
        self.base: dict = {}
        self.timings: dict[str, float] = {}
        self.folds: Folds | None = None  # improve: discovery's search and check halves (headprune.search.folds)
        self.search_half: Evaluated = {}  # with folds: every evaluated set on the search half
        self.guards: tuple[Guard, ...] = ()  # tasks the shipped set must not hurt (headprune.search.guards)

    def split_discovery(self) -> Folds:
        """From now on, rank on the search half too (:mod:`headprune.search.folds`); after :meth:`baseline`.
        Folds set beforehand (the simulation's) are kept."""
        if self.folds is None:
            self.folds = Folds.halves(self.base["discovery"].n, self.settings.seed)
        return self.folds

    def search_rank(self, heads: Sequence[Head]) -> tuple:
        """:func:`rank_key` of an evaluated set on the search half (the order that proposes sets)."""
        return rank_key(self.search_half[tuple(heads)], heads, self.settings.rank_by)

    def rank(self, paired: Paired, heads: Sequence[Head]) -> tuple:
        """:func:`rank_key` under this run's ``rank_by``."""
        return rank_key(paired, heads, self.settings.rank_by)

    @contextmanager
    def timed(self, stage: str) -> Iterator[None]:
        """Adds the wall time of the block to ``timings[stage]``."""
        mark = time.perf_counter()
        yield
        self.timings[stage] = self.timings.get(stage, 0.0) + time.perf_counter() - mark

    def evaluate(self, head_sets: list[tuple[Head, ...]], label: str) -> Evaluated:
        """Discovery results of a batch of head sets, each paired with the intact model."""
        base = self.base["discovery"]
        return {heads: compare(base, result) for heads, result in zip(head_sets, self.results(head_sets, label))}

    def results(self, head_sets: Sequence[tuple[Head, ...]], label: str) -> list[EvalResult]:
        """Discovery results of head sets, evaluated (and journalled) where the journal lacks them, quietly where it
        has them all; with folds, every set's search-half numbers are kept too."""
        quiet = all(self.conditions.journal.has(condition_key("discovery", heads)) for heads in head_sets)
        results = self.conditions.many("discovery", head_sets, label, quiet=quiet)
        if self.folds is not None:
            base = self.base["discovery"]
            self.search_half.update({heads: compare(base, result, self.folds.search)
                                     for heads, result in zip(head_sets, results) if heads})
        return results

    def intact(self) -> Paired:
        """The intact model paired with itself on discovery: the empty set."""
        return compare(self.base["discovery"], self.base["discovery"])

    def baseline(self) -> None:
        """The intact model on every set, checked for determinism before anything is paired against it."""
        with self.timed("baseline"):
            self.base = self.conditions.baselines()
            check_determinism(self.conditions, self.base["discovery"])

    def screen(self) -> tuple[Screened, Prescreen | None]:
        """Every query head alone on discovery (or the candidates a cheaper pre-screen picks)."""
        with self.timed("prescreen"):
            to_screen, estimates, prescreen = self._prescreen()
        with self.timed("screen"):
            singles = self.evaluate([(h,) for h in to_screen], "screen")
        screened = [(h, singles[(h,)], estimates[h] if estimates else None) for h in to_screen]
        if estimates is not None:  # against the exact numbers of the examples the estimate saw
            seen = self.search_half if self.folds is not None else singles
            rho = spearman(np.array([e for _, _, e in screened]), np.array([seen[(h,)].margin_change for h in to_screen]))
            rho = rho if math.isfinite(rho) else None  # undefined when either side is constant: JSON has no NaN
            prescreen = Prescreen("attribution", len(screened), estimates={str(h): v for h, v in estimates.items()},
                                  spearman_on_candidates=rho)
        return screened, prescreen

    def _prescreen(self) -> tuple[list[Head], dict[Head, float] | None, Prescreen | None]:
        """The heads to screen exactly: every head, or the best ``candidates`` by attribution or halving."""
        settings, conditions = self.settings, self.conditions
        heads = self.lm.grid.all_heads()
        if settings.screen == "attribution":
            estimates = self.estimates()
            return sorted(heads, key=lambda h: (-estimates[h], h))[: settings.candidates], estimates, None
        if settings.screen == "halving":
            from headprune.search.halving import halving_candidates

            survivors, rounds = halving_candidates(
                self.lm, self._search_task(), keep=settings.candidates, rank_key=self.rank,
                mode=settings.ablation, means=conditions.means, batch_size=settings.batch_size,
                progress=conditions.progress, journal=conditions.journal)
            survivors, rounds = conditions.team.broadcast((survivors, rounds))
            return survivors, None, Prescreen("halving", len(survivors), rounds=rounds)
        return heads, None, None

    @property
    def can_estimate(self) -> bool:
        """Whether first-order estimates can be taken (a model with gradients; the simulation's counts-only models
        have none)."""
        return "discovery" in self.conditions.evaluators

    def estimates(self, given: Sequence[Head] = ()) -> dict[Head, float]:
        """Every head's estimated effect on the search half (all of discovery without folds), with the heads
        ``given`` already removed: attribution patching (``headprune.search.attribution``), journalled. Rank 0's
        estimates for every process: what they choose must not depend on a device's rounding."""
        from headprune.search.attribution import estimate_effects

        conditions, settings = self.conditions, self.settings
        discovery = conditions.evaluators["discovery"]
        if self.folds is not None:  # proposing is the search half's job alone
            discovery = Evaluator(self.lm, self._search_task(), batch_size=settings.batch_size)
        key = "prescreen|attribution" + (f"|given:{','.join(map(str, sorted(given)))}" if given else "")
        remembered = conditions.journal.remember(key, lambda: {
            str(h): e for h, e in estimate_effects(discovery, means=conditions.means, ablated=given).items()})
        return conditions.team.broadcast({Head.parse(name): value for name, value in remembered.items()})

    def _search_task(self) -> Task:
        """The discovery examples a pre-screen may see: the search half (all of them without folds)."""
        task = self.conditions.evaluators["discovery"].task
        return task if self.folds is None else task.subset(np.flatnonzero(self.folds.search).tolist())

    def finalists(self, frozen: list[tuple[Head, ...]], evaluated: Evaluated) -> list[Finalist]:
        """Held-out (and controls) for each finalist, frozen on discovery beforehand; the first is the primary
        set and gets the verdict, the others are exploratory (one of ``F`` comparisons, Bonferroni-adjusted:
        :func:`headprune.search.stats.exploratory`). Each finalist's controls are adjusted together the same way
        (:mod:`headprune.search.effects`)."""
        with self.timed("heldout"):
            conditions, alpha = self.conditions, self.settings.alpha
            heldout = conditions.many("heldout", frozen, "held-out")
            names = conditions.control_names
            controls = [conditions.many(name, frozen, name) for name in names]
            guarded = heldout_effects(self, frozen)
            records = []
            for rank, (heads, after) in enumerate(zip(frozen, heldout), start=1):
                test = verdict(self.base["heldout"].correct, after.correct, alpha=alpha)
                if rank > 1:  # chosen among finalists after held-out is visible: exploratory, adjusted
                    test = exploratory(test, len(frozen))
                effects = tuple(ControlEffect.measure(self.base[name], results[rank - 1], alpha=alpha,
                                                      family=len(names))
                                for name, results in zip(names, controls))
                records.append(Finalist(rank, tuple(str(h) for h in heads), evaluated[heads], test, effects,
                                        guards=guarded[rank - 1]))
        return records

    def record(self, inputs: Inputs, screened: Screened, prescreen: Prescreen | None, nominees: list[Head],
               evaluated: Evaluated, finalists: list[Finalist]) -> FindResult:
        """The run's record (without timings: the caller adds them once the run is over)."""
        lm, split = self.lm, inputs.split
        ranked_sets = sorted(evaluated, key=self.search_rank if self.folds is not None
                             else lambda h: self.rank(evaluated[h], h))
        names = self.conditions.control_names
        return FindResult(
            model=ModelInfo.of(lm.name, lm.weight_hash, lm.adapter.family, lm.model.config.model_type, lm.grid,
                               commit_of(lm.folder), lm.quantization.line() if lm.quantization else None),
            task=TaskInfo(inputs.task.name, inputs.task.kind, len(inputs.task), inputs.task.content_hash(),
                          inputs.specs["task"], dict(inputs.task.settings), split.discovery.content_hash()),
            heldout_task=TaskInfo(split.heldout.name, split.heldout.kind, len(split.heldout),
                                  split.heldout.content_hash(), inputs.specs["heldout"]),
            control_tasks=tuple(TaskInfo(c.name, c.kind, len(c), c.content_hash()) for c in inputs.controls),
            guard_tasks=tuple(GuardTask(TaskInfo(g.task.name, g.task.kind, len(g.split.discovery) + len(g.split.heldout),
                                                 g.task.content_hash(), g.spec), g.metric, g.margin)
                              for g in inputs.guards),
            split=SplitInfo(self.settings.seed, len(split.discovery), len(split.heldout), split.source,
                            split.duplicates_dropped, split.conflicts_dropped,
                            *(self.folds.sizes if self.folds is not None else (None, None))),
            settings=self.settings,
            baseline=Baseline(self.base["discovery"].summary(), self.base["heldout"].summary(),
                              tuple(self.base[name].summary() for name in names)),
            screen=tuple(ScreenRow(str(h), p, e, self.search_half.get((h,))) for h, p, e in screened),
            prescreen=prescreen,
            nominees=tuple(str(h) for h in nominees),
            sets=tuple(SetRecord(tuple(str(h) for h in heads), evaluated[heads], self.search_half.get(heads))
                       for heads in ranked_sets),
            finalists=tuple(finalists),
            means_digest=None if self.conditions.means is None else means_digest(self.conditions.means),
            generations=heldout_generations(self.conditions, self.base["heldout"], finalists),
        )


__all__ = ["SINGLE_LEVEL", "Evaluated", "Screened", "Stages", "rank_key", "single_order"]
