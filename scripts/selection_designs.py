"""Selection designs that give every shipped set a test on examples that did not choose it, measured against find's
rule through find's own search code (``headprune.search.simulation``): the cells of the power floors (both real heads
kept >= 60% at 150/300, >= 35% at 2,000/1,000), one real head, no real head, the exact-null family and the masked
family. A measurement, not find's rule: each design is registered as a selection rule of its own
(``headprune.search.rules``) whose held-out stage replaces find's for the runs it measures (discovery is find's).

Designs (``--designs``, comma-separated):

- ``find``: find's rule when these were measured (``headprune.search.rules.sequence``: the fixed sequence below, ordered by each head's own
  or within-S gain and started with a block of the heads that improve the task only together, the two branches at
  half of alpha each; the ``sequence`` designs start with one head). The rule of parts these designs were measured against
  (membership on the check half and all of held-out; the kept set T tested on held-out at its Bonferroni part of the
  proposal's share: exact, but T's test reads the examples that chose it) was find's up to commit 79e78db, where
  this script's ``parts`` reproduces its figures in docs/find.md.
- ``reserve-F[-W]``: a share F of held-out, drawn at random before any held-out number is read, is reserved;
  membership reads the check half and the rest of held-out. T = S: S's exact test on all of held-out at W (default
  0.5) of the proposal's share; T cut down: T's exact test on the reserve alone at the rest (fresh). ``W`` = ``R``:
  every proposal test on the reserve, at the whole share.
- ``sequence[:key=value...]``: no test of a kept set. The proposal's heads in an order fixed on the search half,
  the prefixes P_1 = {h_1}, ..., P_k = S; each increment "h_j adds to P_(j-1)" is an exact one-sided sign test on
  the check half and held-out (neither chose the order), at half the branch's level, in a fixed sequence that stops
  at the first increment that does not reject. The shipped set is the last prefix reached: every head of it adds to
  the heads before it, and the set improves (the increments add up), each wrong with probability at most alpha/2
  times the branch's share, for any model (a fixed-sequence test is a closed test). Keys: ``order`` = ``drop``
  (the proposal's membership order) / ``single`` (each head's own net gain on the search half) / ``greedy``;
  ``show`` = ``single`` / ``kept`` (where nothing is confirmed, show find's membership kept set, not confirmed);
  ``fav`` = ``check`` (find's: the proposal favoured when two of its heads help on the check half; the sequence
  then reads the data its share was chosen on) / ``search`` (two of its heads help alone on the search half) /
  ``proposal``; ``ship`` = ``2`` (a prefix of two heads or more) / ``1`` (P_1 alone is a confirmed single head).

    python scripts/selection_designs.py [--runs 1000] [--designs find,reserve-0.33,sequence:order=single]
        [--cells "150/300 2 real,2000/1000 2 real,n:2000/1000:0.003:1,masked"] [--json FILE]

Cells: the named ones in :data:`CELLS` (null heads flipping 0.3%; ``together``: two heads that improve the task
only together, ``headprune.search.simulation.family``), ``n:SIZE:FLIP:REALS`` (REALS real heads among
null heads flipping FLIP) and ``masked`` (``run_masked``: the held-out stage alone, no discovery stages, so the
sequence there keeps the membership order). docs/find.md ("Designs measured for a fresh test") has the figures.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import headprune.search.selection as selection  # noqa: E402
import headprune.search.simulation as simulation  # noqa: E402
from headprune.heads import Head  # noqa: E402
from headprune.search.binomial import upper_tail  # noqa: E402
from headprune.search.find_result import FindSettings  # noqa: E402
from headprune.search.membership import contributions, heldout_counts, kept  # noqa: E402
from headprune.search.parsimony import HeadSet, counts  # noqa: E402
from headprune.search.proposal import Proposal, needed  # noqa: E402
from headprune.search.rules import RULES, SelectionRule, register  # noqa: E402
from headprune.search.sequence import gain_order, hypotheses, increments, prefixes, reached, run  # noqa: E402
from headprune.search.stats import test_size, verdict  # noqa: E402

FAVOURED_SHARE = 0.9  # the rule of parts (find's before the sequence): of alpha, for the favoured candidate
SHARE_S = 0.5  # reserve designs: of the proposal's share, for S's own test (T = S); T's on the reserve: the rest
_STAGES: list = []  # the running find's stages (sequence designs read the check half's prefixes on discovery)


def _chosen(heads: HeadSet, test, proposal: Proposal | None, single: Head, base, alpha: float,
            sizes: tuple[int, int], kept_heads: HeadSet = ()) -> selection.Chosen:
    record = selection.Selection(tuple(map(str, proposal.heads)) if proposal else (), str(single), (),
                                 tuple(map(str, kept_heads)), (), "proposal" if test.confirmed else "none", alpha,
                                 "accuracy", sizes[0], sizes[1], base.n)
    return selection.Chosen(heads, test, record)


def _support(proposal: Proposal, helps: float = 0.3) -> int:
    """The rule of parts' look at the check half: heads of S whose drop-one p there is at most ``helps``."""
    return sum(b > c and upper_tail(b, b + c) <= helps for b, c in proposal.check)


