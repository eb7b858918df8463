"""Successive halving: screen every head on a small share of discovery, keep the promising ones, continue.

Round 1 scores every head on the first quarter of the examples it is given (find gives it the search half of
discovery only) and keeps the best third (at least ``keep``); round 2 scores those on the first half and keeps the
best ``keep``; find then scores the survivors exactly on all of discovery. Ranking in each round uses find's own key (gain or margin).
"""

from __future__ import annotations

import math

import torch

from headprune.core.progress import Progress
from headprune.evaluation import EvalResult, Evaluator
from headprune.heads import Head
from headprune.loading.models import LoadedModel
from headprune.search.find_result import HalvingRound
from headprune.search.journal import Journal
from headprune.search.paired import compare
from headprune.tasks import Task

SHARES = (4, 2)  # round r uses len(discovery) // SHARES[r] examples


def halving_candidates(lm: LoadedModel, discovery: Task, *, keep: int, rank_key, mode: str,  # noqa: ANN001
                       means: torch.Tensor | None, batch_size: int | str, progress: bool,
                       journal: Journal | None = None
                       ) -> tuple[list[Head], dict[str, HalvingRound]]:
    """The ``keep`` heads that survive, best first, and per head the last round it was scored in. With a
    ``journal``, every condition of every round is journalled (``halving<round>|<head>``) and read back on
    resume instead of being computed again."""
    survivors = lm.grid.all_heads()
    record: dict[str, HalvingRound] = {}
    journal = journal if journal is not None else Journal(None, {})
    for round_number, share in enumerate(SHARES, start=1):
        part = discovery.first(max(1, len(discovery) // share))
        evaluator = Evaluator(lm, part, batch_size=batch_size, reuse_layers=True)

        def run(heads: list[Head]) -> EvalResult:
            key = f"halving{round_number}|{','.join(str(h) for h in heads)}"
            result = journal.get(key, part)
            if result is None:
                if heads:
                    evaluator.warm_layer_cache()  # the intact run may have come from the journal
                result = evaluator.run(heads, mode=mode, means=means)  # type: ignore[arg-type]
                journal.put(key, result)
            return result

        base = run([])
        scored = []
        bar = Progress(len(survivors), f"halving {round_number}", bar=progress)
        for head in survivors:
            paired = compare(base, run([head]))
            scored.append((head, paired))
            record[str(head)] = HalvingRound(round_number, paired)
            bar.update()
        bar.close()
        scored.sort(key=lambda item: rank_key(item[1], (item[0],)))
        limit = keep if round_number == len(SHARES) else max(keep, math.ceil(len(scored) / 3))
        survivors = [head for head, _ in scored[:limit]]
    return survivors, record
