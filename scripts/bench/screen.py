"""Benchmark: headprune's exact screen against the naive loop, in one process, on the same examples.

The naive loop is a faithful reference of how the research code screens: for every condition, one full
forward pass per batch of 16 over every prompt+choice sequence (left-padded), all logits, with a pre-hook
zeroing the head at the output-projection input. headprune's screen is run with each optimisation alone and
with all of them; results must keep the contract of ``headprune.evaluation.contract`` (the same answer on every
example, margins within 1e-4 x max(1, |margin|) in float32): otherwise the script says where and exits 1.

    python -m scripts.bench.screen [--model smollm2-135m] [--task sentiment] [--n 150] [--layer-step 7]
                                   [--all-heads]   # also: attribution and halving rank quality vs exact

Prints seconds per condition and ratios against the naive loop, extrapolated to every head; writes them to
``--json`` (default runs/bench/screen.json).
"""

from __future__ import annotations

import argparse
import resource
import sys

import numpy as np
import torch
import torch.nn.functional as F

from headprune.core.devices import dtype_name
from headprune.evaluation import Evaluator
from headprune.evaluation.contract import tolerance
from headprune.heads import Head
from headprune.loading.models import load_model
from headprune.search.paired import compare
from headprune.search.stats import spearman
from headprune.surgery.ablation import ablated
from headprune.tasks import load_task

from .common import add_json_option, left_padded, pad_id, timed, write_json


