"""The determinism check on SmolLM2-135M in a half precision, intact and with the batch-mixing bug (each row sees
the batch mean of the embeddings), run as its own process: torch picks its CPU kernels when it loads, so a test
runs this under ``ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2`` to check the AVX2 kernels on any x86.

    python tests/helpers/determinism_probe.py bfloat16 sentiment:n=40

prints one JSON line: the CPU kernels torch used, and what the check said of each model.
"""

from __future__ import annotations

import json
import sys

import torch

from headprune.errors import InternalCheckError
from headprune.evaluation import Evaluator
from headprune.loading.models import load_model
from headprune.search.determinism import check
from headprune.search.journal import Journal
from headprune.tasks import load_task


def verdict(evaluator: Evaluator) -> dict:
    """The check's words for the intact run of ``evaluator``: ``agrees`` or ``refused``, and the line."""
    try:
        return {"agrees": check(evaluator, evaluator.run(), Journal(None, {}))}
    except InternalCheckError as error:
        return {"refused": str(error)}


def main(dtype: str, spec: str) -> None:
    lm = load_model("smollm2-135m", dtype=dtype, device="cpu")
    task = load_task(spec)
    out = {"kernels": torch.backends.cpu.get_cpu_capability(), "intact": verdict(Evaluator(lm, task, batch_size=16))}
    handle = lm.model.get_input_embeddings().register_forward_hook(
        lambda module, args, output: output + 0.5 * output.mean(dim=0, keepdim=True))
    try:
        out["mixing"] = verdict(Evaluator(lm, task, batch_size=16))
    finally:
        handle.remove()
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:3])
