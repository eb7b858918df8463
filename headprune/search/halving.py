"""Successive halving: screen every head on a small share of discovery, keep the promising ones, continue.

Round 1 scores every head on the first quarter of the discovery examples and keeps the best third (at
least ``keep``); round 2 scores those on the first half and keeps the best ``keep``; find then scores the
survivors exactly on all of discovery. Ranking in each round uses find's own key (gain or margin).
"""

from __future__ import annotations

import math

import torch

from headprune.evaluation import Evaluator
from headprune.heads import Head
from headprune.models import LoadedModel
from headprune.progress import Progress
from headprune.search.paired import compare
from headprune.search.result import HalvingRound
from headprune.tasks import Task

SHARES = (4, 2)  # round r uses len(discovery) // SHARES[r] examples


def halving_candidates(lm: LoadedModel, discovery: Task, *, keep: int, rank_key, mode: str,  # noqa: ANN001
                       means: torch.Tensor | None, batch_size: int | str, progress: bool
                       ) -> tuple[list[Head], dict[str, HalvingRound]]:
    """The ``keep`` heads that survive, best first, and per head the last round it was scored in."""
    survivors = lm.grid.all_heads()
    record: dict[str, HalvingRound] = {}
    for round_number, share in enumerate(SHARES, start=1):
        part = discovery.head(max(1, len(discovery) // share))
        evaluator = Evaluator(lm, part, batch_size=batch_size, reuse_layers=True)
        base = evaluator.run()
        scored = []
        bar = Progress(len(survivors), f"halving {round_number}", bar=progress)
        for head in survivors:
            paired = compare(base, evaluator.run([head], mode=mode, means=means))  # type: ignore[arg-type]
            scored.append((head, paired))
            record[str(head)] = HalvingRound(round_number, paired)
            bar.update()
        bar.close()
        scored.sort(key=lambda item: rank_key(item[1], (item[0],)))
        limit = keep if round_number == len(SHARES) else max(keep, math.ceil(len(scored) / 3))
        survivors = [head for head, _ in scored[:limit]]
    return survivors, record
