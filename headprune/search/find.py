"""``find``: screen every head, search joint ablations of the best, and test the winner on held-out data.

The protocol (see shared/mission.md): split the task into disjoint discovery and held-out sets; score every
query head ablated alone on discovery, paired against the intact model; take the best M as nominees;
evaluate every subset of the nominees of size 2..K (optionally extend the best set greedily); freeze the
best F sets as finalists using discovery only; score each on held-out; the discovery rank-1 set is the
primary result and gets the verdict. Nothing is re-chosen after looking at held-out numbers.
"""

from __future__ import annotations

import itertools
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from headprune.errors import SearchSettingsError, TaskError
from headprune.evaluate import EvalResult, Evaluator
from headprune.heads import Head
from headprune.models import LoadedModel, load_model
from headprune.search.journal import Journal
from headprune.search.paired import Paired, compare
from headprune.search.result import FindResult, Finalist
from headprune.search.split import split_task
from headprune.search.stats import paired_bootstrap_ci, spearman, verdict
from headprune.tasks import Task, load_task

RANK_KEYS = ("gain", "margin")
SCREENS = ("exact", "attribution", "halving")


def rank_key(paired: Paired, heads: Sequence[Head], rank_by: str) -> tuple:
    """Sort key, best first: gain, then fewer damaged, then margin change, then fewer heads (or margin first)."""
    names = tuple(str(h) for h in heads)
    if rank_by == "margin":
        return (-paired.margin_change, -paired.gain, paired.damaged, len(heads), names)
    return (-paired.gain, paired.damaged, -paired.margin_change, len(heads), names)


class _Conditions:
    """Evaluates (split, head set) conditions once each, through the journal."""

    def __init__(self, evaluators: dict[str, Evaluator], journal: Journal, mode: str, means) -> None:  # noqa: ANN001
        self.evaluators, self.journal, self.mode, self.means = evaluators, journal, mode, means

    def get(self, split: str, heads: Sequence[Head]) -> EvalResult:
        evaluator = self.evaluators[split]
        key = f"{split}|{','.join(str(h) for h in sorted(heads))}"
        cached = self.journal.get(key, evaluator.task)
        if cached is not None:
            return cached
        result = evaluator.run(heads, mode=self.mode, means=self.means)  # type: ignore[arg-type]
        self.journal.put(key, result)
        return result


def _bar(total: int, desc: str, progress: bool) -> tqdm:
    return tqdm(total=total, desc=desc, unit="cond", disable=not progress, file=sys.stderr, leave=True,
                dynamic_ncols=True)


def _task_record(task: Task) -> dict:
    return {"name": task.name, "kind": task.kind, "n": len(task), "hash": task.content_hash()}


def _control_effect(baseline: EvalResult, after: EvalResult, seed: int) -> dict:
    """How a head set moves the control task: accuracy (or mean NLL) before/after with a bootstrap CI."""
    if baseline.kind == "text":
        low, high = paired_bootstrap_ci(-baseline.margins, -after.margins, seed=seed)
        return {"metric": "mean_nll", "before": baseline.mean_nll, "after": after.mean_nll,
                "difference": after.mean_nll - baseline.mean_nll, "ci95": [low, high], "n": baseline.n}
    low, high = paired_bootstrap_ci(baseline.correct, after.correct, seed=seed)
    paired = compare(baseline, after)
    return {"metric": "accuracy", "before": paired.accuracy_before, "after": paired.accuracy_after,
            "difference": paired.accuracy_change, "ci95": [low, high], "n": paired.n,
            "rescued": paired.rescued, "damaged": paired.damaged}


