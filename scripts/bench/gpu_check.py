"""One command that answers what a GPU can tell: each part of find and of an export at real model shapes,
timed, with its peak memory and against the device's measured limits.

On whatever device it finds (``--device auto``: the GPU when there is one), it first measures the two ceilings
(a large bfloat16 matmul's TFLOP/s, a large device-to-device copy's GB/s: ``gpu_parts``), then for each config
(Llama-3.2-1B and Llama-3.1-8B shapes by default, layers cut by ``--layers`` to fit the time) builds a random-
initialised model in bfloat16 (nothing is downloaded; weights are drawn on the device) and times these parts:

- ``build``; per task (a choice task, the arithmetic generate task) ``setup`` (tokenizing, batch plans),
  ``baseline`` (the intact model), ``screen`` (exact single-head conditions, layer cache and shared prefix as find
  runs them), ``joint`` (head pairs), ``attribution`` (choice: the one-pass estimate of every head);
- the contracts: ``fast path vs plain forward`` (headprune's fast path against a plain full forward pass in the
  same dtype, ``headprune.evaluation.contract``) and ``float32 reference`` (the bfloat16 model against a float32
  copy of itself, where that copy fits in memory), each with the tolerance it used;
- the export (``gpu_export``): slicing, writing, verification (tensors, logits, task), runtime check, the rest.

A part's row: seconds, peak memory, examples/s, tokens/s, the *effective* TFLOP/s (2 x parameters x tokens
covered, the attention scores left out, as find's conditions would cost without headprune's shortcuts) over the
measured bfloat16 peak and the data sheet's, and the work its layers really did against the roofline
(``of_limit``: decoding steps are judged by the bytes they read over the measured bandwidth). ``--protocol``
instead times the paper's protocol at a 3B shape (``protocol``). Writes everything to ``--json`` (default
runs/bench/gpu_check.json) and prints a table last.

    python -m scripts.bench.gpu_check                          # 1b and 8b shapes, 4 layers each
    python -m scripts.bench.gpu_check --configs 8b --layers 0 --n 64 --conditions 2   # the full 8B
    python -m scripts.bench.gpu_check --protocol               # the paper's protocol at the 3B shape
    python -m scripts.bench.gpu_check --configs tiny --n 8 --device cpu   # seconds on a CPU (the test suite)
"""

from __future__ import annotations

import argparse
import copy
import json

import numpy as np
import torch

from headprune.core.devices import resolve_device
from headprune.evaluation import Evaluator
from headprune.evaluation.contract import ABSOLUTE_TOLERANCE, disagreement, rounding_spread, tolerance
from headprune.heads import Head
from headprune.loading.models import LoadedModel, wrap_model
from headprune.tasks import Example, Task, load_task
from headprune.testing import LLAMA_SHAPES, llama_config, random_llama

from .common import add_json_option, write_json
from .gpu_export import export_parts
from .gpu_inputs import WORDS, tokenizer
from .gpu_parts import Ceilings, measure_ceilings, part

CONFIGS = tuple(LLAMA_SHAPES)  # of headprune.testing.LLAMA_SHAPES: real checkpoints' shapes; --layers cuts them
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


def _fits_float32(lm: LoadedModel, device: torch.device) -> tuple[bool, str]:
    """Whether a float32 copy of the model fits beside it (with a fifth to spare), and why not."""
    need = 4 * sum(p.numel() for p in lm.model.parameters()) * 1.2
    if device.type != "cuda":
        return True, ""
    free = torch.cuda.mem_get_info(device)[0]
    return need <= free, f"a float32 copy needs {need / 2**30:.1f} GiB, {free / 2**30:.1f} GiB free"


def _contracts(lm: LoadedModel, kind: str, task: Task, head: Head, fast, args: argparse.Namespace,  # noqa: ANN001
               device: torch.device, ceilings: Ceilings) -> tuple[list[dict], dict]:
    """The fast path against a plain forward pass, and the bfloat16 model against a float32 copy of itself."""
    plain = Evaluator(lm, task, batch_size=args.batch_size, share_prefix=False)
    slow = part(f"{kind}: contract: plain forward ({head})", lambda: plain.run([head]), device=device,
                ceilings=ceilings, lm=lm)
    rows, out = [slow], {}
    fits, why = _fits_float32(lm, device)
    if not fits:
        out[f"{kind}_fast_path_contract"] = out[f"{kind}_vs_float32"] = f"not checked: {why}"
        print(f"{kind}: float32 reference not built: {why}", flush=True)
        return rows, out

    def reference_run():  # noqa: ANN202
        reference = wrap_model(copy.deepcopy(lm.model).float(), lm.tokenizer, name="float32")
        return Evaluator(reference, task, batch_size=args.batch_size, share_prefix=False).run([head])

    reference = part(f"{kind}: contract: float32 reference ({head})", reference_run, device=device,
                     ceilings=ceilings)
    rows.append(reference)
    if device.type == "cuda":
        torch.cuda.empty_cache()
    bound = rounding_spread(reference["value"], slow["value"])
    breach, _ = disagreement(slow["value"], fast["value"][0], "bfloat16", spread_bound=bound)
    drift, ties = disagreement(reference["value"], fast["value"][0], "bfloat16")
    allowed = (f"margins within {tolerance('bfloat16'):g} x max(1, |margin|) + {ABSOLUTE_TOLERANCE['bfloat16']:g}, "
               f"answers equal outside near-ties")
    out[f"{kind}_fast_path_contract"] = breach or "holds"
    out[f"{kind}_vs_float32"] = drift or f"holds ({ties} near-ties)"
    out[f"{kind}_tolerances"] = f"{allowed}; fast path vs plain: spread within {bound:.3g} (twice float32's)"
    print(f"{kind}: fast path vs plain forward: {out[f'{kind}_fast_path_contract']}; bfloat16 vs float32: "
          f"{out[f'{kind}_vs_float32']}; tolerances: {out[f'{kind}_tolerances']}", flush=True)
    return rows, out


