"""``gpu_check --protocol``: the paper's protocol at a 3B shape, timed, beside its limit at the measured peak.

The protocol as the research code runs it (shared/mission.md): a discovery set of 2,000 choice examples of
HellaSwag's length (a context of about 80 words and four endings of about 25: about 180 tokens with the context
once), 1,000 held-out; every query head alone (576 for Qwen2.5-3B's shape); the 10 best as nominees, their 45
pairs and 120 triples; the 10 best sets as finalists, scored on held-out (their discovery runs are the joint
search's own). Weights are random (Qwen2.5-3B's or Llama-3.2-3B's shape in bfloat16, ``--shape``): the time does not
depend on what the heads do. Conditions run as find runs them (``Evaluator`` with the layer cache and the shared
prefix).

A condition's cost depends on its lowest ablated layer (the layer cache starts there). With ``--sample K`` (the
default, to fit a short lease), conditions of K layers spread from the first to the last are timed on the whole
discovery set, and the cost of every other layer is interpolated between them; the screen's time is the sum over
every head, the joint search's over every pair and triple of 10 nominees spread over the layers, the finalists'
over 10 of those sets on held-out (a held-out condition costs the discovery one's share of held-out's baseline).
One pair, one triple and one held-out condition are run for real and printed beside their projection.
``--sample 0`` runs the whole protocol instead (nominees and finalists then ranked by gain, as the paper does).
The same with the attribution pre-screen (one pass that estimates every head, then ``--candidates`` exact heads) is
projected from the same costs.

The limit: a pass over discovery is ``2 x parameters x tokens`` FLOP, at the measured bfloat16 peak; a condition
whose lowest ablated layer is ``l`` costs the fraction ``(L - l) / L`` of it (what the layer cache leaves), a
held-out one half as much. It is printed twice: with HellaSwag's tokens counted with the context once (the
research protocol's yardstick: about 16 minutes on an H200) and with the tokens headprune computes (every ending with its context).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import time

import numpy as np
import torch

from headprune.core.limits import number
from headprune.evaluation import Evaluator
from headprune.heads import Head
from headprune.loading.models import LoadedModel, wrap_model
from headprune.search.paired import compare
from headprune.tasks import Example, Task
from headprune.testing import llama_config, random_llama

from .gpu_inputs import WORDS, tokenizer
from .gpu_parts import Ceilings, figure, part, sync

SHAPES = ("qwen2.5-3b", "3b", "tiny")  # of headprune.testing.LLAMA_SHAPES
TARGET_MINUTES = {"exact": 25.0, "attribution pre-screen": 5.0}  # headprune's GPU targets on one H200


def add_protocol_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("--protocol")
    group.add_argument("--shape", default="qwen2.5-3b", choices=SHAPES, help="the model's shape (random weights)")
    group.add_argument("--protocol-layers", type=int, default=0, help="layers kept of the shape (0: all)")
    group.add_argument("--discovery", type=int, default=2000)
    group.add_argument("--heldout", type=int, default=1000)
    group.add_argument("--nominees", type=int, default=10)
    group.add_argument("--finalists", type=int, default=10)
    group.add_argument("--candidates", type=int, default=30, help="exact heads after the attribution pre-screen")
    group.add_argument("--sample", type=int, default=6, help="layers whose conditions are timed (0: the whole run)")
    group.add_argument("--words", default="80,25,4", help="context words, ending words, endings (HellaSwag's)")
    group.add_argument("--layer-cache-mb", type=int, default=None,
                       help="the layer cache's budget (HEADPRUNE_LAYER_CACHE_MB; default: as set, else 2048)")


def hellaswag_like(n: int, seed: int, words: str, vocabulary: list[str]) -> Task:
    """``n`` choice examples of HellaSwag's shape: a context and several endings of random words."""
    context, ending, endings = (int(x) for x in words.split(","))
    rng = np.random.default_rng(seed)
    text = lambda size: " ".join(rng.choice(vocabulary, size=size))  # noqa: E731
    return Task(f"hellaswag-like-{seed}", "choice", tuple(
        Example(f"h{seed}-{i}", prompt=text(context), choices=tuple(" " + text(ending) for _ in range(endings)),
                answer=int(rng.integers(endings))) for i in range(n)))


def _tokens_once(lm: LoadedModel, task: Task) -> int:
    """The tokens of ``task`` with each context counted once (the research protocol's yardstick)."""
    count = lambda text: len(lm.tokenizer(text)["input_ids"])  # noqa: E731
    return sum(count(e.prompt) + sum(count(c) for c in e.choices) for e in task.examples)


