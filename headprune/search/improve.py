"""``find --objective improve`` (the default): a few heads whose removal improves the task.

After the shared baseline and screen (``headprune.search.stages``), discovery is split into a search half and a
check half (``headprune.search.folds``). On the search half: take the best M single heads as nominees, evaluate
every subset of them of size 2..K, and grow the best set from a screen taken at it (``headprune.search.partners``);
the best set of several heads is the **proposal**, with the order of its heads for the selection rule's tests (each
head's gain on the search half) and those tests' counts on the check half (``headprune.search.proposal``). On all of
discovery: the best single head. On held-out (with the check half): the selection rule's tests (find's,
``headprune.search.rules.FIND_RULE``), at level alpha after selection. Then the finalists: the primary set first, the
other candidates and the best remaining sets after it, exploratory.
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
from headprune.search.find_result import FindResult, Prescreen
from headprune.search.guard_search import GuardCheck, guard_chain
from headprune.search.guards import GUARD_TRIES
from headprune.search.paired import compare
from headprune.search.parsimony import HeadSet, counts
from headprune.search.partners import extend
from headprune.search.proposal import Proposal, Searched, needed, propose
from headprune.search.protocol import reconfirm
from headprune.search.rules import SelectionRule, find_rule
from headprune.search.selection import Chosen, shortened
from headprune.search.sequence import prefixes, sets_of
from headprune.search.split import Inputs
from headprune.search.stages import Evaluated, Screened, Stages, single_order

log = logging.getLogger("headprune")


@dataclass
class Choice:
    """What the search chose on discovery, before any held-out number is read."""

    screened: Screened
    prescreen: Prescreen | None
    nominees: list[Head]
    evaluated: Evaluated  # every set evaluated on discovery
    proposal: Proposal | None  # the best set of several heads on the search half, with its test order
    single: Head  # the best single head on all of discovery
    measure: str  # what the membership tests count: "accuracy" (answers) or "margin"
    tolerance: float  # of a margin change, in the run's dtype
    rule: SelectionRule  # the selection rule the proposal was made for; it chooses on held-out
    guard: GuardCheck | None = None  # with guards: the candidate sets checked on their discovery examples
    searched: Searched | None = None  # where the rule tests it: the best single head on the search half


def improve(stages: Stages, inputs: Inputs) -> FindResult:
    """The improve objective of a find run, from the baseline to the record (timings aside)."""
    stages.baseline()
    announce_cost(stages)
    choice = choose(stages)
    reconfirmed = reconfirm(stages, frozen_sets(stages, choice)) if stages.settings.protocol == "cel" else None
    chosen = choose_on_heldout(stages, choice)
    frozen = finalists_order(stages, choice, chosen)
    if chosen.heads not in choice.evaluated:  # a kept set the search did not score (cut from an extended one)
        choice.evaluated.update(stages.evaluate([chosen.heads], "membership"))
    grown = None
    if stages.settings.shrink is not None:  # grown on discovery, after P is fixed; a finalist, for export --pick
        from headprune.search.shrink import grow_on_discovery

        grown = grow_on_discovery(stages, choice.screened, choice.prescreen, chosen.heads, chosen.verdict.confirmed)
        if grown.heads != chosen.heads:
            frozen = list(dict.fromkeys([*frozen, grown.heads]))
            choice.evaluated.update(stages.evaluate([grown.heads], "shrink"))
    records = stages.finalists(frozen, choice.evaluated)
    kept = tuple(c for c in chosen.selection.contributions if c.earned)
    from_proposal = chosen.heads == tuple(map(Head.parse, chosen.selection.kept))  # not the single head's
    records[0] = replace(records[0], heldout=chosen.verdict, contributions=kept if from_proposal else ())
    guarding = None
    if choice.guard is not None:
        candidates = [choice.proposal.heads] if choice.proposal is not None else []
        searched = [(choice.searched[0],)] if choice.searched is not None else []
        guarding = choice.guard.record(list(dict.fromkeys([*candidates, (choice.single,), *searched])))
    shrunk = None
    if grown is not None:
        from headprune.search.shrink import judge_on_fresh

        shrunk = judge_on_fresh(stages, grown, frozen.index(grown.heads) + 1)
    return replace(stages.record(inputs, choice.screened, choice.prescreen, choice.nominees, choice.evaluated,
                                 records), selection=chosen.selection, reconfirmed=reconfirmed, guarding=guarding,
                   shrink=shrunk)


def choose(stages: Stages, rule: SelectionRule | None = None) -> Choice:
    """Everything the search decides on discovery, once the baseline is in ``stages``: the halves, the screen, the
    joint search and its growth on the search half, the proposal (with the check half's counts of ``rule``'s
    hypotheses; default find's rule) and the best single head. The counts-only simulation
    (``headprune.search.simulation``) runs exactly this."""
    settings, rule = stages.settings, rule or find_rule()
    folds = stages.split_discovery()
    screened, prescreen = stages.screen()
    measure = "margin" if settings.rank_by == "margin" else "accuracy"
    slack = tolerance(dtype_name(stages.lm.dtype))
    evaluated: Evaluated = {}
    guard = GuardCheck(stages) if stages.guards else None
    with stages.timed("joint"):
        nominees = joint(stages, screened, evaluated, measure=measure, tolerance=slack, guard=guard)
    with stages.timed("membership"):
        singles = [(head,) for head in single_order(screened, stages.rank, settings.rank_by)]
        single = (guard.choose(singles, "single") if guard is not None else singles[0])[0]
        several = [heads for heads in evaluated if len(heads) > 1]
        proposal = None
        if several:
            heads = (guard.choose(sorted(several, key=stages.search_rank), "proposal") if guard is not None
                     else min(several, key=stages.search_rank))
            def discovery(sets: list[HeadSet]) -> list:
                results = stages.results(sets, "membership")
                evaluated.update({s: compare(stages.base["discovery"], r) for s, r in zip(sets, results)
                                  if s not in evaluated})
                return results

            proposal = propose(heads, discovery, stages.base["discovery"], search=folds.search, check=folds.check,
                               measure=measure, tolerance=slack, rule=rule)
        searched = searched_single(stages, screened, guard, measure=measure, tolerance=slack) \
            if rule.searched_single else None
    return Choice(screened, prescreen, nominees, evaluated, proposal, single, measure, slack, rule, guard, searched)


def searched_single(stages: Stages, screened: Screened, guard: GuardCheck | None, *, measure: str,
                    tolerance: float) -> Searched:
    """The best single head on the search half, taken as the single is on all of discovery (with guards, the first
    that keeps them), and its counts against the intact model on the check half: a single head the check half did
    not choose, so a rule can test it there and on held-out."""
    rows = [(head, stages.search_half[(head,)], None) for head, _, _ in screened]
    ordered = [(head,) for head in single_order(rows, stages.rank, stages.settings.rank_by)]
    (head,) = guard.choose(ordered, "single (search half)") if guard is not None else ordered[0]
    (result,) = stages.results([(head,)], "membership")
    return head, counts(result, stages.base["discovery"], measure, tolerance, stages.folds.check)


def choose_on_heldout(stages: Stages, choice: Choice) -> Chosen:
    """The held-out stage of the choice's selection rule, timed as held-out work; its line names the set that ships
    and the steps that decided it."""
    assert stages.folds is not None, "choose() splits discovery first"
    with stages.timed("heldout"):
        chosen = choice.rule.select(choice.proposal, choice.single,
                                    lambda sets: stages.conditions.many("heldout", sets, "held-out tests"),
                                    stages.base["heldout"], alpha=stages.settings.alpha, measure=choice.measure,
                                    tolerance=choice.tolerance, sizes=stages.folds.sizes, searched=choice.searched)
    if stages.guards and chosen.selection.chosen == "proposal":
        chosen = _guarded_set(stages, chosen)
    log.info("%s", choice.rule.summary(chosen))
    return chosen


def _guarded_set(stages: Stages, chosen: Chosen) -> Chosen:
    """With guards, the largest set the rule's steps confirmed on the way to the set shipped that keeps them on
    held-out: the guards' fixed sequence over those sets, smallest (the block) first
    (``headprune.search.guard_search.guard_chain``). Where the block itself breaks one, the set stays as it is, and
    the claim is not confirmed."""
    chain = list(dict.fromkeys(tuple(sorted(map(Head.parse, step.prefix))) for step in chosen.verdict.steps))
    held, effects = guard_chain(stages, chain)
    if held in (0, len(chain)):
        return chosen
    log.info("the confirmed set %s does not keep the guards on held-out: %s ships", ",".join(map(str, chain[held])),
             ",".join(map(str, chain[held - 1])))
    result = stages.conditions.many("heldout", [chain[held - 1]], "held-out tests")[0]
    return shortened(chosen, chain[held - 1], result, stages.base["heldout"], alpha=stages.settings.alpha,
                     stop=chain[held], effects=effects)


def frozen_sets(stages: Stages, choice: Choice) -> list[HeadSet]:
    """Every set discovery fixes before held-out is read: the proposal and each of it without one head (what the
    membership tests read), the prefixes of its order and every other set the rule's hypotheses compare, the single
    head, and the best other sets by search-half rank, up to ``finalists``."""
    proposal = choice.proposal
    fixed = ([*needed(proposal.heads), *prefixes(proposal.sequence),
              *sets_of(choice.rule.hypotheses(proposal.sequence, proposal.block))]
             if proposal is not None else []) + [(choice.single,)]
    ranked = sorted(choice.evaluated, key=stages.search_rank)[: stages.settings.finalists]
    return list(dict.fromkeys([*fixed, *ranked]))


def finalists_order(stages: Stages, choice: Choice, chosen: Chosen) -> list[HeadSet]:
    """The finalists, primary first: then the selection's other candidates (the proposal, the kept set, the
    single head) and the best remaining sets by search-half rank, up to ``finalists`` distinct sets."""
    others = [choice.proposal.heads if choice.proposal is not None else (), (choice.single,)]
    ranked = sorted(choice.evaluated, key=stages.search_rank)
    order = [chosen.heads] + [heads for heads in [*others, *ranked] if heads]
    return list(dict.fromkeys(order))[: stages.settings.finalists]


def announce_cost(stages: Stages) -> None:
    """Before paying for it: the planned conditions (at most), the measured time of one, and the estimated total."""
    settings, conditions = stages.settings, stages.conditions
    screen = settings.candidates if settings.screen != "exact" else stages.lm.grid.total
    joint_sets = expected_joint_evaluations(min(settings.nominees, screen), settings.max_heads)
    extend = settings.extend * 2 * settings.nominees  # the partners scored at the best set, per step
    # The proposal and each of it without one head; the sets the selection rule's tests add (its planned); its heads
    # alone where the screen did not evaluate them (the rule's order).
    size = settings.max_heads + settings.extend
    rule_discovery, rule_heldout = find_rule().planned(size)
    membership = 1 + size + rule_discovery + (size if settings.screen != "exact" else 0)
    # Held-out: the membership sets, the rule's, the single head and the finalists; each finalist on each control.
    finals = (1 + size + rule_heldout + 1 + settings.finalists + settings.finalists * len(conditions.control_names))
    planned = (f"{screen} screen, {joint_sets} joint, {extend} extend, {membership} membership and {finals} "
               f"held-out/control conditions at most")
    if stages.guards:  # checked on discovery (each set and, where it breaks one, its heads), then the finalists
        guard_sets = len(stages.guards) * (3 * (1 + settings.max_heads + settings.extend) * GUARD_TRIES
                                           + settings.finalists)
        planned += f", and {guard_sets} guard conditions at most (most are never needed)"
    each = conditions.seconds.get("discovery")
    if each is None:  # resumed: the baseline came from the journal
        log.info("planned: %s (resuming: %d in the journal)", planned, len(conditions.journal))
        return
    held = conditions.seconds.get("heldout", each)
    # An intact run goes through every layer; ablated discovery runs start at the lowest ablated layer,
    # so this is an upper bound.
    world = conditions.team.world
    total = (each * (screen + joint_sets + extend + membership) + held * finals) / world
    log.info("planned: %s; %.1f s per discovery condition measured; estimated at most %s in all%s", planned, each,
             duration(total), f" on {world} processes" if world > 1 else "")
    if settings.screen == "exact" and stages.lm.device.type == "cpu" and each * screen / world > 3600:
        log.warning("the exact screen alone is estimated at %s on the CPU; faster: --screen attribution "
                    "(one pass, then --candidates exactly), --screen halving, a GPU, or more processes "
                    "(torchrun --nproc-per-node N -m headprune find ...)", duration(each * screen / world))


def joint(stages: Stages, screened: Screened, evaluated: Evaluated, *, measure: str, tolerance: float,
          guard: GuardCheck | None = None) -> list[Head]:
    """On the search half: every subset of the nominees of size 2..K, then ``extend`` steps of growth from a screen
    at the best set (with guards: the best that keeps them, ``headprune.search.guards``; ``headprune.search.partners``).
    ``evaluated`` gains every set; returns the nominees."""
    settings, rank = stages.settings, stages.search_rank
    ranked = sorted((head for head, _, _ in screened), key=lambda head: rank((head,)))
    nominees = ranked[: settings.nominees]
    subsets = [tuple(sorted(c)) for size in range(2, settings.max_heads + 1)
               for c in itertools.combinations(nominees, size)]
    evaluated.update({(head,): paired for head, paired, _ in screened if head in nominees})
    evaluated.update(stages.evaluate(subsets, "joint"))
    candidates = [(h,) for h in nominees] + subsets
    best = guard.choose(sorted(candidates, key=rank), "growth") if guard is not None else min(candidates, key=rank)
    extend(stages, best, evaluated, measure=measure, tolerance=tolerance)
    return nominees


def expected_joint_evaluations(nominees: int, max_heads: int) -> int:
    """C(M,2) + ... + C(M,K): the number of sets the exhaustive stage evaluates."""
    return sum(math.comb(nominees, k) for k in range(2, max_heads + 1))


__all__ = ["Choice", "announce_cost", "choose", "choose_on_heldout", "expected_joint_evaluations",
           "finalists_order", "frozen_sets", "improve", "joint"]