def _branches(proposal: Proposal | None, favour: str = "check", favoured_share: float = FAVOURED_SHARE,
              helps: float = 0.3) -> tuple[str, float, float]:
    """``favour``: ``check`` (find's: the proposal when two of its heads help on the check half), ``proposal``
    (always, where there is one), or ``search`` (two of its heads help alone on the search half)."""
    if favour == "search" and proposal is not None and _STAGES:
        stages = _STAGES[-1]
        alone = stages.conditions.many("discovery", [(h,) for h in proposal.heads], "")
        helped = [counts(r, stages.base["discovery"], "accuracy", 0.0, stages.folds.search) for r in alone]
        favoured = "proposal" if sum(b > c and upper_tail(b, b + c) <= helps for b, c in helped) >= 2 else "single"
    elif favour == "proposal":
        favoured = "proposal" if proposal is not None else "single"
    else:
        favoured = "proposal" if proposal is not None and _support(proposal) >= 2 else "single"
    share = favoured_share if proposal is not None else 1.0
    return favoured, (share if favoured == "proposal" else 1 - share), (share if favoured == "single" else 1 - share)


def _primary(verdicts: dict, favoured: str) -> str:
    """find's choice among the tested candidates: a confirmed kept set, else a confirmed single head, else the
    favoured candidate where it was tested, not confirmed."""
    for candidate in ("proposal", "single"):
        if candidate in verdicts and verdicts[candidate][1].confirmed:
            return candidate
    return favoured if favoured in verdicts else "single"


def _tested_order(favoured: str, p_share: float, s_share: float) -> list[tuple[str, float]]:
    """The two branches with their shares, the favoured one tested first."""
    branches = [("proposal", p_share), ("single", s_share)]
    return branches if favoured == "proposal" else branches[::-1]


def _single_test(verdicts: dict, single: Head, results: dict, base, alpha: float, share: float) -> float:  # noqa: ANN001
    """The single head's exact test at ``share`` into ``verdicts``; the share it passes on (all of it when it
    rejected, else nothing)."""
    test = replace(verdict(base.correct, results[(single,)].correct, alpha=alpha), share=share)
    verdicts["single"] = (single,), test
    return share if test.confirmed else 0.0


