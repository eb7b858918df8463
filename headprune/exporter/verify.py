"""The verification gate: an export must reproduce the masked original before anything is written.

(a) Logits: the artifact, loaded back the way a user loads it, against the original model with the heads
    ablated by the hook, on real task inputs; the largest absolute difference over real tokens must stay
    within the tolerance.
(b) Task: the task re-measured on the artifact must give the masked model's per-example answers; the
    intact model's numbers are reported beside them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from headprune.ablation import ablated
from headprune.evaluation import EvalResult, Evaluator
from headprune.exporter.record import LogitCheck, TaskCheck
from headprune.heads import Head
from headprune.models import LoadedModel
from headprune.tasks import Task

DEFAULT_TOLERANCE = 1e-5  # times max(1, largest |logit|): float32 rounding over a few dozen layers
LOGIT_EXAMPLES = 16
TIE = 1e-4  # answers within this margin of a tie may flip by float rounding without meaning anything


def _output(model: Callable, ids: torch.Tensor, mask: torch.Tensor, extra: dict, encoder: bool) -> torch.Tensor:
    out = model(input_ids=ids, attention_mask=mask, **extra)
    return out.last_hidden_state if encoder else out.logits


@torch.inference_mode()
def check_logits(lm: LoadedModel, heads: Sequence[Head], artifact: Callable, task: Task, *, mode: str,
                 means: torch.Tensor | None, tolerance: float) -> LogitCheck:
    """Largest |artifact - masked original| over real tokens of the first task examples' inputs, judged against
    the largest |masked original| there: it passes when ``diff <= tolerance * max(1, largest |logit|)``."""
    worst, scale = 0.0, 0.0
    evaluator = Evaluator(lm, task.head(LOGIT_EXAMPLES), batch_size=8)
    for ids, mask, extra in evaluator.reference_batches():
        with ablated(lm, heads, mode=mode, means=means):  # type: ignore[arg-type]
            expected = _output(lm.model, ids, mask, extra, lm.is_encoder)
        got = _output(artifact, ids, mask, extra, lm.is_encoder)
        real = mask.bool()
        worst = max(worst, float((got.float() - expected.float()).abs()[real].max()))
        scale = max(scale, float(expected.float().abs()[real].max()))
    return LogitCheck(worst, scale, tolerance, tolerance * max(1.0, scale))


def check_task(lm: LoadedModel, heads: Sequence[Head], exported: LoadedModel, task: Task, *, mode: str,
               means: torch.Tensor | None, measured_on: str, batch_size: int = 16) -> TaskCheck:
    """Re-measure ``task`` on the artifact and compare with the masked original, example by example."""
    source = Evaluator(lm, task, batch_size=batch_size)
    intact = source.run()
    masked = source.run(heads, mode=mode, means=means)  # type: ignore[arg-type]
    # An onnxruntime session has no key/value cache to share a prompt prefix through: run it whole.
    after = Evaluator(exported, task, batch_size=batch_size,
                      share_prefix=isinstance(exported.model, torch.nn.Module)).run()
    if not task.has_accuracy:  # no answers to compare: the per-example NLL must match instead
        disagreements = sum(1 for m, a in zip(masked.results, after.results) if abs(m.margin - a.margin) > 1e-3)
    else:
        disagreements = sum(1 for m, a in zip(masked.results, after.results)
                            if m.correct != a.correct and abs(m.margin) > TIE)
    return TaskCheck(task.name, "accuracy" if task.has_accuracy else "mean_nll", len(task), _metric(intact),
                     _metric(masked), _metric(after), disagreements, measured_on)


def _metric(result: EvalResult) -> float | None:
    return result.accuracy if result.has_accuracy else result.mean_nll
