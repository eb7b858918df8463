"""``find --objective improve`` (the default): a few heads whose removal improves the task.

After the shared baseline and screen (``headprune.search.stages``): take the best M single heads as nominees,
evaluate every subset of them of size 2..K (optionally grow the best set greedily), freeze the best F sets whose
every head earns its place against the set without it (``headprune.search.parsimony``) as finalists, using
discovery only; then score the finalists on held-out, where the discovery rank-1 set gets the verdict.
"""

from __future__ import annotations

import itertools
import logging
import math
from dataclasses import replace

from headprune.devices import dtype_name
from headprune.evaluation.contract import tolerance
from headprune.heads import Head
from headprune.progress import duration
from headprune.search.pruner import Pruner
from headprune.search.result import FindResult
from headprune.search.split import Inputs
from headprune.search.stages import Evaluated, Screened, Stages

log = logging.getLogger("headprune")


def improve(stages: Stages, inputs: Inputs) -> FindResult:
    """The improve objective of a find run, from the baseline to the record (timings aside)."""
    settings = stages.settings
    stages.baseline()
    announce_cost(stages)
    screened, prescreen = stages.screen()
    pruner = Pruner(stages.conditions, stages.base["discovery"], stages.rank,
                    "margin" if settings.rank_by == "margin" else "accuracy", settings.alpha,
                    tolerance(dtype_name(stages.lm.dtype)))
    with stages.timed("joint"):
        evaluated, nominees = joint(stages, screened, pruner)
    with stages.timed("parsimony"):
        frozen, found = pruner.freeze(evaluated, settings.finalists)  # every head earns its place
    records = [replace(f, contributions=found[heads])
               for f, heads in zip(stages.finalists(frozen, evaluated), frozen)]
    with stages.timed("heldout"):  # the primary set's drop-one numbers, after the verdict
        records[0] = replace(records[0], contributions=pruner.heldout(frozen[0], found[frozen[0]]))
    return replace(stages.record(inputs, screened, prescreen, nominees, evaluated, records),
                   parsimony=pruner.record(len(frozen[0])))


def announce_cost(stages: Stages) -> None:
    """Before paying for it: the planned conditions, the measured time of one, and the estimated total."""
    settings, conditions = stages.settings, stages.conditions
    screen = settings.candidates if settings.screen != "exact" else stages.lm.grid.total
    joint_sets = expected_joint_evaluations(min(settings.nominees, screen), settings.max_heads)
    finals = settings.finalists * (1 + len(conditions.control_names))
    each = conditions.seconds.get("discovery")
    if each is None:  # resumed: the baseline came from the journal
        log.info("planned: %d screen, %d joint and %d held-out/control conditions (resuming: %d in the journal)",
                 screen, joint_sets, finals, len(conditions.journal))
        return
    held = conditions.seconds.get("heldout", each)
    # An intact run goes through every layer; ablated discovery runs start at the lowest ablated layer,
    # so this is an upper bound.
    world = conditions.team.world
    total = (each * (screen + joint_sets + settings.extend * 2 * settings.nominees) + held * finals) / world
    log.info("planned: %d screen, %d joint and %d held-out/control conditions; %.1f s per discovery condition "
             "measured; estimated at most %s in all%s", screen, joint_sets, finals, each, duration(total),
             f" on {world} processes" if world > 1 else "")
    if settings.screen == "exact" and stages.lm.device.type == "cpu" and each * screen / world > 3600:
        log.warning("the exact screen alone is estimated at %s on the CPU; faster: --screen attribution "
                    "(one pass, then --candidates exactly), --screen halving, a GPU, or more processes "
                    "(torchrun --nproc-per-node N -m headprune find ...)", duration(each * screen / world))


def joint(stages: Stages, screened: Screened, pruner: Pruner) -> tuple[Evaluated, list[Head]]:
    """Every subset of the nominees of size 2..K, then optional greedy growth (each step only while the added
    head earns its place, ``headprune.search.parsimony``)."""
    settings, rank = stages.settings, stages.rank
    ranked = sorted(screened, key=lambda row: rank(row[1], (row[0],)))
    nominees = [head for head, _, _ in ranked[: settings.nominees]]
    evaluated = {(head,): paired for head, paired, _ in ranked[: settings.nominees]}
    subsets = [tuple(sorted(c)) for size in range(2, settings.max_heads + 1)
               for c in itertools.combinations(nominees, size)]
    evaluated.update(stages.evaluate(subsets, "joint"))
    best = min(evaluated, key=lambda h: rank(evaluated[h], h))
    pool = [head for head, _, _ in ranked[: 2 * settings.nominees]]
    for _ in range(settings.extend):
        grown = [tuple(sorted((*best, h))) for h in pool if h not in best]
        if not grown:
            break
        evaluated.update(stages.evaluate(grown, "extend"))
        candidate = min(grown, key=lambda h: rank(evaluated[h], h))
        if not pruner.adds(candidate, best, next(h for h in candidate if h not in best)):
            break
        best = candidate
    return evaluated, nominees


def expected_joint_evaluations(nominees: int, max_heads: int) -> int:
    """C(M,2) + ... + C(M,K): the number of sets the exhaustive stage evaluates."""
    return sum(math.comb(nominees, k) for k in range(2, max_heads + 1))


__all__ = ["announce_cost", "expected_joint_evaluations", "improve", "joint"]