def reserve_select(fraction: float, share_s: float | None = SHARE_S) -> Callable:
    """``share_s`` None: S (T = S) is tested on the reserve too, at the whole share (every test reads the reserve)."""
    def select(proposal, single, heldout, base, *, alpha, measure, tolerance, sizes):
        sets = [(single,)] + (needed(proposal.heads) if proposal is not None else [])
        results = dict(zip(sets, heldout(sets)))
        n = base.n
        reserve = np.zeros(n, dtype=bool)
        reserve[np.random.default_rng(n).permutation(n)[: round(fraction * n)]] = True
        trimmed: HeadSet = ()
        if proposal is not None:
            with_set, *withouts = [results[s] for s in needed(proposal.heads)]
            by_head = dict(zip(proposal.heads, withouts))
            rest = tuple(counts(with_set, by_head[h], measure, tolerance, ~reserve) for h in proposal.order)
            trimmed = kept(proposal.heads, contributions(proposal, rest, level=alpha))
            if trimmed and trimmed not in results:
                results[trimmed] = heldout([trimmed])[0]
        favoured, p_share, s_share = _branches(proposal)
        verdicts, carried = {}, 0.0
        for candidate, share in _tested_order(favoured, p_share, s_share):
            share += carried
            carried = 0.0
            if candidate == "single":
                carried = _single_test(verdicts, single, results, base, alpha, share)
                continue
            if proposal is None or len(trimmed) < 2:
                continue
            if share_s is None:
                test = replace(verdict(base.correct[reserve], results[trimmed].correct[reserve], alpha=alpha),
                               share=share)
            elif trimmed == proposal.heads:
                test = replace(verdict(base.correct, results[trimmed].correct, alpha=alpha), share=share * share_s)
            else:
                test = replace(verdict(base.correct[reserve], results[trimmed].correct[reserve], alpha=alpha),
                               share=share * (1 - share_s))
            verdicts["proposal"] = trimmed, test
            carried = test.size / alpha if test.confirmed else 0.0
        heads, test = verdicts[_primary(verdicts, favoured)]
        return _chosen(heads, test, proposal, single, base, alpha, sizes, trimmed)
    return select


def sequence_select(*, check: bool = True, side: str = "two", show_kept: bool = False, order_by: str = "drop",
                    favour: str = "check", ship_from: int = 2, favoured_share: float = FAVOURED_SHARE,
                    helps: float = 0.3) -> Callable:
    """Fixed-sequence increments over the proposal's prefixes (see the module docstring). ``side``: ``two`` tests
    each increment one-sided at half the level (so a confirmed set's claim is at alpha/2), ``one`` at the level.
    ``show_kept``: where nothing is confirmed, the primary set shown is the membership tests' kept set (find's
    membership, on the check half and held-out), not confirmed, as find shows it now."""
    def select(proposal, single, heldout, base, *, alpha, measure, tolerance, sizes):
        order = list(proposal.order) if proposal is not None else []
        stages = _STAGES[-1] if _STAGES else None
        if order and order_by != "drop" and stages is not None:
            order = _order(stages, order, order_by, measure, tolerance)
        prefixes_ = prefixes(order)
        sets = list(dict.fromkeys([(single,), *prefixes_, *(needed(proposal.heads) if show_kept and proposal else [])]))
        results = dict(zip(sets, heldout(sets)))
        disc = {}
        if check and prefixes_ and stages is not None:
            disc = dict(zip(prefixes_, stages.conditions.many("discovery", prefixes_, "")))
        favoured, p_share, s_share = _branches(proposal, favour, favoured_share, helps)
        verdicts, carried, shipped = {}, 0.0, ()
        for candidate, share in _tested_order(favoured, p_share, s_share):
            share += carried
            carried = 0.0
            if candidate == "single":
                carried = _single_test(verdicts, single, results, base, alpha, share)
                continue
            if proposal is None:
                continue
            level = test_size(alpha, share) / (2 if side == "two" else 1)
            # find's fixed sequence (headprune.search.sequence), over this design's order, with or without the
            # check half's increments
            hyps = hypotheses(order, 1)  # started with one head, find's before its block
            on_heldout = increments(hyps, results, base, measure=measure, tolerance=tolerance)
            on_check = (increments(hyps, disc, stages.base["discovery"], measure=measure, tolerance=tolerance,
                                   mask=stages.folds.check) if disc else ((0, 0),) * len(hyps))
            passed = reached(run(hyps, on_check, on_heldout, level=level))
            if passed >= ship_from:  # ship_from 1: a prefix of one head is a confirmed single head
                shipped = prefixes_[passed - 1]
                test = replace(verdict(base.correct, results[shipped].correct, alpha=alpha), share=share)
                # The claim is the sequence's: mark it confirmed through the counts the sequence tested.
                verdicts["proposal"] = shipped, _Confirmed(test, True)
                carried = share if passed == len(prefixes_) else 0.0
        pick = next((c for c in ("proposal", "single") if c in verdicts and verdicts[c][1].confirmed), "single")
        heads, test = verdicts[pick]
        if show_kept and not test.confirmed and proposal is not None and favoured == "proposal":
            rest = heldout_counts(proposal, [results[s] for s in needed(proposal.heads)], measure=measure,
                                  tolerance=tolerance)
            trimmed = kept(proposal.heads, contributions(proposal, rest, level=alpha))
            if len(trimmed) >= 2:
                shown = results.get(trimmed) or heldout([trimmed])[0]
                heads, test = trimmed, _Confirmed(verdict(base.correct, shown.correct, alpha=alpha), False)
        return _chosen(heads, test, proposal, single, base, alpha, sizes, shipped)
    return select


