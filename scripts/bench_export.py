"""Benchmark: inference latency of an exported model against the original, in one process.

Exports the heads (sliced safetensors, and ONNX unless --no-onnx) into a temporary folder, loads each the
way a user would, and times forward passes over the same batch of real task prompts (logits for every
position): original torch, sliced torch, and the ONNX graph in onnxruntime. Prints seconds per batch and
ratios against the original measured here.

    python scripts/bench_export.py [--model smollm2-135m] [--heads L3.H0,L3.H1,L3.H2] [--task sentiment]
                                   [--batch 8] [--repeats 5] [--no-onnx]
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
from headprune.exporter.onnx_export import ONNX_NAME, OnnxModel
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--heads", default="L3.H0,L3.H1,L3.H2")
    parser.add_argument("--task", default="sentiment")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-onnx", action="store_true")
    args = parser.parse_args()
    lm = load_model(args.model)
    task = load_task(args.task).head(args.batch)
    ids, mask, extra = next(Evaluator(lm, task, batch_size=args.batch, share_prefix=False).reference_batches())
    print(f"{args.model}, heads {args.heads}, batch {tuple(ids.shape)} of {args.task} prompts, "
          f"median of {args.repeats}, torch threads {torch.get_num_threads()}")

    def run(model) -> None:  # noqa: ANN001
        with torch.inference_mode():
            model(input_ids=ids, attention_mask=mask, **extra)

    base = _median_seconds(lambda: run(lm.model), args.repeats)
    print(f"original (torch)          {base * 1000:8.1f} ms  x1.00")
    with tempfile.TemporaryDirectory() as folder:
        record = export(lm, args.heads, verify_task=task, out=Path(folder) / "sliced")
        sliced = load(Path(folder) / "sliced")
        seconds = _median_seconds(lambda: run(sliced.model), args.repeats)
        print(f"sliced (torch)            {seconds * 1000:8.1f} ms  x{base / seconds:.2f}  "
              f"parameters {record.parameters.before:,} -> {record.parameters.after:,}")
        if not args.no_onnx:
            export(lm, args.heads, format="onnx", verify_task=task, out=Path(folder) / "onnx")
            session = OnnxModel(Path(folder) / "onnx" / ONNX_NAME, encoder=lm.is_encoder)
            seconds = _median_seconds(lambda: session(input_ids=ids, attention_mask=mask, **extra), args.repeats)
            print(f"sliced (onnxruntime)      {seconds * 1000:8.1f} ms  x{base / seconds:.2f}")


if __name__ == "__main__":
    main()
