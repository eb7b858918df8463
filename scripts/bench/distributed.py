"""Data-parallel find against one process using every core: the same search, wall time and equal results.

    .venv/bin/python -m scripts.bench.distributed [--model smollm2-135m] [--processes 2] [--discovery 40]

Runs ``headprune find`` (exact screen, then the joint search and held-out) three times from this script:
one process with all cores as torch threads (the strongest simple baseline: what a user runs without a
launcher), one process with one thread, and ``torchrun --nproc-per-node N`` with one thread each. Prints wall
times, the speedup over the baseline, and whether the results are identical (timings aside), and writes them to
``--json`` (default runs/bench/distributed.json). Exits non-zero
when they are not (floats compared to 6 significant digits: thread counts change summation order).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .common import add_json_option, cores, write_json


def run(label: str, launcher: list[str], args: list[str], out: Path, threads: int) -> tuple[float, dict]:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    started = time.perf_counter()
    done = subprocess.run([*launcher, "-m", "headprune", *args, "--out", str(out)], env=env,
                          capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode not in (0, 1):
        sys.exit(f"{label} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    result = json.loads((out / "result.json").read_text())
    result.pop("timings", None)
    result = rounded(result)
    print(f"{label:<34} {seconds:8.1f} s", flush=True)
    return seconds, result


def rounded(value: object) -> object:
    """Floats to 6 significant digits: other thread counts may sum in another order (answers must not move)."""
    if isinstance(value, float):
        return float(f"{value:.6g}")
    if isinstance(value, dict):
        return {key: rounded(item) for key, item in value.items()}
    if isinstance(value, list):
        return [rounded(item) for item in value]
    return value


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--task", default="sentiment")
    parser.add_argument("--processes", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--discovery", type=int, default=40)
    parser.add_argument("--heldout", type=int, default=40)
    add_json_option(parser, "distributed")
    options = parser.parse_args(argv)
    threads = cores()
    args = ["find", options.model, "--task", options.task, "--discovery", str(options.discovery), "--heldout",
            str(options.heldout), "--nominees", "4", "--max-heads", "2", "--finalists", "2", "--device", "cpu"]
    with tempfile.TemporaryDirectory() as scratch:
        base, expected = run(f"1 process x {threads} threads", [sys.executable], args, Path(scratch) / "a", threads)
        single, one = run("1 process x 1 thread", [sys.executable], args, Path(scratch) / "b", 1)
        launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                    str(options.processes)]
        spread, many = run(f"torchrun {options.processes} processes x 1 thread", launcher, args,
                           Path(scratch) / "c", 1)
    print(f"speedup over 1 process x {threads} threads: {base / spread:.2f}x; over 1 process x 1 thread: "
          f"{single / spread:.2f}x")
    same = expected == one == many
    print("results identical (sets, screen, verdict):", "yes" if same else "NO")
    write_json(options.json, "distributed", options, [
        {"run": f"1 process x {threads} threads", "seconds": base, "speedup": 1.0},
        {"run": "1 process x 1 thread", "seconds": single, "speedup": base / single},
        {"run": f"torchrun {options.processes} processes x 1 thread", "seconds": spread, "speedup": base / spread}],
        identical=same)
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