def naive_margins(lm, task, heads, batch_size: int = 16) -> tuple[np.ndarray, np.ndarray]:  # noqa: ANN001
    """One full forward per batch of prompt+choice sequences; correct and margin per example."""
    tok = lm.tokenizer
    rows = []  # (example, choice, context length, tokens)
    for e, example in enumerate(task.examples):
        context = tok(example.prompt)["input_ids"]
        for c, choice in enumerate(example.choices):
            whole = tok(example.prompt + choice)["input_ids"]
            rows.append((e, c, len(context), whole))
    scores = np.zeros((len(task), max(len(e.choices) for e in task.examples)))
    with torch.inference_mode(), ablated(lm, heads):
        for start in range(0, len(rows), batch_size):
            chunk = rows[start : start + batch_size]
            ids, mask = left_padded([seq for *_, seq in chunk], pad_id(tok), lm.device)
            width = ids.shape[1]
            logits = lm.model(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0)
                              ).logits
            logprobs = F.log_softmax(logits.float(), -1)
            for i, (e, c, ctx_len, seq) in enumerate(chunk):
                offset = width - len(seq)
                scores[e, c] = sum(float(logprobs[i, offset + t - 1, seq[t]]) for t in range(ctx_len, len(seq)))
    answers = np.array([e.answer for e in task.examples])
    right = scores[np.arange(len(task)), answers]
    masked = scores.copy()
    masked[np.arange(len(task)), answers] = -np.inf
    return right > masked.max(1), right - masked.max(1)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--task", default="sentiment")
    parser.add_argument("--n", type=int, default=150)
    parser.add_argument("--layer-step", type=int, default=7, help="sample one head every N layers")
    parser.add_argument("--all-heads", action="store_true", help="exact screen of every head (slow)")
    parser.add_argument("--device", default="auto", help="auto (the GPU when there is one), cpu, cuda, cuda:N")
    parser.add_argument("--dtype", default="auto", help="auto (bfloat16 on a GPU, float32 on a CPU), float32, ...")
    add_json_option(parser, "screen")
    args = parser.parse_args(argv)
    lm = load_model(args.model, dtype=args.dtype, device=args.device)
    task = load_task(args.task).first(args.n)
    grid = lm.grid
    layers = sorted(set(range(0, grid.num_layers, args.layer_step)) | {grid.num_layers - 1})
    sample = [Head(layer, (layer * 7) % grid.num_heads) for layer in layers]
    print(f"{args.model} x {args.task}, {len(task)} examples, {len(sample)} sampled heads of {grid.total}; "
          f"torch threads {torch.get_num_threads()}")
    variants = {
        "scored logits only": dict(share_prefix=False, reuse_layers=False),
        "+ shared prefix": dict(share_prefix=True, reuse_layers=False),
        "+ layer reuse (no prefix)": dict(share_prefix=False, reuse_layers=True),
        "all (headprune default in find)": dict(share_prefix=True, reuse_layers=True),
    }
    evaluators = {name: Evaluator(lm, task, batch_size=16, **options) for name, options in variants.items()}
    for evaluator in evaluators.values():
        evaluator.run()  # baseline (fills the layer cache)
    # Each head is timed in every variant back to back, so a change in machine load hits all variants alike.
    seconds = {"naive": 0.0, **{name: 0.0 for name in variants}}
    mismatches = {name: 0 for name in variants}
    breaches = []
    allowed = tolerance(dtype_name(lm.dtype))
    for head in sample:
        (correct, margins), spent = timed(lambda: naive_margins(lm, task, (head,)))
        seconds["naive"] += spent
        for name, evaluator in evaluators.items():
            result, spent = timed(lambda: evaluator.run([head]))
            seconds[name] += spent
            mismatches[name] += int((result.correct != correct).sum())
            worst = float((np.abs(result.margins - margins) / np.maximum(1.0, np.abs(margins))).max())
            if (result.correct != correct).any() or worst > allowed:
                breaches.append(f"{name}, {head}: {int((result.correct != correct).sum())} answers differ, margins "
                                f"up to {worst:.2g} x max(1, |margin|) apart (allowed {allowed:g})")
    per_naive = seconds["naive"] / len(sample)
    print(f"naive loop: {per_naive:.2f} s per condition -> {per_naive * grid.total / 60:.1f} min for all heads")
    rows = [{"variant": "naive loop", "s_per_condition": per_naive, "ratio": 1.0, "differing": 0}]
    for name in variants:
        per = seconds[name] / len(sample)
        rows.append({"variant": name, "s_per_condition": per, "ratio": per_naive / per, "differing": mismatches[name]})
        print(f"{name:<34} {per:6.2f} s per condition  ratio x{per_naive / per:5.1f}  "
              f"answers differing from naive: {mismatches[name]}")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS: {peak:.0f} MiB")
    write_json(args.json, "screen", args, rows, heads_sampled=len(sample), heads=grid.total, peak_rss_mib=peak,
               breaches=breaches)
    if breaches:
        print("NOT the same results as the naive loop:\n  " + "\n  ".join(breaches), file=sys.stderr)
        sys.exit(1)

    if args.all_heads:
        from headprune.search.attribution import estimate_effects

        evaluator = Evaluator(lm, task, batch_size=16, reuse_layers=True)
        base = evaluator.run()
        estimate, attribution_s = timed(lambda: estimate_effects(evaluator))
        exact, exact_s = timed(lambda: {h: compare(base, evaluator.run([h])) for h in grid.all_heads()})
        heads = grid.all_heads()
        rho = spearman(np.array([estimate[h] for h in heads]), np.array([exact[h].margin_change for h in heads]))
        top_exact = sorted(heads, key=lambda h: (-exact[h].gain, exact[h].damaged, -exact[h].margin_change))[:10]
        top_estimate = set(sorted(heads, key=lambda h: -estimate[h])[:30])
        print(f"exact screen of all {len(heads)} heads: {exact_s / 60:.1f} min; attribution pass {attribution_s:.1f} s")
        print(f"attribution vs exact: Spearman {rho:.2f} (margin change); exact top 10 in estimate top 30: "
              f"{len(top_estimate.intersection(top_exact))}/10")
        from headprune.search.find import rank_key
        from headprune.search.halving import halving_candidates

        survivors, _ = halving_candidates(lm, task, keep=30, rank_key=lambda p, h: rank_key(p, h, "gain"),
                                          mode="zero", means=None, batch_size=16, progress=False)
        print(f"successive halving keeps {len(set(survivors).intersection(top_exact))}/10 of the exact top 10 "
              "among its 30 survivors")


if __name__ == "__main__":
    main()