def check_config(name: str, args: argparse.Namespace, device: torch.device, ceilings: Ceilings) -> dict:
    tok = tokenizer()
    built = part(f"{name}: build (random weights, bfloat16)",
                 lambda: build(name, args.layers, torch.bfloat16, device, tok), device=device, ceilings=ceilings)
    lm = built.pop("value")
    params = sum(p.numel() for p in lm.model.parameters())
    grid = lm.grid
    heads = [Head(layer, (3 * layer + 1) % grid.num_heads) for layer in range(grid.num_layers)][: args.conditions]
    pairs = [tuple(sorted(p)) for p in zip(heads, heads[1:])][: args.conditions]
    out: dict = {"config": name, "layers": grid.num_layers, "parameters": params, "rows": [built]}
    print(f"{name}: {params / 1e9:.2f}B parameters, {grid.num_layers} layers, {grid.total} heads, bfloat16 on "
          f"{device}", flush=True)
    for kind, task in tasks(args.n).items():
        setup = part(f"{kind}: setup (tokenize, plan batches)", lambda: (
            Evaluator(lm, task, batch_size=args.batch_size, reuse_layers=True),
            Evaluator(lm, task, batch_size=args.batch_size, share_prefix=False)), device=device, ceilings=ceilings)
        evaluator, plain = setup.pop("value")
        tokens = sum(int(mask.sum()) for _, mask, _ in plain.reference_batches())
        flop = 2.0 * params * tokens
        common = dict(device=device, ceilings=ceilings, lm=lm, examples=len(task), tokens=tokens)
        base = part(f"{kind}: baseline", evaluator.run, flop=flop, **common)
        many = dict(common, examples=len(task) * len(heads), tokens=tokens * len(heads))
        singles = part(f"{kind}: screen ({len(heads)} heads)", lambda: [evaluator.run([h]) for h in heads],
                       flop=flop * len(heads), **many)
        many = dict(common, examples=len(task) * len(pairs), tokens=tokens * len(pairs))
        joint = part(f"{kind}: joint ({len(pairs)} pairs)", lambda: [evaluator.run(list(p)) for p in pairs],
                     flop=flop * len(pairs), **many)
        rows = [setup, base, singles, joint]
        if kind == "choice":
            from headprune.search.attribution import estimate_effects

            rows.append(part(f"{kind}: attribution (every head)", lambda: estimate_effects(evaluator),
                             flop=3 * flop, **common))
        checks, verdicts = _contracts(lm, kind, task, heads[0], singles, args, device, ceilings)
        out.update(verdicts)
        out["rows"] += [{k: v for k, v in row.items() if k != "value"} for row in rows + checks]
    exported = export_parts(lm, heads[:2], tasks(min(args.n, 16))["choice"], device, ceilings)
    out["rows"] += exported.pop("rows")
    out["export"] = exported
    del lm
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return out


def table(results: list[dict]) -> str:
    """The parts of every config as a fixed-width table (what a lease's last lines show)."""
    lines = [f"{'part':<58} {'s':>8} {'of peak':>8} {'of limit':>9} {'GiB':>7}"]
    for result in results:
        for row in result["rows"]:
            peak, limit = row.get("of_measured_peak"), row.get("of_limit")
            lines.append(f"{row['part'][:58]:<58} {row['seconds']:>8.3g} "
                         f"{'' if peak is None else f'{peak:.0%}':>8} {'' if limit is None else f'{limit:.0%}':>9} "
                         f"{row['peak_memory_gib']:>7.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", default="1b,8b", help=f"comma-separated, of {', '.join(CONFIGS)}")
    parser.add_argument("--layers", type=int, default=4, help="layers kept of each config (0: all)")
    parser.add_argument("--n", type=int, default=128, help="examples per task")
    parser.add_argument("--conditions", type=int, default=4, help="single heads and pairs timed per task")
    parser.add_argument("--batch-size", default="auto")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--protocol", action="store_true", help="time the paper's protocol instead (see protocol.py)")
    from .protocol import add_protocol_options

    add_protocol_options(parser)
    add_json_option(parser, "gpu_check")
    args = parser.parse_args(argv)
    args.batch_size = args.batch_size if args.batch_size == "auto" else int(args.batch_size)
    args.layers = args.layers or None
    device = resolve_device(args.device)
    ceilings = measure_ceilings(device)
    report = {"device": ceilings.device, "torch": torch.__version__, "cuda": torch.version.cuda,
              "measured_bf16_matmul_tflops": round(ceilings.tflops, 3),
              "measured_bandwidth_gbs": round(ceilings.bandwidth_gbs, 1), "datasheet_bf16_tflops":
              ceilings.datasheet_tflops}
    print(json.dumps(report), flush=True)
    if args.protocol:
        from .protocol import run_protocol

        results = [run_protocol(args, device, ceilings)]
    else:
        results = [check_config(config, args, device, ceilings) for config in args.configs.split(",")]
    print(f"\n{ceilings.device}, torch {torch.__version__}, bfloat16 matmul {ceilings.tflops:.4g} TFLOP/s, copy "
          f"{ceilings.bandwidth_gbs:.4g} GB/s\n{table(results)}", flush=True)
    return write_json(args.json, "gpu_check", args, results, **report)


if __name__ == "__main__":
    main()
