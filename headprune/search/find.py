"""``find``: screen every head, search head sets on discovery data, and test the chosen set on held-out data.

The protocol: split the task into disjoint discovery and held-out sets; score every query head ablated alone on
discovery, paired against the intact model; search head sets on discovery only; score the chosen sets on held-out,
where the primary set gets the verdict. Nothing is re-chosen after looking at held-out numbers. The search is the
objective's: ``headprune.search.improve`` (the default: joint subsets of the best single heads, each head admitted
on the half of discovery that did not propose its set, ``headprune.search.parsimony``) or
``headprune.search.compress`` (a large set whose removal costs discovery at most ``max_drop`` points).

This module is the driver: it checks the settings (``headprune.search.settings``), loads the inputs and the
model, opens the journal, and hands the shared stages (``headprune.search.stages``) to the objective.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from headprune.core.distributed import Team
from headprune.core.folder_lock import FolderLock
from headprune.core.io import refuse_unsafe_output
from headprune.core.paths import refuse_overlap
from headprune.core.registry import Registry
from headprune.errors import ResultFileError, SearchSettingsError
from headprune.loading.models import LoadedModel, load_model
from headprune.search.compress import compress
from headprune.search.conditions import Conditions
from headprune.search.determinism import one_kernel
from headprune.search.find_result import RESULT_NAME, FindResult
from headprune.search.guards import Guard
from headprune.search.improve import expected_joint_evaluations, improve
from headprune.search.journal import JOURNAL_NAME
from headprune.search.rules import find_rule
from headprune.search.settings import (DEFAULT_DISCOVERY, DEFAULT_HELDOUT, RANK_KEYS, SCREENS, SETTING_NAMES,
                                       FindSettings, check_layout, check_placement, check_plan_size, check_settings,
                                       fit_to_grid, settings_for)
from headprune.search.split import Inputs, TaskLike, fit_guards, load_inputs
from headprune.search.stages import Stages, rank_key

log = logging.getLogger("headprune")

OBJECTIVE_RUNS: Registry[str, Callable[[Stages, Inputs], FindResult]] = Registry(
    "objective", {"improve": improve, "compress": compress})


def find(
    model: str | LoadedModel, task: TaskLike, *, settings: FindSettings | None = None,
    heldout_task: TaskLike | None = None, discovery: int = DEFAULT_DISCOVERY, heldout: int = DEFAULT_HELDOUT,
    control: TaskLike | Sequence[TaskLike] | None = None, guard: str | Sequence[str] | None = None,
    out: Path | None = None, resume: bool = False,
    overwrite: bool = False, progress: bool = False, device: str = "auto", dtype: str = "auto",
    trust_remote_code: bool = False, device_map: str | None = None, max_memory: str | dict | None = None,
    team: Team | None = None, revision: str | None = None, default_guard: bool = False, **options: object,
) -> FindResult:
    """Find a small head set whose removal improves ``task``, and test it on held-out data.

    The search options are one :class:`FindSettings` (``settings``, defaults: ``FindSettings()``), or its fields
    as keywords (``find(model, task, seed=1, nominees=20)``); keywords given with ``settings`` replace its fields.

    Args:
        model: model spec or loaded model.
        task: the task (spec or Task); must have an accuracy (any kind but ``text``).
        settings: the search options: ``seed`` to ``beam_width`` below, and ``batch_size`` (sequences per forward
            pass, or ``auto``).
        heldout_task: a separate task for held-out examples (default: split ``task``).
        discovery, heldout: split sizes.
        control: second tasks measured for the finalists (the trade-off).
        guard: tasks the shipped set must not hurt, each ``TASK[:margin=M]`` (points, or nats for a text task):
            they steer the search and join the claim (``headprune.search.guards``).
        default_guard: where no ``guard`` is named (improve only), guard with ``general``, as the command line does
            by default; a model that cannot take it (not a causal language model, or too few of its texts fit the
            model's positions) runs without it, saying so.
        seed: split and bootstrap seed.
        ablation: ``zero`` or ``mean`` (means over the discovery inputs).
        nominees: M, the best single heads kept for the joint search.
        max_heads: K, joint search evaluates every nominee subset of size 2..K.
        extend: greedy steps beyond K (each adds the head that most improves discovery, while it does).
        finalists: F, the best sets on discovery scored on held-out.
        control_limit: caps the control tasks' sizes.
        alpha: significance level of the verdict.
        rank_by: ``gain`` (counts) or ``margin`` (mean margin change) as the first ranking key.
        screen: ``exact`` (every head ablated alone), ``attribution`` (a one-pass first-order estimate for
            every head, then the best ``candidates`` heads scored exactly, default 30) or ``halving`` (successive
            halving on growing shares of discovery, then the ``candidates`` survivors scored exactly).
        objective: ``improve`` (the protocol above) or ``compress``: the largest head set whose removal keeps
            discovery accuracy within ``max_drop`` points of the intact model (default 0.5), grown from the
            screen's least harmful ``prefer`` units (``heads``, the default, or whole key/value ``groups``)
            until ``patience`` (default 3) units in a row break the budget (or a cost cap); its held-out verdict is a
            non-inferiority test (``headprune.search.compress``).
        compress_search: ``greedy`` (default: galloping, with backtracking) or ``beam`` (keeps the ``beam_width``
            best sets, default 4, and tries each with the next unit every round).
        shrink: improve only: the primary set grown by whole key/value groups within this many accuracy points of it,
            tested on ``shrink_examples`` fresh examples, default 1,000 (``headprune.search.shrink``).
        out: folder for journal.jsonl (resume), locked for the run; ``None`` keeps everything in memory.
        resume: continue the journal in ``out``.
        overwrite: start afresh in an ``out`` that holds an earlier run (its journal is replaced); without it, or
            ``resume``, such a folder is refused.
        device, dtype: where and in which precision the model runs (``auto``: a GPU in bfloat16 when there is
            one, else the CPU in float32); margins and statistics are float32 either way.
        trust_remote_code: allow a checkpoint whose class only its own code defines, and lm-eval task files that
            run Python (``!function``, ``class:``).
        device_map, max_memory: spread a model too large for one GPU over several (see ``load_model``).
        revision: for a Hub id, the branch, tag or commit to read (default main); ``result.json`` records the
            commit read (``model.revision``).
        team: the processes of a data-parallel run (``headprune.core.distributed.join()``); each evaluates a share
            of every stage's conditions, rank 0 alone writes the journal. Default: this process alone.

    Raises:
        TypeError: a keyword that is neither an argument nor a setting.
        SearchSettingsError, TaskError, ResultFileError, WorkerLostError, and the loading errors.
    """
    started = time.perf_counter()
    unknown = sorted(set(options) - set(SETTING_NAMES))
    if unknown:
        raise TypeError(f"find() got unexpected keyword arguments: {', '.join(unknown)}")
    settings = settings_for(replace(settings or FindSettings(), **options))
    team = team or Team()
    resume, overwrite = resume_after_restart(out, team.restarted, resume=resume, overwrite=overwrite)
    check_settings(settings, resume=resume, out=out, guarded=bool(guard))
    check_placement(device_map, team.parallel)
    lock = _claim(out, team, resume=resume, overwrite=overwrite)
    try:
        return _run(model, task, heldout_task, control, settings, discovery, heldout, guard=guard,
                    default_guard=default_guard, out=out, resume=resume, progress=progress, device=device,
                    dtype=dtype, trust_remote_code=trust_remote_code, device_map=device_map, max_memory=max_memory,
                    team=team, started=started, revision=revision)
    finally:
        if lock is not None:
            lock.release()


def resume_after_restart(out: Path | None, restarted: bool, *, resume: bool, overwrite: bool) -> tuple[bool, bool]:
    """``(resume, overwrite)`` for a run: a process the launcher restarted after a failure (torchrun
    ``--max-restarts``) continues the journal its first attempt left in ``out``, whatever it was told."""
    if restarted and out is not None and (Path(out) / JOURNAL_NAME).is_file() and not resume:
        log.info("restarted by the launcher: resuming from %s", Path(out) / JOURNAL_NAME)
        return True, False
    return resume, overwrite


def _claim(out: Path | None, team: Team, *, resume: bool, overwrite: bool) -> FolderLock | None:
    """Rank 0 takes ``out`` for the run (its refusal reaches every process); the lock, to be released."""
    if out is None:
        return None
    lock = FolderLock(out, what="find")

    def claim() -> None:
        lock.acquire()
        try:
            check_run_folder(Path(out), resume=resume, overwrite=overwrite)
        except BaseException:
            lock.release()
            raise

    team.from_main(claim)
    return lock


def check_run_folder(out: Path, *, resume: bool, overwrite: bool) -> None:
    """A find run's folder: never a root or home folder; one that holds an earlier run only with ``resume`` (to
    continue it) or ``overwrite`` (to start afresh), never both.

    Raises:
        ResultFileError, SearchSettingsError
    """
    refuse_unsafe_output(out)
    if resume and overwrite:
        raise SearchSettingsError("resume continues the run in out, overwrite starts afresh: give one",
                                  settings=("resume", "overwrite"))
    earlier = [name for name in (JOURNAL_NAME, RESULT_NAME) if (out / name).exists()]
    if earlier and not resume and not overwrite:
        raise ResultFileError(f"{out} holds an earlier find run ({', '.join(earlier)}); give resume to continue it, "
                              "overwrite to start afresh, or another out folder",
                              settings=("resume", "overwrite", "out"))


def _run(model: str | LoadedModel, task: TaskLike, heldout_task: TaskLike | None,
         control: TaskLike | Sequence[TaskLike] | None, settings, discovery: int, heldout: int, *,  # noqa: ANN001
         out: Path | None, resume: bool, progress: bool, device: str, dtype: str, trust_remote_code: bool,
         device_map: str | None, max_memory: str | dict | None, team: Team, started: float,
         revision: str | None = None, guard: str | Sequence[str] | None = None,
         default_guard: bool = False) -> FindResult:
    """The run itself, once the settings are checked and the folder is held."""
    inputs = load_inputs(task, heldout_task, control, settings, discovery, heldout,
                         trust_remote_code=trust_remote_code, guard=guard, default_guard=default_guard)
    lm = load_model(model, dtype=dtype, device=team.device(device), trust_remote_code=trust_remote_code,
                    device_map=device_map, max_memory=max_memory,
                    revision=revision) if isinstance(model, str) else model
    if out is not None:  # the folder the model was read from (a Hub id's snapshot, a GGUF's conversion): not out
        refuse_overlap(out, [("the model", lm.folder)], advice="give find a new or empty folder of its own")
    inputs, notes = fit_guards(inputs, lm, settings)  # examples longer than the model's positions left out
    if team.parallel:
        log.info("data-parallel: %d processes share every stage's conditions", team.world)
    check_layout(lm.grid, settings.prefer)
    settings = fit_to_grid(settings, lm.grid)
    check_plan_size(settings)  # the joint search's size, before anything is computed
    with one_kernel(team):
        conditions = Conditions.start(lm, inputs.split, inputs.controls, settings, out=out, resume=resume,
                                      progress=progress, rule=find_rule().journal, team=team, guards=inputs.guards,
                                      fresh=inputs.fresh)
        for note in notes:  # said once the run has passed its checks: a refused run says its refusal alone
            log.info("%s", note)
        stages = Stages(lm, conditions, settings)
        stages.guards = tuple(Guard(g.task.name, g.metric, g.margin, index) for index, g in enumerate(inputs.guards))
        stages.timings["setup"] = time.perf_counter() - started
        result = OBJECTIVE_RUNS[settings.objective](stages, inputs)
    stages.timings["total"] = time.perf_counter() - started
    return replace(result, timings={k: round(v, 3) for k, v in stages.timings.items()})


__all__ = ["RANK_KEYS", "SCREENS", "FindSettings", "check_settings", "expected_joint_evaluations", "find", "rank_key"]