def _order(stages, heads: list, how: str, measure: str, tolerance: float) -> list:
    """The proposal's heads ordered on the search half alone: ``single`` by each head's own net gain there,
    ``greedy`` by forward selection (the best head alone, then the best addition to it, ...)."""
    search, base = stages.folds.search, stages.base["discovery"]
    if how == "single":  # find's order (headprune.search.sequence.gain_order)
        alone = stages.conditions.many("discovery", [(h,) for h in heads], "")
        return list(gain_order(heads, alone, base, search=search, measure=measure, tolerance=tolerance))
    def net(heads, prior) -> tuple:
        now = stages.conditions.many("discovery", [tuple(sorted(heads))], "")[0]
        b, c = counts(now, prior, measure, tolerance, search)
        return -(b - c), c, str(heads[-1])
    chosen, prior, left = [], base, list(heads)
    while left:
        best = min(left, key=lambda h: net(chosen + [h], prior))
        chosen.append(best)
        left.remove(best)
        prior = stages.conditions.many("discovery", [tuple(sorted(chosen))], "")[0]
    return chosen


class _Confirmed:
    """A verdict whose confirmation is the fixed sequence's (the set's own McNemar p is not the claim)."""

    def __init__(self, test, confirmed: bool) -> None:
        self._test, self.confirmed = test, confirmed

    def __getattr__(self, name):
        return getattr(self._test, name)


def _held_out_stage(name: str) -> Callable:
    if name.startswith("reserve-"):
        fields = name.split("-")[1:]
        share_s = SHARE_S if len(fields) == 1 else None if fields[1] == "R" else float(fields[1])
        return reserve_select(float(fields[0]), share_s)
    if name.startswith("sequence"):
        kw = dict(part.split("=") for part in name.split(":")[1:])
        return sequence_select(check=kw.get("check", "1") == "1", side=kw.get("side", "two"),
                               show_kept=kw.get("show", "single") == "kept", order_by=kw.get("order", "drop"),
                               favour=kw.get("fav", "check"), ship_from=int(kw.get("ship", "2")),
                               favoured_share=float(kw.get("share", FAVOURED_SHARE)),
                               helps=float(kw.get("helps", 0.3)))
    raise ValueError(name)


