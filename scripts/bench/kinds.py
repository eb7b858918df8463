"""Benchmark: headprune's exact screen against the naive loop a practitioner writes, for every task kind.

One process, conditions interleaved (for each condition the naive loop, then headprune), so a change in machine
load hits both alike. The naive loops are the simplest strong ones:

* ``generate``: batched left-padded greedy ``model.generate`` (16 per batch, ``do_sample=False``), stopping a
  row at the first token whose text holds a newline (``eos_token_id`` = the end-of-sequence token plus every
  vocabulary token that decodes to text containing ``\\n``; a batch ends when all its rows have stopped),
  ``max_new_tokens`` of the task; the answer is the text before the newline.
* ``choice``: one left-padded forward pass of the prompts (16 per batch) reading the last position's
  log-probs of each choice's first token (exact for single-token choices, which the script checks).
* ``classify``: the model's own forward pass (16 per batch, padded by the tokenizer), argmax of its logits.
* ``code``: batched left-padded greedy ``model.generate`` (16 per batch) with HumanEval's stop strings
  (``stop_strings``, a row stops when its text holds one; 128 new tokens at most), the completion cut there, then
  every program run against its tests in a process of its own (``headprune.scoring.execution``, as headprune
  runs them; the time it takes is printed, the same work on both sides). The problems come from templates
  (``naive.code_task``: a function's signature and docstring after two solved ones, with a reference solution).

The head is zeroed in both by the same o_proj pre-hook (``headprune.surgery.ablation.ablated``). headprune runs
``Evaluator(..., reuse_layers=True)`` (find's exact screen) with find's default batches (``--batch-size auto``:
on a CPU at most 64 sequences and 4,096 padded tokens; ``--batch`` sets another). Answers are compared example by example (the
generated text for ``generate``; whether the answer is right otherwise): any difference outside the contract's
ties (``headprune.evaluation.contract``: a decision gap within the precision's tolerance) exits 1.

The FLOP limit of a condition is the floating-point work of a plain pass over the real (unpadded) tokens the
naive loop runs, ``2 x (parameters - embedding) x tokens + 4 x heads x head size x layers x attention pairs +
2 x vocabulary x hidden x logit rows`` (prompt and generated tokens for ``generate`` and ``code``; the prompts
for ``choice``; the texts for ``classify``; an attention pair is a query and a key it attends to: ``n (n + 1) /
2`` in a causal sequence of ``n`` tokens, ``n^2`` in an encoder's; a code condition's programs are not counted),
divided by the float32 matmul rate of this machine (1024 x
1024, the threads torch uses): the higher of torch's own product (MKL's sgemm) and oneDNN's, measured at the start
and after each kind; the highest (the strictest limit) is used. headprune computes its linear layers with the
faster of the two (``headprune.core.cpu_linear``, printed at the start); the naive loops are plain transformers (torch's
product), as a practitioner runs them: on a CPU where oneDNN is the faster, part of the ratio is that choice, and
``HEADPRUNE_CPU_LINEAR=torch`` shows headprune without it.

Each condition runs ``--repeat`` times per side (interleaved) and each side's best time is kept: on a shared
machine the best run is the one least slowed by others. headprune's repeats are separate evaluators, each running the
conditions once, in order, as find does: no repeat finds what an earlier run of the same condition left behind (a
program's outcome, a text to draft from).

``--profile`` then runs each ablated choice and classify condition once more under torch's profiler and prints
where its time goes: the matrix products (and their rate against the measured one), the attention kernel, the
other ops.

    python -m scripts.bench.kinds [--kinds generate,choice,classify,code] [--n 150] [--code-n 60] [--heads 4]
                                  [--repeat 1] [--profile] [--json runs/bench/kinds.json]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Callable

import numpy as np
import torch

from headprune.core import cpu_linear
from headprune.core.devices import dtype_name
from headprune.evaluation import Evaluator
from headprune.evaluation.contract import allowance
from headprune.evaluation.first_position import reads_first_position
from headprune.evaluation.results import EvalResult
from headprune.heads import Head
from headprune.loading.adapters.base import get_path
from headprune.loading.models import LoadedModel, load_model
from headprune.scoring.execution import permit_code_execution
from headprune.tasks import Task, load_task

from .common import add_json_option, matmul_rates, timed, write_json
from .naive import NaiveChoice, NaiveClassify, NaiveCode, NaiveGenerate, classifier_and_task, code_task

GENERATING = ("generate", "code")


def work_gflop(lm: LoadedModel, tokens: int, pairs: int, logit_rows: int) -> float:
    """Floating-point work (GFLOP) of a plain pass over ``tokens`` real tokens whose queries attend to ``pairs``
    keys in all (per layer), with ``logit_rows`` vocabulary rows."""
    model = lm.model
    params = sum(p.numel() for p in model.parameters())
    embedding = model.get_input_embeddings().weight
    vocab, hidden = embedding.shape
    return (2 * (params - embedding.numel()) * tokens + attention_flop(lm) * pairs
            + 2 * vocab * hidden * logit_rows) / 1e9


def attention_flop(lm: LoadedModel) -> int:
    """Per attention pair (a query and a key), in all layers: the query-key product and the value sum, per head."""
    grid = lm.grid
    return 4 * grid.num_heads * grid.head_dim * grid.num_layers


def own_work(evaluator: Evaluator, heads: tuple[Head, ...]) -> tuple[float, float]:
    """The work headprune's teacher-forced pass itself does for ``heads`` (GFLOP) and the padded share of its
    token rows: each item's tokens after the shared prefix (the prefix once) and their attention pairs, through the
    layers from the lowest ablated one up when the layer cache replays the ones below, plus the vocabulary rows it
    reads; a classifier reading the first position alone computes its last layer after the attention there only
    (``headprune.evaluation.first_position``)."""
    lm, work = evaluator.lm, evaluator.work()
    layers = lm.grid.num_layers
    above = layers - min(h.layer for h in heads) if heads and evaluator.layers.complete else layers
    embedding = lm.model.get_input_embeddings().weight
    vocab, hidden = embedding.shape
    per_token = 2 * (sum(p.numel() for p in lm.model.parameters()) - embedding.numel()) * above / layers
    gflop = (per_token * work.tokens + attention_flop(lm) * work.attention_pairs(not lm.is_encoder) * above / layers
             + 2 * vocab * hidden * sum(work.read)) / 1e9
    if reads_first_position(lm):  # the last layer after its attention runs at one position per sequence
        last = lm.adapter.layers(lm.model)[-1]
        qkv = sum(p.numel() for path in lm.adapter.qkv_paths for p in get_path(last, path).parameters())
        gflop -= 2 * (sum(p.numel() for p in last.parameters()) - qkv) * (work.tokens - len(work.lengths)) / 1e9
    return gflop, 1 - work.tokens / max(work.padded_tokens, work.tokens)


# A matrix product's op, and where its two operands start: mm(a, b), addmm(bias, a, b) for layers with a bias, and
# oneDNN's linear(x, weight, bias) with weight (out, in) and x (..., in).
PRODUCTS = {"aten::mm": 0, "aten::addmm": 1, "mkldnn::_linear_pointwise": 0}


def product_gflop(name: str, shapes: list[list[int]]) -> float:
    """The work of one matrix product op, from its operands' shapes."""
    first, second = shapes[PRODUCTS[name]: PRODUCTS[name] + 2]
    if name.startswith("mkldnn"):
        return 2 * math.prod(first) * second[0] / 1e9
    (rows, inner), (_, cols) = first, second
    return 2 * rows * inner * cols / 1e9


