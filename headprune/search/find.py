"""``find``: screen every head, search joint ablations of the best, and test the winner on held-out data.

The protocol (see shared/mission.md): split the task into disjoint discovery and held-out sets; score every
query head ablated alone on discovery, paired against the intact model; take the best M as nominees;
evaluate every subset of the nominees of size 2..K (optionally extend the best set greedily); freeze the
best F sets whose every head earns its place against the set without it (``headprune.search.parsimony``) as
finalists, using discovery only; score each on held-out; the discovery rank-1 set is the primary result and
gets the verdict. Nothing is re-chosen after looking at held-out numbers.
"""

from __future__ import annotations

import itertools
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from headprune.ablation import means_digest
from headprune.devices import dtype_name
from headprune.distributed import Team
from headprune.errors import SearchSettingsError
from headprune.evaluation.contract import tolerance
from headprune.heads import Head
from headprune.models import LoadedModel, load_model
from headprune.progress import duration
from headprune.record_json import to_json
from headprune.search.conditions import Conditions
from headprune.search.determinism import check_determinism
from headprune.search.generations import heldout_generations
from headprune.search.journal import JOURNAL_NAME
from headprune.search.paired import Paired, compare
from headprune.search.pruner import Pruner
from headprune.search.result import (Baseline, ControlEffect, Finalist, FindResult, FindSettings, ModelInfo,
                                     Prescreen, ScreenRow, SetRecord, SplitInfo, TaskInfo)
from headprune.search.split import Inputs, TaskLike, load_inputs
from headprune.search.stats import holm, spearman, verdict

log = logging.getLogger("headprune")

RANK_KEYS = ("gain", "margin")
SCREENS = ("exact", "attribution", "halving")

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


def check_settings(settings: FindSettings, *, resume: bool = False, out: Path | None = None) -> None:
    """Refuse settings that cannot work, naming them.

    Raises:
        SearchSettingsError
    """
    def refuse(message: str, *names: str) -> None:
        raise SearchSettingsError(message, settings=names)

    if settings.screen not in SCREENS:
        refuse(f"screen must be one of {', '.join(SCREENS)}, not {settings.screen!r}", "screen")
    if settings.candidates is not None and settings.candidates < settings.nominees and settings.objective == "improve":
        refuse(f"candidates ({settings.candidates}) is smaller than nominees ({settings.nominees})",
               "candidates", "nominees")
    if settings.rank_by not in RANK_KEYS:
        refuse(f"rank_by must be one of {', '.join(RANK_KEYS)}, not {settings.rank_by!r}", "rank_by")
    if not 0 < settings.alpha < 1:
        refuse(f"alpha must be between 0 and 1, got {settings.alpha}", "alpha")
    if min(settings.nominees, settings.max_heads, settings.finalists) < 1 or settings.extend < 0:
        refuse("nominees, max_heads and finalists must be at least 1, extend at least 0",
               "nominees", "max_heads", "finalists", "extend")
    if settings.max_heads > settings.nominees:
        refuse(f"max_heads ({settings.max_heads}) is larger than nominees ({settings.nominees})",
               "max_heads", "nominees")
    if resume and out is None:
        refuse("resume needs out (the folder of the interrupted run)", "resume", "out")
    from headprune.search.compress import check_objective

    check_objective(settings)


