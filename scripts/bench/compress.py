"""What the compress search costs: distinct sets evaluated, rounds, heads removed, sets per head removed.

Runs find's baseline and screen once (journalled in ``--out``), then each search rule over the same queue at
each ``--max-drop``, all through the same journal: a set two rules share is evaluated once, so comparing rules
costs little more than the most expensive one. ``v1`` is the galloping greedy as it was before the search
knew when to stop (``grow`` with no cost cap, the reference); ``greedy`` and ``beam`` are
``headprune.search.compress``'s.

    python -m scripts.bench.compress smollm2-135m --task sentiment --discovery 150 --heldout 50 \
        --screen attribution --candidates 8 --max-drop 0.5 --max-drop 2 --out runs/bench-compress

    python -m scripts.bench.compress tiny:8:0:0.3 --task random --discovery 300 --screen exact \
        --max-drop 0.5 --max-drop 1 --max-drop 2 --patience 3 --patience 2 --patience 1 --out runs/bench-tiny

``tiny:LAYERS:SEED:INIT`` builds a random-init Llama and a random two-choice task in ``--out`` (``--task`` is then
ignored). Prints one row per (max_drop, patience, rule), and each rule's rounds on stderr (set sizes, + within
budget, - over); the rows go to ``--json`` (default runs/bench/compress.json). A rule that removes fewer heads than
``v1`` at the same budget and patience exits 1.
"""

from __future__ import annotations

import argparse
import functools
import logging
import sys
import time
from pathlib import Path

from headprune.heads import Head
from headprune.search.compress import head_queue, units_of
from headprune.search.conditions import Conditions
from headprune.search.growth import Budget, Unit, beam, grow
from headprune.search.rules import find_rule
from headprune.search.settings import FindSettings, settings_for
from headprune.search.split import load_inputs
from headprune.search.stages import Stages

from .common import add_json_option, write_json


def _run_rule(rule, name: str, units: list[Unit], stages: Stages, max_drop: float,  # noqa: ANN001
              patience: int) -> dict:
    """One search over the queue through the shared journal; prints its row and returns it."""
    asked: list[tuple[Head, ...]] = []
    base = stages.base  # find's rule: judged at the held-out size, by the held-out test
    budget = Budget(max_drop, min(base["discovery"].n, base["heldout"].n), stages.settings.alpha)
    rounds = 0
    trace: list[str] = []  # per round: each set's size, + within budget, - over

    def evaluate(sets: list[tuple[Head, ...]], label: str) -> dict:
        nonlocal rounds
        asked.extend(sets)
        rounds += 1
        results = stages.evaluate(sets, label)
        trace.append(" ".join(f"{len(h)}{'+' if budget(results[h]) else '-'}" for h in sets))
        return results

    started = time.perf_counter()
    grown = rule(units, stages.lm.grid, evaluate, budget=budget, patience=patience)
    heads = sum(len(unit) for unit in grown.chosen)
    distinct = len(set(asked))
    row = {"max_drop": max_drop, "patience": patience, "rule": name, "distinct_sets": distinct, "rounds": rounds,
           "heads_removed": heads, "rejected": len(grown.rejected),
           "sets_per_head": round(distinct / heads, 2) if heads else None, "stopped": grown.stopped,
           "seconds": round(time.perf_counter() - started)}
    print("| " + " | ".join("n/a" if v is None else f"{v:g}" if isinstance(v, float) else str(v)
                            for v in row.values()) + " |", flush=True)
    print(f"    {name} rounds: {' | '.join(trace)}", file=sys.stderr)
    return row


def build_tiny_case(spec: str, folder: Path) -> tuple[str, str]:
    """``tiny:LAYERS:SEED:INIT``: a random-init Llama of LAYERS x 4 heads (weights drawn with standard deviation
    INIT, large enough that heads change answers) saved in ``folder``, and a random two-choice task of 700
    examples beside it (the tests' tiny tokenizer and task, ``headprune.testing``)."""
    import torch
    import transformers

    from headprune.tasks import write_jsonl_task
    from headprune.testing import bpe_tokenizer, random_choice_task, tiny_config

    layers, seed, init = spec.split(":")[1:]
    tokenizer = bpe_tokenizer()
    torch.manual_seed(int(seed))
    config = tiny_config("llama", len(tokenizer), int(layers), initializer_range=float(init))
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    model.save_pretrained(folder / "model")
    tokenizer.save_pretrained(folder / "model")
    write_jsonl_task(random_choice_task(700, seed=5), folder / "random.jsonl")
    return str(folder / "model"), str(folder / "random.jsonl")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--task", required=True)
    parser.add_argument("--discovery", type=int, default=150)
    parser.add_argument("--heldout", type=int, default=50)
    parser.add_argument("--screen", default="attribution")
    parser.add_argument("--candidates", type=int, default=None, help="a pre-screen's candidates (default: find's)")
    parser.add_argument("--max-drop", type=float, action="append", required=True)
    parser.add_argument("--patience", type=int, action="append", help="repeat for several [default: 3]")
    parser.add_argument("--rules", default="v1,greedy")
    parser.add_argument("--batch-size", default="auto")
    parser.add_argument("--out", type=Path, required=True)
    add_json_option(parser, "compress")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    from headprune.loading.models import load_model

    batch = args.batch_size if args.batch_size == "auto" else int(args.batch_size)
    # The journal's settings are fixed (max_drop and patience go to the rules directly), so every run of this
    # script on the same inputs shares one journal.
    settings = settings_for(FindSettings(finalists=1, batch_size=batch, screen=args.screen,
                                         candidates=args.candidates, objective="compress"))
    model, task = args.model, args.task
    if model.startswith("tiny:"):
        model, task = build_tiny_case(model, args.out)
    inputs = load_inputs(task, None, None, settings, args.discovery, args.heldout)
    lm = load_model(model)
    resume = (args.out / "journal.jsonl").is_file()
    conditions = Conditions.start(lm, inputs.split, (), settings, out=args.out, resume=resume, progress=False,
                                  rule=find_rule().journal)
    stages = Stages(lm, conditions, settings)
    stages.baseline()
    screened, prescreen = stages.screen()
    units = units_of(head_queue(screened, prescreen, lm.grid, stages.rank), lm.grid, "heads")
    rules = {"v1": functools.partial(grow, sets_per_unit=None), "greedy": grow,
             "beam": lambda u, g, e, **kw: beam(u, g, e, stages.intact(), width=4, **kw)}
    print(f"{lm.name} on {inputs.task.name}: discovery {len(inputs.split.discovery)}, queue {len(units)} heads")
    print("| max_drop | patience | rule | distinct sets | rounds | heads removed | rejected | sets per head | "
          "stopped | seconds |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    rows = [_run_rule(rules[name], name, units, stages, max_drop, patience) for max_drop in args.max_drop
            for patience in args.patience or [3] for name in args.rules.split(",")]
    removed = {(r["max_drop"], r["patience"], r["rule"]): r["heads_removed"] for r in rows}
    lost = [key for key, heads in removed.items() if key[2] != "v1" and heads < removed.get((*key[:2], "v1"), 0)]
    if lost:
        print(f"fewer heads than v1: {lost}")
    write_json(args.json, "compress", args, rows, model=lm.name, task=inputs.task.name, queue=len(units),
               fewer_heads_than_v1=[list(key) for key in lost])
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