def profile(evaluator: Evaluator, heads: list[tuple[Head, ...]], rate: float) -> None:
    """Where an ablated condition's time goes, per condition, under torch's profiler (which slows it a little):
    the matrix products (seconds, and their rate against ``rate``), the attention kernel and every other op."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as profiled

    for condition in heads:
        with profiled(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            start = time.perf_counter()
            evaluator.run(condition)
            wall = time.perf_counter() - start
        gflop = sum(product_gflop(e.name, e.input_shapes) for e in prof.events() if e.name in PRODUCTS)
        ops = {e.key: e.self_cpu_time_total / 1e6 for e in prof.key_averages()
               if e.key.startswith(("aten::", "mkldnn::"))}
        matmul = max(sum(ops.get(name, 0.0) for name in PRODUCTS), 1e-9)
        attention = sum(t for key, t in ops.items() if "attention" in key)
        print(f"  profiled {condition[0]}: {wall:.2f} s; matrix products {matmul:.2f} s for {gflop:.0f} GFLOP "
              f"({gflop / matmul:.0f} GFLOP/s, {100 * gflop / matmul / rate:.0f}% of the measured rate), attention "
              f"kernel {attention:.2f} s, other ops {sum(ops.values()) - matmul - attention:.2f} s", flush=True)


def differing(kind: str, result: EvalResult, naive: list, dtype: str) -> tuple[int, int]:
    """Answers that differ outside the contract's ties, and the ties among all differing ones."""
    ours = result.texts if kind in GENERATING else [bool(c) for c in result.correct]
    differ = np.array([a != b for a, b in zip(ours, naive)], dtype=bool)
    decides = result.decisions
    ties = np.abs(decides) <= allowance(dtype, decides)
    return int((differ & ~ties).sum()), int((differ & ties).sum())


