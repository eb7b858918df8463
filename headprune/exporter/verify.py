"""The verification gate: an export must reproduce the masked original before anything is written.

(a) Logits: the artifact, loaded back the way a user loads it, against the original model with the heads
    ablated by the hook, on real task inputs; the largest absolute difference over real tokens must stay
    within the tolerance.
(b) Task: the task re-measured on the artifact must give the masked model's per-example answers; the
    intact model's numbers are reported beside them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from headprune.ablation import ablated
from headprune.evaluate import EvalResult, Evaluator
from headprune.heads import Head
from headprune.models import LoadedModel
from headprune.tasks import Task

DEFAULT_TOLERANCE = 1e-5  # times max(1, largest |logit|): float32 rounding over a few dozen layers
LOGIT_EXAMPLES = 16
TIE = 1e-4  # answers within this margin of a tie may flip by float rounding without meaning anything


@dataclass(frozen=True)
class TaskCheck:
    task: str
    n: int
    intact: float | None
    masked: float | None
    exported: float | None
    disagreements: int  # examples the artifact answers differently from the masked model (beyond ties)
    measured_on: str

    def to_dict(self) -> dict:
        return self.__dict__.copy()


def _output(model: Callable, ids: torch.Tensor, mask: torch.Tensor, extra: dict, encoder: bool) -> torch.Tensor:
    out = model(input_ids=ids, attention_mask=mask, **extra)
    return out.last_hidden_state if encoder else out.logits


@torch.inference_mode()
def max_logit_difference(lm: LoadedModel, heads: Sequence[Head], artifact: Callable, task: Task, *, mode: str,
                         means: torch.Tensor | None) -> tuple[float, float]:
    """Largest |artifact - masked original| over real tokens of the first task examples' inputs, and the
    largest |masked original| there (the scale the difference is judged against)."""
    worst, scale = 0.0, 0.0
    evaluator = Evaluator(lm, task.head(LOGIT_EXAMPLES), batch_size=8)
    for ids, mask, extra in evaluator.reference_batches():
        with ablated(lm, heads, mode=mode, means=means):  # type: ignore[arg-type]
            expected = _output(lm.model, ids, mask, extra, lm.is_encoder)
        got = _output(artifact, ids, mask, extra, lm.is_encoder)
        real = mask.bool()
        worst = max(worst, float((got - expected).abs()[real].max()))
        scale = max(scale, float(expected.abs()[real].max()))
    return worst, scale


def check_task(lm: LoadedModel, heads: Sequence[Head], exported: LoadedModel, task: Task, *, mode: str,
               means: torch.Tensor | None, measured_on: str, batch_size: int = 16) -> TaskCheck:
    """Re-measure ``task`` on the artifact and compare with the masked original, example by example."""
    source = Evaluator(lm, task, batch_size=batch_size)
    intact = source.run()
    masked = source.run(heads, mode=mode, means=means)  # type: ignore[arg-type]
    # An onnxruntime session has no key/value cache to share a prompt prefix through: run it whole.
    after = Evaluator(exported, task, batch_size=batch_size,
                      share_prefix=isinstance(exported.model, torch.nn.Module)).run()
    if task.kind == "text":  # no answers to compare: the per-example NLL must match instead
        disagreements = sum(1 for m, a in zip(masked.results, after.results) if abs(m.margin - a.margin) > 1e-3)
    else:
        disagreements = sum(1 for m, a in zip(masked.results, after.results)
                            if m.correct != a.correct and abs(m.margin) > TIE)
    return TaskCheck(task.name, len(task), _metric(intact), _metric(masked), _metric(after), disagreements,
                     measured_on)


def _metric(result: EvalResult) -> float | None:
    return result.accuracy if result.kind != "text" else result.mean_nll
