"""``find --protocol cel``: the research protocol of "Can Capability Enhancement be Localized?" as a preset.

What the released research code runs, and what the preset (``settings.PROTOCOL_PRESETS``) fixes: every query
head ablated alone, exactly (``screen exact``); the 10 best as nominees; every pair and triple of them (45 + 120 =
165 sets); no growth beyond triples (``extend 0``); 10 finalists; the intact model run twice and required to agree
(headprune's determinism check, which runs it again in another batch order); the frozen sets re-run on discovery to
confirm their numbers before held-out is read (:func:`reconfirm`); held-out data for the report only. Its 2,000
discovery examples are find's default; its held-out size is find's default 1,000; both can be given (the suite runs
the protocol tiny).

What headprune layers on, and where it differs (docs/find.md): discovery is split into a search half that ranks
sets and a check half that, with held-out, tests each head of the proposed set (``headprune.search.membership``);
the primary set is chosen by exact held-out tests at level alpha after selection (``headprune.search.rules``)
rather than being the discovery rank-1 set with an uncorrected held-out number; the other finalists are reported
as exploratory with adjusted p-values; the re-confirmation compares every answer and margin of a fresh pass (no
journal, no layer cache, no shared prefix) with the pass the search used, within the determinism check's
tolerance, and stops the run (exit 3) on any difference.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from headprune.core.devices import dtype_name
from headprune.errors import InternalCheckError
from headprune.evaluation import Evaluator
from headprune.evaluation.contract import disagreement
from headprune.heads import Head
from headprune.search.stages import Stages

log = logging.getLogger("headprune")

def reconfirm(stages: Stages, head_sets: Sequence[tuple[Head, ...]]) -> int:
    """Run each set on discovery again from scratch and require the answers and margins the search read (the
    protocol's re-confirmation); returns how many sets agreed.

    Raises:
        InternalCheckError: a set's fresh pass disagrees with the one the search used (the message names it).
    """
    conditions, settings = stages.conditions, stages.settings
    task = conditions.evaluators["discovery"].task
    fresh = Evaluator(stages.lm, task, batch_size=settings.batch_size, reuse_layers=False, share_prefix=False)
    dtype = dtype_name(stages.lm.dtype)
    with stages.timed("reconfirm"):
        for heads in head_sets:
            used = conditions.get("discovery", heads)
            again = fresh.run(heads, mode=conditions.mode, means=conditions.means)  # type: ignore[arg-type]
            problem, _ = disagreement(used, again, dtype)
            if problem is not None:
                raise InternalCheckError(f"re-confirmation: {','.join(map(str, heads)) or 'the intact model'} run "
                                         f"again on discovery: {problem}; the search's numbers cannot be trusted")
    log.info("re-confirmation: %d sets run again on discovery from scratch agree with the search's numbers",
             len(head_sets))
    return len(head_sets)


__all__ = ["reconfirm"]
