"""Partners: heads whose removal helps mainly once other heads are removed, found by screening at the best set.

The screen ranks heads by their effect alone, so a head whose removal helps a little alone and a lot once another
head is removed is not among the nominees, and the joint search never tries it (measured on a real model with a
planted pair: find shipped the strong head alone, +18.7 points on held-out, where the pair gives about twice that).
``--extend N`` therefore grows the best set of the search half N times from a second screen taken *at* that set:

1. every head not in the set is ranked by its effect with the set already removed, on the search half: a
   first-order estimate from one forward and backward pass with the set's gates at 0 (attribution patching,
   ``headprune.search.attribution``; counts-only models, which have no gradients, are screened exactly);
2. the best ``2 x nominees`` of them are added to the set one at a time and scored exactly on discovery; the grown
   sets join the joint search's, so the proposal is the best of them all on the search half (every head of it is
   then tested on the check half and held-out, ``headprune.search.membership``);
3. a further step starts from the best grown set only when its new head earns its place on the search half (the
   exact one-sided sign test of ``headprune.search.parsimony`` at ``alpha``: a reason to look further, not a
   claim).

Cost per step: one attribution pass over the search half and ``2 x nominees`` discovery conditions.
"""

from __future__ import annotations

from headprune.heads import Head
from headprune.search.parsimony import HeadSet, contributions
from headprune.search.stages import Evaluated, Stages


def extend(stages: Stages, best: HeadSet, evaluated: Evaluated, *, measure: str, tolerance: float) -> HeadSet:
    """Up to ``settings.extend`` steps from ``best``, each scoring the partners the screen at the set finds;
    ``evaluated`` gains every set scored, and a step follows only where the previous step's best new head earns
    its place on the search half. Returns the set the last step started from."""
    settings = stages.settings
    for _ in range(settings.extend):
        pool = partner_pool(stages, best, 2 * settings.nominees)
        if not pool:
            break
        grown = [tuple(sorted((*best, head))) for head in pool]
        evaluated.update(stages.evaluate(grown, "extend"))
        candidate = min(grown, key=stages.search_rank)
        added = next(h for h in candidate if h not in best)
        with_set, without = stages.results([candidate, best], "extend")
        assert stages.folds is not None, "Stages.split_discovery comes first"
        if not contributions((added,), with_set, [without], measure=measure, level=settings.alpha,
                             tolerance=tolerance, mask=stages.folds.search)[0].earned:
            break
        best = candidate
    return best


def partner_pool(stages: Stages, base: HeadSet, count: int) -> list[Head]:
    """The heads not in ``base`` most likely to help once ``base`` is removed, best first: by their estimated
    effect there (at most ``count``), or, where no estimate can be taken, every one of them."""
    others = [head for head in stages.lm.grid.all_heads() if head not in base]
    if not stages.can_estimate:  # counts-only models: the screen at the set is exact (every head is scored)
        return others
    estimates = stages.estimates(given=base)
    return sorted(others, key=lambda head: (-estimates[head], head))[:count]


__all__ = ["extend", "partner_pool"]