class Design(SelectionRule):
    """A design as a selection rule: find's discovery (the sequence rule's hypotheses counted on the check half), then
    the design's held-out stage, with the run's stages at hand for the designs that read discovery again."""

    runs = True

    def __init__(self, name: str) -> None:
        self.name, self.journal, self._select = f"design {name}", f"design {name}", _held_out_stage(name)

    def hypotheses(self, order, block):  # noqa: ANN001, ANN201
        return RULES["sequence"].hypotheses(order, block)

    def select(self, *args, searched=None, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN201
        return self._select(*args, **kwargs)  # the designs test the single on all of discovery only

    def run(self, stages, through_find):  # noqa: ANN001, ANN201
        _STAGES.append(stages)
        try:
            return through_find(stages, self)
        finally:
            _STAGES.pop()


def design(name: str) -> str | None:
    """The selection rule that runs design ``name`` (None: the sequence rule the designs were measured against)."""
    if name == "find":
        return "sequence"
    rule = RULES.get(f"design {name}") or register(Design(name))
    return rule.name


CELLS = {"150/300 2 real": (150, 300, (0.078, 0.003), {}), "2000/1000 2 real": (2000, 1000, (0.008, 0.002), {}),
         "150/300 2 exclusive": (150, 300, (0.078, 0.003), {"exclusive": True}),
         "2000/1000 2 exclusive": (2000, 1000, (0.008, 0.002), {"exclusive": True}),
         "150/300 together": (150, 300, (0.078, 0.003), {"together": True}),
         "2000/1000 together": (2000, 1000, (0.008, 0.002), {"together": True})}


def cell(name: str, rule: str | None, runs: int, flip: float = 0.003) -> dict:
    discovery, held, effect, extra = CELLS[name]
    heads = simulation.family("together" if extra.get("together") else "2 exclusive" if extra else "2", effect, flip)
    return _figures([simulation.run_improve(seed, flip=flip, discovery=discovery, heldout=held, rule=rule,
                                            settings=FindSettings(seed=seed), **heads) for seed in range(runs)])


def null_cell(size: str, rule: str | None, runs: int, flip: float, reals: int = 0) -> dict:
    discovery, held, effect, extra = CELLS[f"{size} 2 real"]
    return _figures([simulation.run_improve(seed, flip=flip, real=[effect] * reals, discovery=discovery,
                                            heldout=held, rule=rule, settings=FindSettings(seed=seed))
                     for seed in range(runs)])


def masked(rule: str | None, runs: int, flip: float = 0.003) -> dict:
    # run_masked runs the held-out stage without discovery's stages: sequence designs read held-out alone there.
    return _figures([simulation.run_masked(seed, flip=flip, rule=rule) for seed in range(runs)])


def _figures(out: Sequence) -> dict:
    """The cell's rates (fractions of runs; ``gain``: the expected true gain confirmed, points)."""
    return {"all_kept": float(np.mean([o.all_kept for o in out])),
            "confirmed_all": float(np.mean([o.confirmed and o.all_kept for o in out])),
            "passenger": float(np.mean([o.passenger for o in out])),
            "false": float(np.mean([o.false_confirmation for o in out])),
            "confirmed": float(np.mean([o.confirmed for o in out])),
            "gain": float(100 * np.mean([o.confirmed_gain for o in out]))}


def shown(row: dict, runs: int) -> dict:
    """``row`` for reading: each rate in percent with its standard error."""
    def rate(p: float) -> str:
        return f"{100 * p:.1f} ± {100 * (p * (1 - p) / runs) ** 0.5:.1f}"
    return {key: (round(value, 3) if key == "gain" else rate(value)) for key, value in row.items()}


def main(argv: Sequence[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--designs", default="find,reserve-0.33,sequence:order=single:show=kept:fav=search")
    parser.add_argument("--cells", default=",".join(CELLS) + ",masked")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    logging.getLogger("headprune").setLevel(logging.WARNING)
    rows = {}
    for name in args.designs.split(","):
        rule = design(name)
        for cell_name in args.cells.split(","):
            started = time.perf_counter()
            if cell_name == "masked":
                row = masked(rule, args.runs)
            elif cell_name.startswith("n:"):  # n:SIZE:FLIP:REALS (real heads among ordinary null heads)
                _, size, flip, reals = cell_name.split(":")
                row = null_cell(size, rule, args.runs, float(flip), int(reals))
            else:
                row = cell(cell_name, rule, args.runs)
            rows[f"{name} | {cell_name}"] = row
            print(json.dumps({"design": name, "cell": cell_name, **shown(row, args.runs),
                              "s": round(time.perf_counter() - started, 1)}), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return rows


if __name__ == "__main__":
    main()
