"""Benchmark: what an exported model buys at inference against the original, in one process.

Exports the heads (sliced safetensors, and ONNX unless --no-onnx) into a temporary folder, loads each the
way a user would, and measures on the same batch of real task prompts: parameters, weight memory, the
key/value cache per token, the forward pass over the prompts (logits for every position; prompt tokens/s)
and, for causal LMs, greedy decoding of --new-tokens tokens per prompt (generated tokens/s): original torch,
sliced torch, and the ONNX graph in onnxruntime (forward only). Prints each with its ratio to the original
measured here. --heads takes a head list or a find result (a ``find --objective compress`` folder).

    python scripts/bench_export.py [--model smollm2-135m] [--heads L3.H0,L3.H1,L3.H2|RUN/result.json]
                                   [--task sentiment] [--batch 8] [--repeats 5] [--new-tokens 16] [--no-onnx]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from headprune.evaluation import Evaluator
from headprune.exporter import export
from headprune.exporter.loading import load
from headprune.exporter.onnx_export import ONNX_NAME, OnnxModel, onnx_output
from headprune.exporter.pipeline import resolve_heads
from headprune.models import load_model
from headprune.tasks import load_task


def _median_seconds(fn, repeats: int) -> float:  # noqa: ANN001
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _weight_bytes(model: torch.nn.Module) -> int:
    """Bytes of the parameters and buffers in memory, each shared tensor counted once."""
    seen, total = set(), 0
    for tensor in (*model.parameters(), *model.buffers()):
        if tensor.data_ptr() not in seen:
            seen.add(tensor.data_ptr())
            total += tensor.numel() * tensor.element_size()
    return total


def _mib(n: float) -> str:
    return f"{n / 2**20:8.1f} MiB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--heads", default="L3.H0,L3.H1,L3.H2", help="heads, or a find result (file or folder)")
    parser.add_argument("--task", default="sentiment")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--new-tokens", type=int, default=16, help="greedy decoding per prompt (0: skip)")
    parser.add_argument("--no-onnx", action="store_true")
    args = parser.parse_args()
    lm = load_model(args.model)
    removed, _ = resolve_heads(args.heads, lm)
    task = load_task(args.task).head(args.batch)
    ids, mask, extra = next(Evaluator(lm, task, batch_size=args.batch, share_prefix=False).reference_batches())
    tokens = int(mask.sum())
    decode = args.new_tokens > 0 and not lm.is_encoder
    print(f"{args.model}: {len(removed)} of {lm.grid.total} heads removed; batch {tuple(ids.shape)} of {args.task} "
          f"prompts ({tokens} real tokens), median of {args.repeats}, torch threads {torch.get_num_threads()}, "
          f"{lm.dtype}")

    def run(model) -> None:  # noqa: ANN001
        with torch.inference_mode():
            model(input_ids=ids, attention_mask=mask, **extra)

    def generate(model) -> None:  # noqa: ANN001
        with torch.inference_mode():
            model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=args.new_tokens,
                           min_new_tokens=args.new_tokens, do_sample=False, pad_token_id=lm.tokenizer.pad_token_id)

    itemsize = lm.model.dtype.itemsize
    grid = lm.grid
    kv_before = 2 * grid.num_layers * grid.num_kv_heads * grid.head_dim * itemsize  # keys and values per token

    def line(name: str, seconds: float, base: float, params: int | None = None, weights: int | None = None,
             kv: int | None = None, decode_s: float | None = None, decode_base: float | None = None) -> None:
        text = (f"{name:22s} forward {seconds * 1000:8.1f} ms ({tokens / seconds:7.0f} prompt tok/s, "
                f"x{base / seconds:.2f})")
        if decode_s is not None:
            generated = ids.shape[0] * args.new_tokens
            text += f"  decode {generated / decode_s:7.1f} tok/s (x{decode_base / decode_s:.2f})"
        if params is not None:
            text += f"  parameters {params:,}  weights {_mib(weights)}  KV cache/token {kv:,} B"
        print(text)

    base = _median_seconds(lambda: run(lm.model), args.repeats)
    base_decode = _median_seconds(lambda: generate(lm.model), max(1, args.repeats // 2)) if decode else None
    from headprune.exporter.pipeline import count_parameters

    line("original (torch)", base, base, count_parameters(lm.model), _weight_bytes(lm.model), kv_before,
         base_decode, base_decode)
    with tempfile.TemporaryDirectory() as folder:
        record = export(lm, removed, verify_task=task, out=Path(folder) / "sliced")
        sliced = load(Path(folder) / "sliced")
        kv_after = 2 * grid.head_dim * itemsize * sum(len(p.kv_heads) for p in record.layers)
        seconds = _median_seconds(lambda: run(sliced.model), args.repeats)
        decode_s = _median_seconds(lambda: generate(sliced.model), max(1, args.repeats // 2)) if decode else None
        line("sliced (torch)", seconds, base, record.parameters.after, _weight_bytes(sliced.model), kv_after,
             decode_s, base_decode)
        if not args.no_onnx:
            export(lm, removed, format="onnx", verify_task=task, out=Path(folder) / "onnx")
            session = OnnxModel(Path(folder) / "onnx" / ONNX_NAME, output=onnx_output(lm.head),
                                positions=not lm.is_encoder)
            seconds = _median_seconds(lambda: session(input_ids=ids, attention_mask=mask, **extra), args.repeats)
            line("sliced (onnxruntime)", seconds, base)


if __name__ == "__main__":
    main()