def _rank(paired) -> tuple:  # noqa: ANN001
    return (-paired.gain, paired.damaged, -paired.margin_change)


class Costs:
    """Seconds of a discovery condition by its lowest ablated layer: measured at some layers, interpolated."""

    def __init__(self, layers: int) -> None:
        self.layers, self.measured = layers, {}

    def __call__(self, heads: tuple[Head, ...]) -> float:
        known = sorted(self.measured)
        return float(np.interp(min(h.layer for h in heads), known, [self.measured[k] for k in known]))


def _sampled_layers(layers: int, sample: int) -> list[int]:
    return sorted({round(x) for x in np.linspace(0, layers - 1, max(2, min(sample, layers)))})


def _spread(grid, count: int) -> list[Head]:  # noqa: ANN001
    """``count`` distinct heads spread over the layers (nominees of a random model, whose ranking is noise)."""
    heads = list(grid.all_heads())
    return [heads[int(i)] for i in np.unique(np.linspace(0, len(heads) - 1, min(count, len(heads))).round())]


def _limit_fraction(heads: tuple[Head, ...], layers: int) -> float:
    return (layers - min(h.layer for h in heads)) / layers


def run_protocol(args: argparse.Namespace, device: torch.device, ceilings: Ceilings) -> dict:
    if args.layer_cache_mb is not None:  # what find reads when its evaluators are made
        os.environ["HEADPRUNE_LAYER_CACHE_MB"] = str(args.layer_cache_mb)
    tok = tokenizer()
    config = llama_config(args.shape, args.protocol_layers or None, max_position_embeddings=4096,
                          tie_word_embeddings=True)
    built = part(f"protocol {args.shape}: build (random weights, bfloat16)", lambda: wrap_model(
        random_llama(config, torch.bfloat16, device), tok, name=f"random-{args.shape}"), device=device,
        ceilings=ceilings)
    lm = built.pop("value")
    grid, params = lm.grid, sum(p.numel() for p in lm.model.parameters())
    print(f"protocol: {args.shape}, {params / 1e9:.2f}B parameters, {grid.num_layers} layers, {grid.total} heads, "
          f"{args.discovery} discovery / {args.heldout} held-out examples", flush=True)
    discovery = hellaswag_like(args.discovery, 1, args.words, WORDS)
    heldout = hellaswag_like(args.heldout, 2, args.words, WORDS)
    setup = part("protocol: setup (tokenize, plan batches)", lambda: (
        Evaluator(lm, discovery, batch_size=args.batch_size, reuse_layers=True),
        Evaluator(lm, heldout, batch_size=args.batch_size, reuse_layers=True)), device=device, ceilings=ceilings)
    on_discovery, on_heldout = setup.pop("value")
    computed = sum(on_discovery.work().lengths)
    common = dict(device=device, ceilings=ceilings, lm=lm)
    base = part("protocol: baseline, discovery", on_discovery.run, examples=len(discovery), tokens=computed,
                flop=2.0 * params * computed, **common)
    held_base = part("protocol: baseline, held-out", on_heldout.run, examples=len(heldout),
                     flop=2.0 * params * sum(on_heldout.work().lengths), **common)
    rows = [built, setup, base, held_base]
    held_share = held_base["seconds"] / base["seconds"]  # a held-out condition's cost over a discovery one's
    plan = _plan(args, lm, on_discovery, on_heldout, base["value"], held_share, rows, common)
    try:  # last, and on its own: a pass with a backward needs the most memory
        attribution = part("protocol: attribution pre-screen (one pass, every head)",
                           lambda: _attribution(on_discovery), examples=len(discovery),
                           flop=3 * 2.0 * params * computed, **common)
        rows.append(attribution)
        plan["attribution_s"] = attribution["seconds"]
    except (torch.OutOfMemoryError, RuntimeError) as error:
        print(f"protocol: the attribution pass failed: {str(error).splitlines()[0][:200]}", flush=True)
        plan["attribution_s"] = None
    out = _summary(args, plan, rows, lm, on_discovery, on_heldout, discovery, ceilings)
    out["rows"] = [{k: v for k, v in r.items() if k != "value"} for r in rows]
    return out