def find(
    model: str | LoadedModel,
    task: str | Task,
    *,
    heldout_task: str | Task | None = None,
    discovery: int = 2000,
    heldout: int = 1000,
    seed: int = 0,
    ablation: str = "zero",
    nominees: int = 10,
    max_heads: int = 3,
    extend: int = 0,
    finalists: int = 10,
    control: str | Task | None = None,
    control_limit: int = 500,
    alpha: float = 0.05,
    rank_by: str = "gain",
    screen: str = "exact",
    candidates: int = 30,
    batch_size: int = 16,
    out: Path | None = None,
    resume: bool = False,
    progress: bool = False,
) -> FindResult:
    """Find a small head set whose removal improves ``task``, and test it on held-out data.

    Args:
        model: model spec or loaded model.
        task: the task (spec or Task); must have an accuracy (choice or generate).
        heldout_task: a separate task file for held-out examples (default: split ``task``).
        discovery, heldout: split sizes; seed: split and bootstrap seed.
        ablation: ``zero`` or ``mean`` (means over the discovery inputs).
        nominees: M, the best single heads kept for the joint search.
        max_heads: K, joint search evaluates every nominee subset of size 2..K.
        extend: greedy steps beyond K (each adds the head that most improves discovery, while it does).
        finalists: F, the best sets on discovery scored on held-out.
        control: a second task measured for the finalists (the trade-off); control_limit caps its size.
        alpha: significance level of the verdict.
        rank_by: ``gain`` (counts) or ``margin`` (mean margin change) as the first ranking key.
        screen: ``exact`` (every head ablated alone), ``attribution`` (a one-pass first-order estimate for
            every head, then the best ``candidates`` heads scored exactly) or ``halving`` (successive halving
            on growing shares of discovery, then the ``candidates`` survivors scored exactly).
        out: folder for journal.jsonl (resume) and the outputs; ``None`` keeps everything in memory.
        resume: continue the journal in ``out``.

    Raises:
        SearchSettingsError, TaskError, ResultFileError, and the loading errors.
    """
    if screen not in SCREENS:
        raise SearchSettingsError(f"--screen must be one of {', '.join(SCREENS)}")
    if screen != "exact" and candidates < nominees:
        raise SearchSettingsError(f"--candidates {candidates} is smaller than --nominees {nominees}")
    if rank_by not in RANK_KEYS:
        raise SearchSettingsError(f"--rank-by must be one of {', '.join(RANK_KEYS)}")
    if not 0 < alpha < 1:
        raise SearchSettingsError(f"--alpha must be between 0 and 1, got {alpha}")
    if nominees < 1 or max_heads < 1 or finalists < 1 or extend < 0:
        raise SearchSettingsError("--nominees, --max-heads and --finalists must be at least 1, --extend at least 0")
    if max_heads > nominees:
        raise SearchSettingsError(f"--max-heads {max_heads} is larger than --nominees {nominees}")
    if resume and out is None:
        raise SearchSettingsError("--resume needs --out (the folder of the interrupted run)")
    timings: dict[str, float] = {}
    started = time.perf_counter()
    specs = {"task": None if isinstance(task, Task) else str(task),
             "heldout": None if heldout_task is None or isinstance(heldout_task, Task) else str(heldout_task)}
    task = load_task(task) if not isinstance(task, Task) else task
    if not task.has_accuracy:
        raise TaskError(f"find needs a task with an accuracy (choice or generate); {task.name} is a text task "
                        "(text tasks can be --control)")
    held = load_task(heldout_task) if isinstance(heldout_task, (str, Path)) else heldout_task
    control_task = load_task(control) if isinstance(control, (str, Path)) else control
    split = split_task(task, discovery=discovery, heldout=heldout, seed=seed, heldout_task=held)
    lm = load_model(model) if isinstance(model, str) else model
    if nominees > lm.grid.total:
        nominees = lm.grid.total
        max_heads = min(max_heads, nominees)
    if control_task is not None:
        control_task = control_task.head(control_limit)

    settings = {
        "model": lm.name, "model_hash": lm.weight_hash, "task": split.discovery.content_hash(),
        "heldout": split.heldout.content_hash(),
        "control": control_task.content_hash() if control_task is not None else None,
        "seed": seed, "ablation": ablation, "nominees": nominees, "max_heads": max_heads, "extend": extend,
        "finalists": finalists, "alpha": alpha, "rank_by": rank_by, "batch_size": batch_size, "screen": screen,
        "candidates": candidates if screen != "exact" else None,
    }
    journal = Journal(out, settings, resume=resume)
    # Discovery is evaluated hundreds of times: it reuses the intact model's layer inputs.
    evaluators = {"discovery": Evaluator(lm, split.discovery, batch_size=batch_size, reuse_layers=True),
                  "heldout": Evaluator(lm, split.heldout, batch_size=batch_size)}
    if control_task is not None:
        evaluators["control"] = Evaluator(lm, control_task, batch_size=batch_size)
    means = evaluators["discovery"].head_means() if ablation == "mean" else None
    conditions = _Conditions(evaluators, journal, ablation, means)
    timings["setup"] = time.perf_counter() - started

    # Baselines: the intact model on every set, example by example.
    mark = time.perf_counter()
    base = {name: conditions.get(name, ()) for name in evaluators}
    evaluators["discovery"].warm_layer_cache()  # a resumed run has its baseline from the journal
    timings["baseline"] = time.perf_counter() - mark

    # Stage 1: every query head alone on discovery (or the candidates a cheaper pre-screen picks).
    mark = time.perf_counter()
    estimates: dict[Head, float] | None = None
    halving: dict | None = None
    to_screen = lm.grid.all_heads()
    if screen == "attribution":
        from headprune.search.attribution import estimate_effects

        estimates = estimate_effects(evaluators["discovery"], means=means)
        to_screen = sorted(to_screen, key=lambda h: (-estimates[h], h))[:candidates]
    elif screen == "halving":
        from headprune.search.halving import halving_candidates

        to_screen, halving = halving_candidates(
            lm, split.discovery, keep=candidates, rank_key=lambda p, h: rank_key(p, h, rank_by), mode=ablation,
            means=means, batch_size=batch_size, progress=progress)
    timings["prescreen"] = time.perf_counter() - mark
    screened: list[tuple[tuple[Head, ...], Paired]] = []
    bar = _bar(len(to_screen), "screen", progress)
    for head in to_screen:
        screened.append(((head,), compare(base["discovery"], conditions.get("discovery", (head,)))))
        bar.update()
    bar.close()
    ranked_singles = sorted(screened, key=lambda item: rank_key(item[1], item[0], rank_by))
    nominee_heads = [heads[0] for heads, _ in ranked_singles[:nominees]]
    timings["screen"] = time.perf_counter() - mark

    # Stage 2: every subset of the nominees of size 2..K, then optional greedy growth.
    mark = time.perf_counter()
    evaluated: dict[tuple[Head, ...], Paired] = {heads: p for heads, p in screened if heads[0] in nominee_heads}
    subsets = [tuple(sorted(c)) for size in range(2, max_heads + 1) for c in itertools.combinations(nominee_heads, size)]
    bar = _bar(len(subsets), "joint", progress)
    for heads in subsets:
        evaluated[heads] = compare(base["discovery"], conditions.get("discovery", heads))
        bar.update()
    bar.close()
    best = min(evaluated, key=lambda h: rank_key(evaluated[h], h, rank_by))
    pool = [heads[0] for heads, _ in ranked_singles[: 2 * nominees]]
    for _ in range(extend):
        grown = [tuple(sorted((*best, h))) for h in pool if h not in best]
        for heads in grown:
            evaluated[heads] = compare(base["discovery"], conditions.get("discovery", heads))
        candidate = min(grown, key=lambda h: rank_key(evaluated[h], h, rank_by)) if grown else None
        if candidate is None or evaluated[candidate].gain <= evaluated[best].gain:
            break
        best = candidate
    timings["joint"] = time.perf_counter() - mark

    # Finalists, frozen on discovery; then held-out (and control) for each, in rank order.
    mark = time.perf_counter()
    ranked_sets = sorted(evaluated, key=lambda h: rank_key(evaluated[h], h, rank_by))
    frozen = ranked_sets[:finalists]
    bar = _bar(len(frozen) * (2 if control_task is not None else 1), "held-out", progress)
    finalist_records = []
    sentences = []
    for rank, heads in enumerate(frozen, start=1):
        after = conditions.get("heldout", heads)
        bar.update()
        test = verdict(base["heldout"].correct, after.correct, alpha=alpha, seed=seed)
        sentences.append(test.sentence())
        effect = None
        if control_task is not None:
            effect = _control_effect(base["control"], conditions.get("control", heads), seed)
            bar.update()
        finalist_records.append(Finalist(rank, [str(h) for h in heads], evaluated[heads].to_dict(),
                                         test.to_dict(), effect))
    bar.close()
    timings["heldout"] = time.perf_counter() - mark
    timings["total"] = time.perf_counter() - started

    primary = finalist_records[0]
    primary_verdict = dict(primary.heldout)
    primary_verdict["heads"] = primary.heads
    primary_verdict["discovery_gain"] = primary.discovery["gain"]
    primary_verdict["sentence"] = sentences[0]
    baseline = {"discovery": base["discovery"].summary(), "heldout": base["heldout"].summary()}
    if control_task is not None:
        baseline["control"] = base["control"].summary()
    return FindResult(
        model={"name": lm.name, "weight_hash": lm.weight_hash, "family": lm.adapter.family,
               "model_type": lm.model.config.model_type, "layers": lm.grid.num_layers, "heads": lm.grid.num_heads,
               "kv_heads": lm.grid.num_kv_heads, "head_dim": lm.grid.head_dim},
        task={**_task_record(task), "spec": specs["task"], "settings": task.settings,
              "discovery_hash": split.discovery.content_hash()},
        heldout_task={**_task_record(split.heldout), "spec": specs["heldout"]},
        control_task=_task_record(control_task) if control_task is not None else None,
        split={"seed": seed, "discovery": len(split.discovery), "heldout": len(split.heldout),
               "source": "heldout-task" if held is not None else "split", "duplicates_dropped":
               split.duplicates_dropped},
        settings={k: v for k, v in settings.items() if k not in ("model", "model_hash", "task", "heldout", "control")},
        baseline=baseline,
        screen=[{"head": str(h[0]), **p.to_dict(), **({"estimate": estimates[h[0]]} if estimates else {})}
                for h, p in screened],
        prescreen=_prescreen_record(screen, estimates, halving, screened),
        nominees=[str(h) for h in nominee_heads],
        sets=[{"heads": [str(h) for h in heads], **evaluated[heads].to_dict()} for heads in ranked_sets],
        finalists=finalist_records,
        verdict=primary_verdict,
        timings={k: round(v, 3) for k, v in timings.items()},
    )


def _prescreen_record(screen: str, estimates: dict | None, halving: dict | None,
                      screened: list[tuple[tuple[Head, ...], Paired]]) -> dict | None:
    """What the pre-screen saw, and how its ranking of the candidates agrees with the exact screen."""
    if screen == "attribution" and estimates is not None:
        return {"method": "attribution", "candidates": len(screened),
                "estimates": {str(h): v for h, v in estimates.items()},
                "spearman_on_candidates": spearman(np.array([estimates[h[0]] for h, _ in screened]),
                                                   np.array([p.margin_change for _, p in screened]))}
    if screen == "halving" and halving is not None:
        return {"method": "halving", "candidates": len(screened), "rounds": halving}
    return None


def expected_joint_evaluations(nominees: int, max_heads: int) -> int:
    """C(M,2) + ... + C(M,K): the number of sets the exhaustive stage evaluates."""
    return sum(math.comb(nominees, k) for k in range(2, max_heads + 1))


__all__ = ["find", "rank_key", "expected_joint_evaluations"]
