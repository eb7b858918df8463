"""The guards in the search: candidate sets checked on the guards' discovery examples, best first, and the guards'
held-out effects of the finalists (``headprune.search.guards`` says what a guard is and why the claim holds)."""

from __future__ import annotations

from collections.abc import Sequence

from headprune.heads import Head
from headprune.search.guards import GUARD_TRIES, Guard, GuardEffect, Guarding, TriedSet, keeps

HeadSet = tuple[Head, ...]


class GuardCheck:
    """Checks candidate sets on every guard's discovery examples (each set once, through the journal), remembering
    every set tried, in order. ``stages`` is the run's ``Stages`` (its ``guards``, ``conditions`` and ``base``)."""

    def __init__(self, stages: object) -> None:
        self.stages = stages
        self.guards: tuple[Guard, ...] = stages.guards  # type: ignore[attr-defined]
        self.tried: dict[HeadSet, TriedSet] = {}

    def effects(self, heads: HeadSet, candidate: str) -> TriedSet:
        """What removing ``heads`` does to each guard on its discovery examples, and whether it keeps them all."""
        if heads in self.tried:
            return self.tried[heads]
        stages = self.stages
        alpha = stages.settings.alpha  # type: ignore[attr-defined]
        effects, kept = [], True
        for guard in self.guards:
            after = stages.conditions.many(guard.discovery, [heads], f"guard {guard.name}", quiet=True)[0]  # type: ignore[attr-defined]
            effect = GuardEffect.measure(guard, stages.base[guard.discovery], after, alpha=alpha,  # type: ignore[attr-defined]
                                         role="discovery")
            effects.append(effect)
            kept = kept and keeps(effect, stages.base[guard.heldout].n)  # type: ignore[attr-defined]
        tried = TriedSet(tuple(str(h) for h in heads), tuple(effects), kept, candidate)
        self.tried[heads] = tried
        return tried

    def first(self, ordered: Sequence[HeadSet], candidate: str) -> HeadSet | None:
        """The first of ``ordered`` (best first) that keeps every guard, checking at most ``GUARD_TRIES`` sets; None
        when none does. When a set breaks a guard, its heads are checked alone, and later sets holding a head that
        breaks a guard alone, or holding a set already seen to break one, are passed over unchecked: removing more
        heads seldom undoes a harm, and the best sets often share the one head that does it."""
        culprits: set[Head] = set()
        checked = 0
        for heads in ordered:
            if culprits.intersection(heads) or any(not t.kept and set(t.heads) <= set(map(str, heads))
                                                   for t in self.tried.values()):
                continue
            if checked == GUARD_TRIES:
                return None
            checked += 1
            if self.effects(heads, candidate).kept:
                return heads
            culprits.update(h for h in heads if len(heads) == 1 or not self.effects((h,), "culprit").kept)
        return None

    def best_trade(self, ordered: Sequence[HeadSet], candidate: str) -> HeadSet:
        """Of the sets of ``ordered`` already checked (the first, checked now, when none was), the one that breaks
        the guards least (its worst guard's estimate beyond the margin, in margins), the better-ranked first on
        ties."""
        ordered = list(ordered)
        checked = [heads for heads in ordered if heads in self.tried] or [ordered[0]]
        return min(checked, key=lambda heads: (max(e.shortfall for e in self.effects(heads, candidate).effects),
                                               ordered.index(heads)))

    def choose(self, ordered: Sequence[HeadSet], candidate: str) -> HeadSet:
        """The first set of ``ordered`` that keeps the guards, or the best trade when none does."""
        return self.first(ordered, candidate) or self.best_trade(ordered, candidate)

    def record(self, chosen: Sequence[HeadSet]) -> Guarding:
        """The record: every set tried, and whether each of ``chosen`` (the candidates the selection tests) keeps the
        guards; when none does, the best trade among them."""
        kept = [heads for heads in chosen if heads in self.tried and self.tried[heads].kept]
        stages = self.stages
        base = stages.base  # type: ignore[attr-defined]
        trade = () if kept or not chosen else min(
            (h for h in chosen if h in self.tried), key=lambda h: max(e.shortfall for e in self.tried[h].effects),
            default=chosen[0])
        return Guarding(tuple(self.tried.values()), bool(kept), tuple(str(h) for h in trade),
                        tuple(base[g.discovery].n for g in self.guards), tuple(base[g.heldout].n for g in self.guards))


def heldout_effects(stages: object, frozen: Sequence[HeadSet]) -> list[tuple[GuardEffect, ...]]:
    """Each finalist's effect on every guard's held-out examples: the first (the primary set) is the claim, the
    others are exploratory, simultaneous over the finalists (Bonferroni)."""
    guards: tuple[Guard, ...] = stages.guards  # type: ignore[attr-defined]
    if not guards:
        return [() for _ in frozen]
    conditions, base, alpha = stages.conditions, stages.base, stages.settings.alpha  # type: ignore[attr-defined]
    results = [conditions.many(g.heldout, list(frozen), f"guard {g.name}") for g in guards]
    return [tuple(GuardEffect.measure(g, base[g.heldout], per_guard[rank], alpha=alpha,
                                      role="primary" if rank == 0 else "exploratory",
                                      family=1 if rank == 0 else len(frozen))
                  for g, per_guard in zip(guards, results)) for rank in range(len(frozen))]


def guard_chain(stages: object, chain: Sequence[HeadSet]) -> tuple[int, tuple[GuardEffect, ...]]:
    """The guards' fixed sequence over ``chain``: nested sets, smallest first, each one the task's sequence confirmed
    (its block, then one head more a step). Each set's guards are tested on their held-out examples at the claim's
    level, in order, up to the first set that does not keep them all (the sets after it are not evaluated).

    Why the claim keeps its level: the chain's order is fixed on the search half, and a fixed sequence is a closed
    test, so the chance that any set it passes truly breaks a guard is at most the guard test's level, however the
    task's steps truncated the chain. The claim for the set shipped (the last that kept them) stays an
    intersection-union test of its task steps and its guards.

    Returns:
        How many sets of ``chain`` kept every guard, and the effects of the set that stopped the sequence (empty
        when none did).
    """
    guards: tuple[Guard, ...] = stages.guards  # type: ignore[attr-defined]
    conditions, base, alpha = stages.conditions, stages.base, stages.settings.alpha  # type: ignore[attr-defined]
    for index, heads in enumerate(chain):
        after = [conditions.many(g.heldout, [heads], f"guard {g.name}")[0] for g in guards]
        effects = tuple(GuardEffect.measure(g, base[g.heldout], result, alpha=alpha)
                        for g, result in zip(guards, after))
        if not all(effect.held for effect in effects):
            return index, effects
    return len(chain), ()


__all__ = ["GuardCheck", "guard_chain", "heldout_effects"]