def _summary(args: argparse.Namespace, plan: dict, rows: list[dict], lm: LoadedModel, on_discovery: Evaluator,
             on_heldout: Evaluator, discovery: Task, ceilings: Ceilings) -> dict:
    """The protocol's totals, exact and with the pre-screen, beside their limits at the measured peak (printed)."""
    params = sum(p.numel() for p in lm.model.parameters())
    computed, once = sum(on_discovery.work().lengths), _tokens_once(lm, discovery)
    seconds = {name: sum(plan[name]) for name in ("screen", "candidates", "joint", "finalists")}
    fixed = sum(row["seconds"] for row in rows[1:4])  # setup and the two baselines
    conditions = plan["conditions"]
    # Every condition from the first layer (what find does where the layer cache holds no checkpoint).
    uncached = fixed + plan["full_pass_s"] * (conditions["screen"] + conditions["joint"]
                                              + plan["held_share"] * conditions["finalists_heldout"])
    totals = {"exact": fixed + seconds["screen"] + seconds["joint"] + seconds["finalists"],
              "attribution pre-screen": None if plan["attribution_s"] is None else fixed + plan["attribution_s"]
              + seconds["candidates"] + seconds["joint"] + seconds["finalists"]}
    # Passes over discovery at the peak: the baselines, 3 for the attribution pass (forward and backward), and each
    # condition's share of the layers (a held-out one scaled by held-out's size).
    fractions, baselines = plan["limit_fractions"], 1 + sum(on_heldout.work().lengths) / computed
    pass_s = {unit: 2.0 * params * tokens / (ceilings.tflops * 1e12)
              for unit, tokens in (("context once", once), ("as computed", computed))}
    limits = {unit: (baselines + fractions["exact"]) * s for unit, s in pass_s.items()}
    prescreen_limit = (baselines + 3 + fractions["prescreen"]) * pass_s["context once"]
    minutes = lambda v: None if v is None else figure(v / 60)  # noqa: E731
    out = {"config": f"protocol {args.shape}", "parameters": params, "layers": lm.grid.num_layers,
           "heads": lm.grid.total, "tokens_per_example_context_once": once / len(discovery),
           "tokens_per_example_computed": computed / len(discovery), "sampled": bool(args.sample),
           "conditions": conditions, "stage_seconds": {k: figure(v) for k, v in seconds.items()},
           "layer_cache_checkpoints": on_discovery.layers.checkpoints,
           "layer_cache_mb": int(number("HEADPRUNE_LAYER_CACHE_MB")),
           "total_minutes": {k: minutes(v) for k, v in totals.items()},
           "exact_minutes_without_layer_cache": minutes(uncached),
           "limit_minutes_at_peak": {k: minutes(v) for k, v in limits.items()},
           "prescreen_limit_minutes_at_peak": minutes(prescreen_limit),
           "of_limit": figure(limits["context once"] / totals["exact"]), "target_minutes": TARGET_MINUTES,
           "checks": plan["checks"]}
    how = "projected from sampled layers" if args.sample else "measured, every condition run"
    prescreen = "failed" if totals["attribution pre-screen"] is None else f"{totals['attribution pre-screen'] / 60:.1f}"
    print(f"protocol ({how}): exact {totals['exact'] / 60:.1f} min (target {TARGET_MINUTES['exact']:g}; limit at "
          f"100% of the measured peak {limits['context once'] / 60:.1f} min with the context once, "
          f"{limits['as computed'] / 60:.1f} min with the tokens headprune computes: {once / len(discovery):.0f} vs "
          f"{computed / len(discovery):.0f} per example); with the attribution pre-screen {prescreen} min (target "
          f"{TARGET_MINUTES['attribution pre-screen']:g}, limit {prescreen_limit / 60:.1f}); the layer cache "
          f"({out['layer_cache_mb']} MB) holds the inputs of layers "
          f"{on_discovery.layers.checkpoints or 'none (its budget, HEADPRUNE_LAYER_CACHE_MB, holds no layer)'}: "
          f"every condition from the first layer would take {uncached / 60:.1f} min", flush=True)
    print(json.dumps(out), flush=True)
    return out


def _attribution(evaluator: Evaluator) -> dict:
    from headprune.search.attribution import estimate_effects

    return estimate_effects(evaluator)