def find(
    model: str | LoadedModel,
    task: TaskLike,
    *,
    heldout_task: TaskLike | None = None,
    discovery: int = 2000,
    heldout: int = 1000,
    seed: int = 0,
    ablation: str = "zero",
    nominees: int = 10,
    max_heads: int = 3,
    extend: int = 0,
    finalists: int = 10,
    control: TaskLike | Sequence[TaskLike] | None = None,
    control_limit: int = 500,
    alpha: float = 0.05,
    rank_by: str = "gain",
    screen: str = "exact",
    candidates: int = 30,
    objective: str = "improve",
    max_drop: float | None = None,
    prefer: str | None = None,
    patience: int | None = None,
    compress_search: str | None = None,
    beam_width: int | None = None,
    batch_size: int | str = "auto",
    out: Path | None = None,
    resume: bool = False,
    progress: bool = False,
    device: str = "auto",
    dtype: str = "auto",
    trust_remote_code: bool = False,
    device_map: str | None = None,
    max_memory: str | dict | None = None,
    team: Team | None = None,
) -> FindResult:
    """Find a small head set whose removal improves ``task``, and test it on held-out data.

    Args:
        model: model spec or loaded model.
        task: the task (spec or Task); must have an accuracy (choice or generate).
        heldout_task: a separate task for held-out examples (default: split ``task``).
        discovery, heldout: split sizes; seed: split and bootstrap seed.
        ablation: ``zero`` or ``mean`` (means over the discovery inputs).
        nominees: M, the best single heads kept for the joint search.
        max_heads: K, joint search evaluates every nominee subset of size 2..K.
        extend: greedy steps beyond K (each adds the head that most improves discovery, while it does).
        finalists: F, the best sets on discovery scored on held-out.
        control: second tasks measured for the finalists (the trade-off); control_limit caps their sizes.
        alpha: significance level of the verdict.
        rank_by: ``gain`` (counts) or ``margin`` (mean margin change) as the first ranking key.
        screen: ``exact`` (every head ablated alone), ``attribution`` (a one-pass first-order estimate for
            every head, then the best ``candidates`` heads scored exactly) or ``halving`` (successive halving
            on growing shares of discovery, then the ``candidates`` survivors scored exactly).
        objective: ``improve`` (the protocol above) or ``compress``: the largest head set whose removal keeps
            discovery accuracy within ``max_drop`` points of the intact model (default 0.5), grown from the
            screen's least harmful ``prefer`` units (``heads``, the default, or whole key/value ``groups``)
            until ``patience`` (default 3) units in a row break the budget; its held-out verdict is a
            non-inferiority test (``headprune.search.compress``).
        compress_search: ``greedy`` (default: galloping, with backtracking) or ``beam`` (keeps the ``beam_width``
            best sets, default 4, and tries each with the next unit every round).
        out: folder for journal.jsonl (resume); ``None`` keeps everything in memory.
        resume: continue the journal in ``out``.
        device, dtype: where and in which precision the model runs (``auto``: a GPU in bfloat16 when there is
            one, else the CPU in float32); margins and statistics are float32 either way.
        trust_remote_code: allow a checkpoint whose class only its own code defines.
        device_map, max_memory: spread a model too large for one GPU over several (see ``load_model``).
        team: the processes of a data-parallel run (``headprune.distributed.join()``); each evaluates a share
            of every stage's conditions, rank 0 alone writes the journal. Default: this process alone.

    Raises:
        SearchSettingsError, TaskError, ResultFileError, WorkerLostError, and the loading errors.
    """
    from headprune.search.compress import compress_fields

    started = time.perf_counter()
    settings = FindSettings(seed=seed, ablation=ablation, nominees=nominees, max_heads=max_heads, extend=extend,
                            finalists=finalists, alpha=alpha, rank_by=rank_by, batch_size=batch_size, screen=screen,
                            candidates=candidates if screen != "exact" else None, control_limit=control_limit,
                            **compress_fields(objective, max_drop, prefer, patience, compress_search, beam_width))
    team = team or Team()
    if team.restarted and out is not None and (Path(out) / JOURNAL_NAME).is_file() and not resume:
        log.info("restarted by the launcher: resuming from %s", Path(out) / JOURNAL_NAME)
        resume = True
    check_settings(settings, resume=resume, out=out)
    if device_map is not None and team.parallel:
        raise SearchSettingsError("device_map with several processes: each process would spread its model over "
                                  "every visible GPU; give each its own (CUDA_VISIBLE_DEVICES) or run one process",
                                  settings=("device_map",))
    inputs = load_inputs(task, heldout_task, control, settings, discovery, heldout)
    lm = load_model(model, dtype=dtype, device=team.device(device), trust_remote_code=trust_remote_code,
                    device_map=device_map, max_memory=max_memory) if isinstance(model, str) else model
    if team.parallel:
        log.info("data-parallel: %d processes share every stage's conditions", team.world)
    if settings.objective == "compress":
        from headprune.search.compress import check_layout

        check_layout(lm.grid, settings.prefer)
    if settings.nominees > lm.grid.total:
        settings = FindSettings(**{**to_json(settings), "nominees": lm.grid.total,
                                   "max_heads": min(settings.max_heads, lm.grid.total)})
    conditions = Conditions.start(lm, inputs.split, inputs.controls, settings, out=out, resume=resume,
                                  progress=progress, team=team)
    search = _Search(lm, conditions, settings)
    search.timings["setup"] = time.perf_counter() - started
    result = search.run(inputs)
    search.timings["total"] = time.perf_counter() - started
    return _with_timings(result, search.timings)