def bench(kind: str, label: str, lm: LoadedModel, task: Task, naive: Callable, heads: list[tuple[Head, ...]],
          rate: float, batch: int | str, repeat: int, explain: bool = False) -> dict:
    """Time the naive loop and headprune on the intact model and each of ``heads``; the kind's row of the table."""
    # An evaluator per repeat, each running the conditions once in order, as find does: a repeat never finds what an
    # earlier run of the same condition left (a program's outcome, a text to draft from).
    evaluators = [Evaluator(lm, task, batch_size=batch, reuse_layers=True) for _ in range(repeat)]
    seconds = {"naive": [], "headprune": []}
    bad = ties = 0
    for condition in [(), *heads]:  # the intact run first: headprune's fills the layer cache there
        times: dict[str, list[float]] = {"naive": [], "headprune": []}
        for evaluator in evaluators:  # each side's best of `repeat` runs, interleaved
            answers, spent = timed(lambda: naive(condition))
            times["naive"].append(spent)
            result, spent = timed(lambda: evaluator.run(condition))
            times["headprune"].append(spent)
            b, t = differing(kind, result, answers, dtype_name(lm.dtype))
            bad, ties = bad + b, ties + t
        for side, runs in times.items():
            seconds[side].append(min(runs))
    rate = max(rate, *matmul_rates().values())  # the rate after the kind too: the higher, the stricter the limit
    limit = work_gflop(lm, naive.tokens, naive.pairs, naive.logit_rows) / rate
    ablated_naive, ablated_ours = float(np.mean(seconds["naive"][1:])), float(np.mean(seconds["headprune"][1:]))
    row = {"kind": kind, "task": label, "n": len(task), "naive_s": ablated_naive, "headprune_s": ablated_ours,
           "ratio": ablated_naive / ablated_ours, "differing": bad, "ties": ties,
           "naive_x_limit": ablated_naive / limit, "headprune_x_limit": ablated_ours / limit, "limit_s": limit,
           "matmul_gflops": rate, "intact_naive_s": seconds["naive"][0], "intact_headprune_s": seconds["headprune"][0]}
    if kind not in GENERATING:  # a generating condition also decodes; its own work is not only the forced pass
        works = [own_work(evaluators[0], condition) for condition in heads]
        own = float(np.mean([w for w, _ in works])) / rate
        row.update(own_limit_s=own, padding=works[0][1])
        print(f"{kind:<9} headprune's own work (forced pass after the shared prefix, layers from the ablated one "
              f"up): limit {own:.2f} s, headprune x{ablated_ours / own:.2f}; padding {100 * works[0][1]:.0f}% of "
              f"its token rows", flush=True)
        if explain:
            profile(evaluators[0], heads, rate)
    if kind == "code":
        row["program_s"] = naive.program_seconds
    print(f"{kind:<9} {task.name} n={len(task)}: naive {ablated_naive:7.2f} s  headprune {ablated_ours:7.2f} s per "
          f"ablated condition  ratio x{row['ratio']:4.1f}  | intact: naive {seconds['naive'][0]:.2f} s, "
          f"headprune {seconds['headprune'][0]:.2f} s | matmul {rate:.0f} GFLOP/s | FLOP limit {limit:.2f} s: naive "
          f"x{row['naive_x_limit']:.2f}, headprune x{row['headprune_x_limit']:.2f} | answers differing: {bad} "
          f"(+{ties} ties)" + (f" | running the programs: {naive.program_seconds:.2f} s of each side's condition"
                               if kind == "code" else ""), flush=True)
    return row


