"""Benchmark: how long a quantized GGUF export takes with its checks, stage by stage.

A lossy GGUF export (``--gguf-type q4_k_m``) writes the file, a float32 copy and the original in the same type, then
verifies in llama.cpp: the float32 file's logits and task against the masked original, the greedy runtime gate, the
lossy file's logits against the float32 file's (and torch's on its rounded weights), and the task on the quantized
original and the quantized pruned file. This runs ``headprune.exporter.export`` itself (the CLI's code path) on
``--examples`` examples of ``--task`` and reports the wall and CPU seconds of the whole export and of each stage
(from the time of each of export's own log lines to the next), with the quantized task figures, whose answers a
faster check must not change.

    python -m scripts.bench.export_check [--model smollm2-135m] [--heads L11.H8,L13.H0,L14.H8] [--task arithmetic]
        [--examples 50] [--gguf-type q4_k_m] [--json runs/bench/export_check.json]

It imports only what every release since 0.2 has (``export``, ``load_model``, the record), so the same file can time
an earlier checkout: ``PYTHONPATH=OLD python OLD/scripts/bench/export_check.py`` after copying it there.
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

try:
    from .common import add_json_option, write_json
except ImportError:  # run as a file from another checkout
    from common import add_json_option, write_json  # type: ignore[no-redef]

MAIN_JOB_HEADS = "L11.H8,L13.H0,L14.H8"  # the README main job's primary set


class Stages(logging.Handler):
    """The time (wall, CPU) of each of headprune's log lines: a stage runs from its line to the next."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.marks: list[tuple[str, float, float]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.marks.append((record.getMessage(), time.perf_counter(), time.process_time()))


def _stage(message: str) -> str:
    return message.removeprefix("export: ").split(";")[0][:90]


def run(args: argparse.Namespace) -> dict[str, Any]:
    """One export, timed; its record's quantized figures and the stages."""
    import torch

    from headprune.exporter import export
    from headprune.loading.models import load_model

    torch.set_num_threads(args.threads)
    stages = Stages()
    logger = logging.getLogger("headprune")
    logger.addHandler(stages)
    logger.setLevel(logging.INFO)
    lm = load_model(args.model, dtype="float32", device="cpu")
    task = f"{args.task}:n={args.examples}"
    with tempfile.TemporaryDirectory() as scratch:
        wall, cpu = time.perf_counter(), time.process_time()
        stages.marks.append(("start", wall, cpu))
        record = export(lm, args.heads, format="gguf", layout="sliced", gguf_type=args.gguf_type, verify_task=task,
                        verify_limit=args.examples, out=Path(scratch) / "out")
        end = (time.perf_counter(), time.process_time())
    logger.removeHandler(stages)
    marks = stages.marks + [("end", *end)]
    timed = [{"stage": _stage(message), "wall_s": round(w1 - w0, 2), "cpu_s": round(c1 - c0, 2)}
             for (message, w0, c0), (_, w1, c1) in zip(marks, marks[1:])]
    quantized = record.format_details.get("quantized") or {}
    change = quantized.get("change") or {}
    return {"examples": args.examples, "task": task, "wall_s": round(end[0] - wall, 2), "cpu_s": round(end[1] - cpu, 2),
            "original": quantized.get("original"), "pruned": quantized.get("pruned"),
            "rescued": change.get("rescued"), "damaged": change.get("damaged"), "stages": timed,
            "float_task": {"masked": record.verification.task.masked, "exported": record.verification.task.exported}
            if record.verification.task else None}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--heads", default=MAIN_JOB_HEADS)
    parser.add_argument("--task", default="arithmetic", help="a built-in task (its first --examples examples)")
    parser.add_argument("--examples", type=int, default=50)
    parser.add_argument("--gguf-type", default="q4_k_m")
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    add_json_option(parser, "export_check")
    args = parser.parse_args(argv)
    result = run(args)
    for stage in result["stages"]:
        print(f"{stage['wall_s']:8.1f} s wall {stage['cpu_s']:8.1f} s CPU  {stage['stage']}")
    print(f"{result['wall_s']:8.1f} s wall {result['cpu_s']:8.1f} s CPU  in all ({args.examples} examples); "
          f"{args.gguf_type} in llama.cpp: original {result['original']}, pruned {result['pruned']} "
          f"(rescued {result['rescued']}, damaged {result['damaged']})")
    write_json(args.json, "export_check", args, result)
    return result


if __name__ == "__main__":
    main()