class _Search:
    """The stages of one find run, each reading the conditions it needs through the journal."""

    def __init__(self, lm: LoadedModel, conditions: Conditions, settings: FindSettings) -> None:
        self.lm, self.conditions, self.settings = lm, conditions, settings
        self.timings: dict[str, float] = {}

    def _rank(self, paired: Paired, heads: Sequence[Head]) -> tuple:
        return rank_key(paired, heads, self.settings.rank_by)

    def _timed(self, stage: str, mark: float) -> None:
        self.timings[stage] = time.perf_counter() - mark

    def _paired(self, head_sets: list[tuple[Head, ...]], label: str) -> dict[tuple[Head, ...], Paired]:
        results = self.conditions.many("discovery", head_sets, label)
        return {heads: compare(self.base["discovery"], result) for heads, result in zip(head_sets, results)}

    def run(self, inputs: Inputs) -> FindResult:
        mark = time.perf_counter()
        self.base = self.conditions.baselines()
        check_determinism(self.conditions, self.base["discovery"])  # before anything is paired against it
        self._timed("baseline", mark)
        if self.settings.objective == "compress":
            from headprune.search import compress

            screened, prescreen = self._screen()
            evaluated, finalist_records, compression = compress.run(self, screened, prescreen)
            return replace(self._record(inputs, screened, prescreen, [], evaluated, finalist_records),
                           compression=compression)
        self._announce_cost()
        screened, prescreen = self._screen()
        pruner = Pruner(self.conditions, self.base["discovery"], self._rank,
                        "margin" if self.settings.rank_by == "margin" else "accuracy", self.settings.alpha,
                        tolerance(dtype_name(self.lm.dtype)))
        evaluated, nominees = self._joint(screened, pruner)
        mark = time.perf_counter()
        frozen, found = pruner.freeze(evaluated, self.settings.finalists)  # every head earns its place
        self._timed("parsimony", mark)
        records = [replace(f, contributions=found[heads]) for f, heads in zip(self._finalists(frozen, evaluated), frozen)]
        records[0] = replace(records[0], contributions=pruner.heldout(frozen[0], found[frozen[0]]))  # after the verdict
        return replace(self._record(inputs, screened, prescreen, nominees, evaluated, records),
                       parsimony=pruner.record(len(frozen[0])))

    def _announce_cost(self) -> None:
        """Before paying for it: the planned conditions, the measured time of one, and the estimated total."""
        settings, conditions = self.settings, self.conditions
        screen = settings.candidates if settings.screen != "exact" else self.lm.grid.total
        joint = expected_joint_evaluations(min(settings.nominees, screen), settings.max_heads)
        finals = settings.finalists * (1 + len(conditions.control_names))
        each = conditions.seconds.get("discovery")
        if each is None:  # resumed: the baseline came from the journal
            log.info("planned: %d screen, %d joint and %d held-out/control conditions (resuming: %d in the journal)",
                     screen, joint, finals, len(conditions.journal))
            return
        held = conditions.seconds.get("heldout", each)
        # An intact run goes through every layer; ablated discovery runs start at the lowest ablated layer,
        # so this is an upper bound.
        world = conditions.team.world
        total = (each * (screen + joint + settings.extend * 2 * settings.nominees) + held * finals) / world
        log.info("planned: %d screen, %d joint and %d held-out/control conditions; %.1f s per discovery condition "
                 "measured; estimated at most %s in all%s", screen, joint, finals, each, duration(total),
                 f" on {world} processes" if world > 1 else "")
        if settings.screen == "exact" and self.lm.device.type == "cpu" and each * screen / world > 3600:
            log.warning("the exact screen alone is estimated at %s on the CPU; faster: --screen attribution "
                        "(one pass, then --candidates exactly), --screen halving, a GPU, or more processes "
                        "(torchrun --nproc-per-node N -m headprune find ...)", duration(each * screen / world))

    def _screen(self) -> tuple[list[tuple[Head, Paired, float | None]], Prescreen | None]:
        """Stage 1: every query head alone on discovery (or the candidates a cheaper pre-screen picks)."""
        mark = time.perf_counter()
        settings, conditions = self.settings, self.conditions
        to_screen = self.lm.grid.all_heads()
        estimates: dict[Head, float] | None = None
        prescreen: Prescreen | None = None
        if settings.screen == "attribution":
            from headprune.search.attribution import estimate_effects

            # Rank 0's estimates for every process: the candidates must not depend on a device's rounding.
            remembered = conditions.journal.remember("prescreen|attribution", lambda: {
                str(h): e for h, e in estimate_effects(conditions.evaluators["discovery"], means=conditions.means).items()})
            estimates = conditions.team.broadcast({Head.parse(name): value for name, value in remembered.items()})
            to_screen = sorted(to_screen, key=lambda h: (-estimates[h], h))[: settings.candidates]
        elif settings.screen == "halving":
            from headprune.search.halving import halving_candidates

            to_screen, rounds = halving_candidates(
                self.lm, conditions.evaluators["discovery"].task, keep=settings.candidates, rank_key=self._rank,
                mode=settings.ablation, means=conditions.means, batch_size=settings.batch_size,
                progress=conditions.progress, journal=conditions.journal)
            to_screen, rounds = conditions.team.broadcast((to_screen, rounds))
            prescreen = Prescreen("halving", len(to_screen), rounds=rounds)
        self._timed("prescreen", mark)
        singles = self._paired([(h,) for h in to_screen], "screen")
        screened = [(h, singles[(h,)], estimates[h] if estimates else None) for h in to_screen]
        if estimates is not None:
            rho = spearman(np.array([e for _, _, e in screened]), np.array([p.margin_change for _, p, _ in screened]))
            prescreen = Prescreen("attribution", len(screened), estimates={str(h): v for h, v in estimates.items()},
                                  spearman_on_candidates=rho)
        self._timed("screen", mark)
        return screened, prescreen

    def _joint(self, screened: list[tuple[Head, Paired, float | None]], pruner: Pruner
               ) -> tuple[dict[tuple[Head, ...], Paired], list[Head]]:
        """Stage 2: every subset of the nominees of size 2..K, then optional greedy growth (each step only
        while the added head earns its place, ``headprune.search.parsimony``)."""
        mark = time.perf_counter()
        settings = self.settings
        ranked = sorted(screened, key=lambda row: self._rank(row[1], (row[0],)))
        nominees = [head for head, _, _ in ranked[: settings.nominees]]
        evaluated = {(head,): paired for head, paired, _ in ranked[: settings.nominees]}
        subsets = [tuple(sorted(c)) for size in range(2, settings.max_heads + 1)
                   for c in itertools.combinations(nominees, size)]
        evaluated.update(self._paired(subsets, "joint"))
        best = min(evaluated, key=lambda h: self._rank(evaluated[h], h))
        pool = [head for head, _, _ in ranked[: 2 * settings.nominees]]
        for _ in range(settings.extend):
            grown = [tuple(sorted((*best, h))) for h in pool if h not in best]
            if not grown:
                break
            evaluated.update(self._paired(grown, "extend"))
            candidate = min(grown, key=lambda h: self._rank(evaluated[h], h))
            if not pruner.adds(candidate, best, next(h for h in candidate if h not in best)):
                break
            best = candidate
        self._timed("joint", mark)
        return evaluated, nominees

    def _finalists(self, frozen: list[tuple[Head, ...]], evaluated: dict[tuple[Head, ...], Paired]
                   ) -> list[Finalist]:
        """Held-out (and controls) for each finalist, frozen on discovery beforehand."""
        mark = time.perf_counter()
        conditions, seed = self.conditions, self.settings.seed
        heldout = conditions.many("heldout", frozen, "held-out")
        controls = [conditions.many(name, frozen, name) for name in conditions.control_names]
        tests = [verdict(self.base["heldout"].correct, after.correct, alpha=self.settings.alpha, seed=seed)
                 for after in heldout]
        adjusted = holm([test.p_value for test in tests])
        records = []
        for rank, (heads, test) in enumerate(zip(frozen, tests), start=1):
            if rank > 1:  # chosen among finalists after held-out is visible: exploratory, Holm-adjusted
                test = replace(test, role="exploratory", adjusted_p=adjusted[rank - 1])
            effects = tuple(ControlEffect.measure(self.base[name], results[rank - 1], seed)
                            for name, results in zip(conditions.control_names, controls))
            records.append(Finalist(rank, tuple(str(h) for h in heads), evaluated[heads], test, effects))
        self._timed("heldout", mark)
        return records

    def _record(self, inputs: Inputs, screened: list, prescreen: Prescreen | None, nominees: list[Head],
                evaluated: dict[tuple[Head, ...], Paired], finalists: list[Finalist]) -> FindResult:
        lm, split = self.lm, inputs.split
        ranked_sets = sorted(evaluated, key=lambda h: self._rank(evaluated[h], h))
        names = self.conditions.control_names
        return FindResult(
            model=ModelInfo(lm.name, lm.weight_hash, lm.adapter.family, lm.model.config.model_type,
                            lm.grid.num_layers, lm.grid.num_heads, lm.grid.num_kv_heads, lm.grid.head_dim),
            task=TaskInfo(inputs.task.name, inputs.task.kind, len(inputs.task), inputs.task.content_hash(),
                          inputs.specs["task"], dict(inputs.task.settings), split.discovery.content_hash()),
            heldout_task=TaskInfo(split.heldout.name, split.heldout.kind, len(split.heldout),
                                  split.heldout.content_hash(), inputs.specs["heldout"]),
            control_tasks=tuple(TaskInfo(c.name, c.kind, len(c), c.content_hash()) for c in inputs.controls),
            split=SplitInfo(self.settings.seed, len(split.discovery), len(split.heldout), split.source,
                            split.duplicates_dropped, split.conflicts_dropped),
            settings=self.settings,
            baseline=Baseline(self.base["discovery"].summary(), self.base["heldout"].summary(),
                              tuple(self.base[name].summary() for name in names)),
            screen=tuple(ScreenRow(str(h), p, e) for h, p, e in screened),
            prescreen=prescreen,
            nominees=tuple(str(h) for h in nominees),
            sets=tuple(SetRecord(tuple(str(h) for h in heads), evaluated[heads]) for heads in ranked_sets),
            finalists=tuple(finalists),
            means_digest=None if self.conditions.means is None else means_digest(self.conditions.means),
            generations=heldout_generations(self.conditions, self.base["heldout"], finalists),
        )


def _with_timings(result: FindResult, timings: dict[str, float]) -> FindResult:
    return replace(result, timings={k: round(v, 3) for k, v in timings.items()})


def expected_joint_evaluations(nominees: int, max_heads: int) -> int:
    """C(M,2) + ... + C(M,K): the number of sets the exhaustive stage evaluates."""
    return sum(math.comb(nominees, k) for k in range(2, max_heads + 1))


__all__ = ["SCREENS", "RANK_KEYS", "check_settings", "expected_joint_evaluations", "find", "rank_key"]