def setup(kind: str, args: argparse.Namespace, causal: LoadedModel | None) -> tuple[str, LoadedModel, Task, Callable]:
    """The kind's table label, model, task and naive loop."""
    if kind == "classify":
        lm, task = classifier_and_task(args.n)
        return f"Rotten Tomatoes sentences, n={args.n}", lm, task, NaiveClassify(lm, task)
    if kind == "code":
        task = code_task(args.code_n)
        return f"{args.code_n} template problems (`--code-n {args.code_n}`)", causal, task, NaiveCode(causal, task)
    spec = args.generate_task if kind == "generate" else args.choice_task
    task = load_task(spec)
    return f"`{spec}`", causal, task, (NaiveGenerate if kind == "generate" else NaiveChoice)(causal, task)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--kinds", default="generate,choice,classify,code")
    parser.add_argument("--generate-task", default="arithmetic:n=150")
    parser.add_argument("--choice-task", default="sentiment:n=150")
    parser.add_argument("--n", type=int, default=150, help="classify: Rotten Tomatoes sentences")
    parser.add_argument("--code-n", type=int, default=60, help="code: problems from templates")
    parser.add_argument("--heads", type=int, default=4, help="single heads ablated, spread over the layers")
    parser.add_argument("--batch", default="auto", help="headprune's --batch-size (the naive loops: 16)")
    parser.add_argument("--repeat", type=int, default=1, help="runs per condition and side; the best is kept")
    parser.add_argument("--profile", action="store_true",
                        help="choice, classify: where each ablated condition's time goes (torch's profiler)")
    add_json_option(parser, "kinds")
    args = parser.parse_args(argv)
    rates = matmul_rates()
    rate = max(rates.values())
    print(f"torch threads {torch.get_num_threads()}, float32 1024^3 products: torch {rates['torch']:.0f} GFLOP/s, "
          f"oneDNN {rates['onednn']:.0f}; headprune's CPU linear kernel {cpu_linear.kernel()}; load average "
          f"{os.getloadavg()[0]:.1f}", flush=True)
    kinds = args.kinds.split(",")
    unknown = set(kinds) - {"generate", "choice", "classify", "code"}
    if unknown:
        raise SystemExit(f"unknown kind {sorted(unknown)[0]!r}: generate, choice, classify or code")
    causal = load_model(args.model) if {"generate", "choice", "code"} & set(kinds) else None
    rows = []
    for kind in kinds:
        label, lm, task, naive = setup(kind, args, causal)
        grid = lm.grid
        heads = [(Head(layer, (7 * layer) % grid.num_heads),)
                 for layer in np.linspace(0, grid.num_layers - 1, args.heads).round().astype(int).tolist()]
        with permit_code_execution():  # the code kind runs the programs SmolLM2 writes, as its tasks do
            rows.append(bench(kind, label, lm, task, naive, heads, rate, args.batch, args.repeat, args.profile))
    print(f"load average at the end {os.getloadavg()[0]:.1f}")
    write_json(args.json, "kinds", args, rows, matmul_gflops=rates, cpu_linear=cpu_linear.kernel())
    if any(row["differing"] for row in rows):
        print("answers differ from the naive loop outside the contract's ties", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
