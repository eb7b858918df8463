"""``find --objective improve`` (the default): a few heads whose removal improves the task.

After the shared baseline and screen (``headprune.search.stages``), discovery is split into a search half and a
check half (``headprune.search.folds``). On the search half: take the best M single heads as nominees, evaluate
every subset of them of size 2..K (optionally grow the best set greedily). On the check half: admit into each
proposed set, best first, only the heads that earn their place against the set without it
(``headprune.search.admission``), until F finalists are frozen; single heads compete on all of discovery. Then
score the finalists on held-out, where the first finalist (the primary set) gets the verdict.
"""

from __future__ import annotations

import itertools
import logging
import math
from dataclasses import dataclass, replace

from headprune.core.devices import dtype_name
from headprune.core.progress import duration
from headprune.evaluation.contract import tolerance
from headprune.heads import Head
from headprune.search.admission import Admission, single_order
from headprune.search.find_result import FindResult, Prescreen
from headprune.search.parsimony import HeadContribution, HeadSet
from headprune.search.split import Inputs
from headprune.search.stages import Screened, Stages

log = logging.getLogger("headprune")


@dataclass
class Choice:
    """What the search chose on discovery, before any held-out number is seen."""

    screened: Screened
    prescreen: Prescreen | None
    nominees: list[Head]
    admission: Admission  # its ``evaluated`` holds every set evaluated on discovery
    frozen: list[HeadSet]  # the finalists, primary first
    found: dict[HeadSet, tuple[HeadContribution, ...]]  # each finalist's heads on the check half


def improve(stages: Stages, inputs: Inputs) -> FindResult:
    """The improve objective of a find run, from the baseline to the record (timings aside)."""
    stages.baseline()
    announce_cost(stages)
    choice = choose(stages)
    frozen, found, admission = choice.frozen, choice.found, choice.admission
    records = [replace(f, contributions=found[heads])
               for f, heads in zip(stages.finalists(frozen, admission.evaluated), frozen)]
    with stages.timed("heldout"):  # the primary set's drop-one numbers, after the verdict
        records[0] = replace(records[0], contributions=admission.heldout(frozen[0], found[frozen[0]]))
    return replace(stages.record(inputs, choice.screened, choice.prescreen, choice.nominees, admission.evaluated,
                                 records), parsimony=admission.record(len(frozen[0])))


def choose(stages: Stages, *, singles: str | None = None) -> Choice:
    """Everything the search decides on discovery, once the baseline is in ``stages``: the halves, the screen,
    the joint search on the search half, the admission on the check half, the finalists. The counts-only
    simulation (``headprune.search.simulation``) runs exactly this. ``singles``: how single heads are ranked
    (:func:`headprune.search.admission.single_order`; default: by ``rank_by``; ``"key"``: find's ranking key
    alone, as before 0.2, for the simulation's comparison)."""
    settings = stages.settings
    stages.split_discovery()
    screened, prescreen = stages.screen()
    admission = Admission(stages, {}, "margin" if settings.rank_by == "margin" else "accuracy", settings.alpha,
                          tolerance(dtype_name(stages.lm.dtype)))
    with stages.timed("joint"):
        nominees = joint(stages, screened, admission)
    with stages.timed("parsimony"):  # every head of a set earns its place on the check half
        ranked = sorted(admission.evaluated, key=stages.search_rank)
        frozen, found = admission.finalists(ranked, single_order(screened, stages.rank, singles or settings.rank_by),
                                            settings.finalists)
    return Choice(screened, prescreen, nominees, admission, frozen, found)


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


def joint(stages: Stages, screened: Screened, admission: Admission) -> list[Head]:
    """On the search half: every subset of the nominees of size 2..K, then optional greedy growth (each step
    only while the added head earns its place there, ``headprune.search.parsimony``). ``admission.evaluated``
    gains every set; returns the nominees."""
    settings, rank = stages.settings, stages.search_rank
    ranked = sorted((head for head, _, _ in screened), key=lambda head: rank((head,)))
    nominees = ranked[: settings.nominees]
    subsets = [tuple(sorted(c)) for size in range(2, settings.max_heads + 1)
               for c in itertools.combinations(nominees, size)]
    evaluated = admission.evaluated
    evaluated.update({(head,): paired for head, paired, _ in screened if head in nominees})
    evaluated.update(stages.evaluate(subsets, "joint"))
    best = min([(h,) for h in nominees] + subsets, key=rank)
    pool = ranked[: 2 * settings.nominees]
    for _ in range(settings.extend):
        grown = [tuple(sorted((*best, h))) for h in pool if h not in best]
        if not grown:
            break
        evaluated.update(stages.evaluate(grown, "extend"))
        candidate = min(grown, key=rank)
        if not admission.adds(candidate, best, next(h for h in candidate if h not in best)):
            break
        best = candidate
    return nominees


def expected_joint_evaluations(nominees: int, max_heads: int) -> int:
    """C(M,2) + ... + C(M,K): the number of sets the exhaustive stage evaluates."""
    return sum(math.comb(nominees, k) for k in range(2, max_heads + 1))


__all__ = ["Choice", "announce_cost", "choose", "expected_joint_evaluations", "improve", "joint"]
