"""gpu_check's export: a verified sliced safetensors export, timed part by part.

``headprune.export`` runs unchanged; its steps are timed by wrapping, for the export alone, the public functions
and methods it calls (``surgery.slicing.slice_model``; the safetensors format's ``write`` and ``runtime_check``;
``exporter.verify``'s ``check_tensors``, ``check_logits`` and ``check_task``). Each part gets its seconds and peak
memory; ``other`` is what is left of the export's whole time (the plan, the card, the files' hashes, the record,
the atomic move). The logit check's tolerance and the largest difference it allowed are printed with it.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import torch

from headprune.heads import Head
from headprune.loading.models import LoadedModel
from headprune.tasks import Task

from .gpu_parts import Ceilings, figure, part, peak_memory, sync

PARTS = ("slicing", "writing", "verification: tensors", "verification: logits", "verification: task",
         "runtime check")


@contextmanager
def _timed(owner: Any, attribute: str, name: str, rows: list[dict], device: torch.device) -> Iterator[None]:
    """``owner.attribute`` timed (seconds, peak memory) into ``rows`` under ``name`` while entered."""
    original = getattr(owner, attribute)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        sync(device)
        with peak_memory(device) as peak:
            start = time.perf_counter()
            value = original(*args, **kwargs)
            sync(device)
            seconds = time.perf_counter() - start
        rows.append({"part": f"export: {name}", "seconds": figure(seconds),
                     "peak_memory_gib": round(peak[0] / 2**30, 3)})
        print(json.dumps(rows[-1]), flush=True)  # at once: a run stopped by its time limit still shows it
        return value

    setattr(owner, attribute, wrapper)
    try:
        yield
    finally:
        setattr(owner, attribute, original)


def export_parts(lm: LoadedModel, heads: list[Head], task: Task, device: torch.device, ceilings: Ceilings,
                 out: Path | None = None) -> dict:
    """A sliced safetensors export of ``heads`` verified on ``task``: its rows per part and its figures."""
    from headprune.exporter import export, verify
    from headprune.exporter.formats import format_class
    from headprune.surgery import slicing

    fmt = format_class("safetensors")
    rows: list[dict] = []
    targets: list[tuple[Any, str, str]] = [
        (slicing, "slice_model", "slicing"), (fmt, "write", "writing"),
        (verify, "check_tensors", "verification: tensors"), (verify, "check_logits", "verification: logits"),
        (verify, "check_task", "verification: task"), (fmt, "runtime_check", "runtime check")]
    with tempfile.TemporaryDirectory() as scratch, ExitStack() as stack:
        for owner, attribute, name in targets:
            stack.enter_context(_timed(owner, attribute, name, rows, device))
        whole = part("export: sliced safetensors, verified (whole)",
                     lambda: export(lm, heads, verify_task=task, out=Path(out or scratch) / "pruned"),
                     device=device, ceilings=ceilings, examples=len(task))
    record = whole.pop("value")
    other = whole["seconds"] - sum(row["seconds"] for row in rows)
    rows.append({"part": "export: other (plan, card, hashes, record, move)", "seconds": figure(max(0.0, other)),
                 "peak_memory_gib": whole["peak_memory_gib"]})
    print(json.dumps(rows[-1]), flush=True)
    logits = record.verification.logits
    figures = {"parameters_after": record.parameters.after, "bytes_after": record.bytes.after,
               "max_abs_logit_diff": logits.max_abs_diff, "tolerance": logits.tolerance, "allowed": logits.allowed,
               "dtype": logits.dtype, "task_disagreements": record.verification.task.disagreements}
    print(f"export: max |logit diff| {logits.max_abs_diff:.3g} <= allowed {logits.allowed:.3g} (tolerance "
          f"{logits.tolerance:g} x largest |logit| {logits.max_abs_logit:.3g}, {logits.dtype}); task: "
          f"{record.verification.task.disagreements} of {record.verification.task.n} answers differ", flush=True)
    return {"rows": [whole, *rows], **figures}

