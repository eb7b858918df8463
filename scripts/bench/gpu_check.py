"""One command that answers what a lent GPU can tell: find's stages and an export at real model shapes.

On whatever device it finds (``--device auto``: the GPU when there is one), for each config (Llama-3.2-1B and
Llama-3.1-8B shapes by default, layers cut by ``--layers`` to fit the time), it builds a random-initialised
model in bfloat16 (nothing is downloaded; weights are drawn on the device) and runs:

- ``baseline``: the intact model on a choice task and on the arithmetic generate task (``Evaluator.run``);
- ``screen``: exact single-head conditions (the layer cache and the shared prefix, as find runs them);
- ``attribution``: the one-pass estimate of every head's effect;
- ``joint``: conditions of head pairs;
- ``export``: a sliced safetensors export of two heads, verified (logits and the task) before writing.

Per stage it prints seconds, examples/s, tokens/s, the effective TFLOP/s (a plain forward pass's work over
the tokens it covers: 2 x parameters x tokens, the attention scores left out) with its fraction of the
device's peak (measured with a large bfloat16 matmul, and the data sheet's figure for known GPUs), and the peak
device memory. Two contracts are checked: headprune's fast path against a plain full forward pass in the same
dtype (``headprune.evaluation.contract``), and the bfloat16 model against a float32 copy of itself (answers
outside near-ties, and margins within the bfloat16 tolerance). Writes everything to ``--json`` (default
runs/bench/gpu_check.json): the device's figures, and a result per config with its stages' rows.

    python -m scripts.bench.gpu_check                          # 1b and 8b shapes, 4 layers each
    python -m scripts.bench.gpu_check --configs tiny --n 8     # seconds on a CPU (what the test suite runs)
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from headprune.core.devices import resolve_device
from headprune.evaluation import Evaluator
from headprune.evaluation.contract import disagreement, rounding_spread
from headprune.heads import Head
from headprune.loading.models import LoadedModel, wrap_model
from headprune.tasks import Example, Task, load_task
from headprune.testing import bpe_tokenizer, llama_config, random_llama

from .common import add_json_option, product_rate, write_json

CONFIGS = ("tiny", "1b", "8b")  # of headprune.testing.LLAMA_SHAPES: real checkpoints' shapes, all layers; --layers cuts
DATASHEET_BF16_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0, "A10G": 125.0, "L4": 121.0}
WORDS = "the film is a dull delight movie with nothing to say it and so on great bad plot actors".split()


def tokenizer():  # noqa: ANN201
    """A small byte-level BPE tokenizer trained in memory (its ids index the model's larger vocabulary)."""
    return bpe_tokenizer([" ".join(WORDS), "0 1 2 3 4 5 6 7 8 9 + - = \n Review: Sentiment:"], vocab_size=400)


def build(name: str, layers: int | None, dtype: torch.dtype, device: torch.device, tok) -> LoadedModel:  # noqa: ANN001
    """A random-initialised Llama of the config's shape, drawn directly on ``device`` in ``dtype``."""
    config = llama_config(name, layers, max_position_embeddings=4096, tie_word_embeddings=False)
    return wrap_model(random_llama(config, dtype, device), tok, name=f"random-{name}")


def tasks(n: int) -> dict[str, Task]:
    rng = np.random.default_rng(0)
    prefix = "Review: the film is a delight\nSentiment: positive\n\nReview: a dull movie\nSentiment: negative\n\n"
    choice = Task("choice", "choice", tuple(
        Example(f"c{i}", prompt=prefix + "Review: " + " ".join(rng.choice(WORDS, size=8 + i % 9)) + "\nSentiment:",
                choices=(" negative", " positive"), answer=int(rng.integers(2))) for i in range(n)))
    return {"choice": choice, "generate": load_task(f"arithmetic:n={n}")}


def peak_tflops(device: torch.device, dtype: torch.dtype) -> float:
    """Measured dense matmul rate (TFLOP/s) of the device in ``dtype``."""
    size = 8192 if device.type == "cuda" else 1024
    a, b = (torch.randn(size, size, device=device, dtype=dtype) for _ in range(2))
    return product_rate(lambda: a @ b, size, repeats=20 if device.type == "cuda" else 3, runs=1, warmup=2,
                        sync=lambda: _sync(device)) / 1e3


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _memory(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _figure(value: float) -> float:
    """Four significant digits (a CPU's TFLOP/s and a GPU's are orders of magnitude apart)."""
    return float(f"{value:.4g}")


def stage(name: str, run, *, device: torch.device, examples: int, tokens: int, flop: float, peak: float,  # noqa: ANN001
          datasheet: float | None) -> dict:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    _sync(device)
    start = time.perf_counter()
    value = run()
    _sync(device)
    seconds = time.perf_counter() - start
    achieved = flop / seconds / 1e12
    row = {"stage": name, "seconds": _figure(seconds), "examples_per_s": _figure(examples / seconds),
           "tokens_per_s": _figure(tokens / seconds), "effective_tflops": _figure(achieved),
           "of_measured_peak": _figure(achieved / peak),
           "of_datasheet_peak": None if datasheet is None else _figure(achieved / datasheet),
           "peak_memory_gib": round(_memory(device) / 2**30, 2)}
    print(json.dumps(row), flush=True)
    return {**row, "value": value}


def check_config(name: str, args: argparse.Namespace, device: torch.device, peak: float,
                 datasheet: float | None) -> dict:
    tok = tokenizer()
    lm = build(name, args.layers, torch.bfloat16, device, tok)
    params = sum(p.numel() for p in lm.model.parameters())
    grid = lm.grid
    heads = [Head(layer, (3 * layer + 1) % grid.num_heads) for layer in range(grid.num_layers)][: args.conditions]
    pairs = [tuple(sorted(p)) for p in zip(heads, heads[1:])][: args.conditions]
    out: dict = {"config": name, "layers": grid.num_layers, "parameters": params, "rows": []}
    print(f"{name}: {params / 1e9:.2f}B parameters, {grid.num_layers} layers, {grid.total} heads, bfloat16 on "
          f"{device}", flush=True)
    for kind, task in tasks(args.n).items():
        evaluator = Evaluator(lm, task, batch_size=args.batch_size, reuse_layers=True)
        plain = Evaluator(lm, task, batch_size=args.batch_size, share_prefix=False)
        tokens = sum(int(mask.sum()) for _, mask, _ in plain.reference_batches())
        flop = 2.0 * params * tokens
        common = dict(device=device, examples=len(task), tokens=tokens, peak=peak, datasheet=datasheet)
        base = stage(f"{kind}: baseline", evaluator.run, flop=flop, **common)
        singles = stage(f"{kind}: screen ({len(heads)} heads)", lambda: [evaluator.run([h]) for h in heads],
                        flop=flop * len(heads), **{**common, "examples": len(task) * len(heads),
                                                   "tokens": tokens * len(heads)})
        joint = stage(f"{kind}: joint ({len(pairs)} pairs)", lambda: [evaluator.run(list(p)) for p in pairs],
                      flop=flop * len(pairs), **{**common, "examples": len(task) * len(pairs),
                                                 "tokens": tokens * len(pairs)})
        rows = [base, singles, joint]
        if kind == "choice":
            from headprune.search.attribution import estimate_effects

            rows.append(stage(f"{kind}: attribution (every head)", lambda: estimate_effects(evaluator),
                              flop=3 * flop, **common))
        # The contract: the fast path (layer cache, shared prefix) against a plain full forward, in bfloat16, their
        # spread within twice what bfloat16's own rounding does against float32 on this device.
        reference = _float32_reference(lm, task, heads[0], args.batch_size)
        slow = plain.run([heads[0]])
        breach, _ = disagreement(slow, singles["value"][0], "bfloat16", spread_bound=rounding_spread(reference, slow))
        drift, ties = disagreement(reference, singles["value"][0], "bfloat16")
        out["rows"] += [{k: v for k, v in row.items() if k != "value"} for row in rows]
        out[f"{kind}_fast_path_contract"] = breach or "holds"
        out[f"{kind}_vs_float32"] = drift or f"holds ({ties} near-ties)"
        print(f"{kind}: fast path vs plain forward: {out[f'{kind}_fast_path_contract']}; bfloat16 vs float32: "
              f"{out[f'{kind}_vs_float32']}", flush=True)
    out["rows"].append(_export_stage(lm, heads[:2], tasks(min(args.n, 16))["choice"], device, peak, datasheet))
    del lm
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return out


def _float32_reference(lm: LoadedModel, task: Task, head: Head, batch_size: int | str):  # noqa: ANN202
    """The same condition on a float32 copy of the model (plain forward passes)."""
    import copy

    reference = copy.deepcopy(lm.model).float()
    result = Evaluator(wrap_model(reference, lm.tokenizer, name="float32"), task, batch_size=batch_size,
                       share_prefix=False).run([head])
    del reference
    return result


def _export_stage(lm: LoadedModel, heads: list[Head], task: Task, device: torch.device, peak: float,
                  datasheet: float | None) -> dict:
    from headprune.exporter import export

    with tempfile.TemporaryDirectory() as scratch:
        row = stage("export: sliced safetensors, verified", lambda: export(lm, heads, verify_task=task,
                                                                           out=Path(scratch) / "pruned"),
                    device=device, examples=len(task), tokens=0, flop=0.0, peak=peak, datasheet=datasheet)
    record = row.pop("value")
    row["parameters_after"] = record.parameters.after
    row["max_abs_logit_diff"] = record.verification.logits.max_abs_diff
    return row


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", default="1b,8b", help=f"comma-separated, of {', '.join(CONFIGS)}")
    parser.add_argument("--layers", type=int, default=4, help="layers kept of each config (0: all)")
    parser.add_argument("--n", type=int, default=128, help="examples per task")
    parser.add_argument("--conditions", type=int, default=4, help="single heads and pairs timed per task")
    parser.add_argument("--batch-size", default="auto")
    parser.add_argument("--device", default="auto")
    add_json_option(parser, "gpu_check")
    args = parser.parse_args(argv)
    args.batch_size = args.batch_size if args.batch_size == "auto" else int(args.batch_size)
    args.layers = args.layers or None
    device = resolve_device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    datasheet = next((v for k, v in DATASHEET_BF16_TFLOPS.items() if k in name), None)
    peak = peak_tflops(device, torch.bfloat16)
    report = {"device": name, "torch": torch.__version__, "measured_bf16_matmul_tflops": round(peak, 3),
              "datasheet_bf16_tflops": datasheet, "configs": []}
    print(json.dumps({k: v for k, v in report.items() if k != "configs"}), flush=True)
    for config in args.configs.split(","):
        report["configs"].append(check_config(config, args, device, peak, datasheet))
    return write_json(args.json, "gpu_check", args, report.pop("configs"), **report)


if __name__ == "__main__":
    main()