def _plan(args: argparse.Namespace, lm: LoadedModel, on_discovery: Evaluator, on_heldout: Evaluator,
          base, held_share: float, rows: list[dict], common: dict) -> dict:  # noqa: ANN001
    """Every stage's condition times, run (``--sample 0``) or projected from sampled layers, and the limit's
    fractions of a pass: the protocol's conditions by the share of the layers each one runs."""
    grid, layers = lm.grid, lm.grid.num_layers
    heads = list(grid.all_heads())
    if args.sample:
        plan = _sampled(args, grid, on_discovery, on_heldout, held_share, rows, common)
    else:
        plan = _every_condition(args, heads, on_discovery, on_heldout, base, rows, common)
    sets, finalists = plan.pop("sets"), plan.pop("finalists_sets")
    candidates = min(args.candidates, len(heads))
    plan["candidates"] = [float(np.mean(plan["screen"]))] * candidates  # a random model's picks: any layer
    screen = sum(_limit_fraction((h,), layers) for h in heads)
    rest = sum(_limit_fraction(s, layers) for s in sets) + held_share * sum(
        _limit_fraction(s, layers) for s in finalists)
    plan["limit_fractions"] = {"exact": screen + rest, "prescreen": candidates * screen / len(heads) + rest}
    plan["held_share"] = held_share
    plan["conditions"] = {"screen": len(heads), "joint": len(sets), "finalists_heldout": len(finalists),
                          "candidates": candidates}
    return plan


def _every_condition(args: argparse.Namespace, heads: list[Head], on_discovery: Evaluator, on_heldout: Evaluator,
                     base, rows: list[dict], common: dict) -> dict:  # noqa: ANN001
    """The whole protocol, each condition timed; nominees and finalists ranked by gain as the paper does."""
    screen: dict = {}
    rows.append(part(f"protocol: screen ({len(heads)} heads)", lambda: [
        screen.setdefault(h, _timed_run(on_discovery, (h,))) for h in heads], **common))
    nominees = sorted(heads, key=lambda h: _rank(compare(base, screen[h][0])))[: args.nominees]
    sets = [s for k in (2, 3) for s in itertools.combinations(sorted(nominees), k)]
    joint: dict = {}
    rows.append(part(f"protocol: joint ({len(sets)} sets)", lambda: [
        joint.setdefault(s, _timed_run(on_discovery, s)) for s in sets], **common))
    finalists = sorted(sets, key=lambda s: _rank(compare(base, joint[s][0])))[: args.finalists]
    held: dict = {}
    rows.append(part(f"protocol: finalists on held-out ({len(finalists)})", lambda: [
        held.setdefault(s, _timed_run(on_heldout, s)) for s in finalists], **common))
    return {"screen": [t for _, t in screen.values()], "joint": [t for _, t in joint.values()],
            "full_pass_s": min(t for h, (_, t) in screen.items() if h.layer == 0),
            "finalists": [t for _, t in held.values()], "checks": {}, "sets": sets, "finalists_sets": finalists}


def _sampled(args: argparse.Namespace, grid, on_discovery: Evaluator, on_heldout: Evaluator,  # noqa: ANN001
             held_share: float, rows: list[dict], common: dict) -> dict:
    """Conditions at ``--sample`` layers timed, every other cost interpolated; one pair, one triple and one held-out
    finalist run for real beside their projections."""
    costs = Costs(grid.num_layers)
    for layer in _sampled_layers(grid.num_layers, args.sample):
        head = Head(layer, (7 * layer) % grid.num_heads)
        row = part(f"protocol: screen condition at layer {layer} ({head})", lambda h=head: on_discovery.run([h]),
                   **common)
        rows.append(row)
        costs.measured[layer] = row["seconds"]
    nominees = _spread(grid, args.nominees)
    sets = [s for k in (2, 3) for s in itertools.combinations(sorted(nominees), k)]
    finalists = sets[:: max(1, len(sets) // args.finalists)][: args.finalists]
    checks = {}
    for name, evaluator, chosen, share in (("pair", on_discovery, sets[0], 1.0),
                                          ("triple", on_discovery, sets[-1], 1.0),
                                          ("held-out finalist", on_heldout, finalists[0], held_share)):
        row = part(f"protocol: check: a {name} ({','.join(map(str, chosen))})",
                   lambda e=evaluator, s=chosen: e.run(list(s)), **common)
        rows.append(row)
        checks[name] = {"measured_s": row["seconds"], "projected_s": figure(costs(chosen) * share)}
    return {"screen": [costs((h,)) for h in grid.all_heads()], "joint": [costs(s) for s in sets],
            "full_pass_s": costs.measured[0],
            "finalists": [costs(s) * held_share for s in finalists], "checks": checks, "sets": sets,
            "finalists_sets": finalists}


def _timed_run(evaluator: Evaluator, heads: tuple[Head, ...]):  # noqa: ANN202
    """A condition's result and its seconds (the device idle at both ends)."""
    sync(evaluator.lm.device)
    start = time.perf_counter()
    result = evaluator.run(list(heads))
    sync(evaluator.lm.device)
    return result, time.perf_counter() - start
