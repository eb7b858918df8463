"""The verification gate: an export must reproduce the masked original before anything is written.

(a) Outputs: the artifact, loaded back the way a user loads it, against the original model with the heads
    ablated by the hook, on real task inputs: every floating-point output the two share (the head's own
    logits: language-model, masked-LM or classification; hidden states), the largest absolute difference over
    real tokens within the tolerance.
(b) Tensors: every tensor of the original is in the artifact under the same name with the same values,
    except the attention projections of the layers that lost heads.
(c) Task: the task re-measured on the artifact must give the masked model's per-example answers; the
    intact model's numbers are reported beside them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager

import torch

from headprune.core.compat import cache_of, passing_cache
from headprune.core.devices import dtype_name
from headprune.evaluation import EvalResult, Evaluator
from headprune.evaluation.prefix import SharedPrefix
from headprune.exporter.export_record import LogitCheck, TaskCheck, TensorCheck
from headprune.heads import Head
from headprune.loading.models import LoadedModel
from headprune.surgery.ablation import ablated
from headprune.tasks import Task

# Largest allowed |difference| to the masked original, times max(1, largest |value|), by the dtype verified in:
# rounding over a few dozen layers (float32 measured at 0 to 1e-4 x 39 on SmolLM2; half precision keeps 8 or 11
# mantissa bits, so its rounding is about 2^-8 and 2^-11 of each value).
DEFAULT_TOLERANCES = {torch.float32: 1e-5, torch.float16: 5e-3, torch.bfloat16: 2e-2}
MAX_TOLERANCE = 0.1  # beyond a tenth of the largest logit the check would pass a broken model
MIN_TIE = 1e-4  # answers within this margin of a tie may flip by float rounding without meaning anything


def default_tolerance(dtype: torch.dtype) -> float:
    return DEFAULT_TOLERANCES.get(dtype, DEFAULT_TOLERANCES[torch.float32])


def _outputs(model: Callable, ids: torch.Tensor, mask: torch.Tensor, extra: dict) -> dict[str, torch.Tensor]:
    """Every floating-point tensor output of one forward pass, by name."""
    out = model(input_ids=ids, attention_mask=mask, **extra)
    items = out.items() if hasattr(out, "items") else vars(out).items()
    return {name: value for name, value in items if isinstance(value, torch.Tensor) and value.is_floating_point()}


def _differences(want: dict[str, torch.Tensor], have: dict[str, torch.Tensor], mask: torch.Tensor
                 ) -> tuple[float, float, set[str]]:
    """The largest |have - want| and the largest |want| over the real tokens of ``mask`` (``(B, T)``; whole rows
    for per-sequence outputs such as class logits), and the names of the outputs compared."""
    worst = scale = 0.0
    names = want.keys() & have.keys()
    for name in names:
        expected, got = want[name], have[name].to(want[name].device)
        per_token = expected.dim() >= 2 and expected.shape[:2] == mask.shape
        # Row by row in float32: a batch's vocabulary-wide logits in float32, and their difference, would
        # cost several times the logits themselves (1.5 GB on a 1.5B model with a 152k vocabulary).
        for row in range(expected.shape[0]):
            real = mask[row].bool() if per_token else slice(None)
            w, h = (t[row][real].to(torch.float32, copy=True) for t in (expected, got))
            if w.numel():
                worst = max(worst, float(h.sub_(w).abs_().max()))
                scale = max(scale, float(w.abs_().max()))
    return worst, scale, set(names)


@torch.inference_mode()
def check_logits(lm: LoadedModel, heads: Sequence[Head], artifact: Callable, task: Task, *, mode: str,
                 means: torch.Tensor | None, tolerance: float, batch_size: int | str = 8) -> LogitCheck:
    """Largest |artifact - masked original| over the outputs both give, at every real token of every
    verification example's inputs (whole rows for per-sequence outputs such as class logits), judged against
    the largest |masked original| there: it passes when ``diff <= tolerance * max(1, largest |value|)``.

    Where the inputs share a prompt prefix (a few-shot prompt) and the artifact is a torch module, the prefix's
    outputs are compared once, and each batch's rows after it, on both models' keys and values of the prefix:
    the same positions' outputs, without computing the prefix again per sequence. An artifact that shares a prefix
    itself (``shares_prefix``: llama.cpp's runner) is given each row whole, the prefix's tokens then its own, and
    compared after the prefix, where the original reads the prefix's keys and values."""
    evaluator = Evaluator(lm, task, batch_size=batch_size)

    def masked() -> AbstractContextManager:  # the original with the heads ablated, for one pass
        return ablated(lm, heads, mode=mode, means=means)  # type: ignore[arg-type]

    caches: tuple[object, object] | None = None
    worst = scale = 0.0
    compared: set[str] = set()
    module = isinstance(artifact, torch.nn.Module)
    if evaluator.prefix and (module or getattr(artifact, "shares_prefix", False)):
        ids = torch.tensor([evaluator.prefix.tokens], device=lm.device)
        mask, extra = torch.ones_like(ids), {"use_cache": True}
        with masked():
            want = lm.model(input_ids=ids, attention_mask=mask, **extra)
        have = artifact(input_ids=ids, attention_mask=mask, **(extra if module else {}))
        caches = (cache_of(want), cache_of(have) if module else None)
        worst, scale, compared = _differences({"logits": want.logits}, {"logits": have.logits}, mask)
    tokens, prefix = 0, len(evaluator.prefix) if caches else 0
    for ids, mask, extra in evaluator.reference_batches(after_prefix=caches is not None):
        tokens += int(mask.sum())  # every sequence's real tokens, the prefix's included
        past = ({}, {}) if caches is None else tuple(
            {} if c is None else passing_cache(SharedPrefix.rows(c, len(ids))) for c in caches)
        with masked():
            want = _outputs(lm.model, ids, mask, {**extra, **past[0]})
        if caches is not None and not module:  # whole rows (prefix, then the row's own tokens, right-padded)
            whole = torch.cat([torch.tensor([evaluator.prefix.tokens] * len(ids), device=ids.device), ids], dim=1)
            have = _outputs(artifact, whole, mask, {"logits_to_keep": ids.shape[1]})
        else:
            have = _outputs(artifact, ids, mask, {**extra, **past[1]})
        w, s, names = _differences(want, have, mask[:, prefix:])
        worst, scale, compared = max(worst, w), max(scale, s), compared | names
    return LogitCheck(worst, scale, tolerance, tolerance * max(1.0, scale), tuple(sorted(compared)),
                      dtype_name(lm.dtype), len(evaluator.task), evaluator.sequences, tokens)


def check_tensors(original: torch.nn.Module, exported: torch.nn.Module, changed_prefixes: Sequence[str]
                  ) -> TensorCheck:
    """Every tensor of ``original`` in ``exported``: same name, same values, unless its name starts with one of
    ``changed_prefixes`` (the attention projections of the layers that lost heads), where it may be sliced
    (smaller) or edited (heads zeroed, means folded into a bias)."""
    before, after = original.state_dict(), exported.state_dict()
    kept, sliced, edited, unexpected = [], [], [], []
    for name, tensor in before.items():
        if name not in after:
            continue
        new = after[name]
        if new.shape == tensor.shape and torch.equal(new.to(tensor.device, tensor.dtype), tensor):
            kept.append(name)
            continue
        (sliced if new.shape != tensor.shape else edited).append(name)
        if not name.startswith(tuple(changed_prefixes)):
            unexpected.append(name)
    removed = sorted(before.keys() - after.keys())
    return TensorCheck(tuple(kept), tuple(sliced), tuple(edited), tuple(removed), tuple(unexpected))


def check_task(lm: LoadedModel, heads: Sequence[Head], exported: LoadedModel, task: Task, *, mode: str,
               means: torch.Tensor | None, measured_on: str, batch_size: int | str = 16,
               tie: float = MIN_TIE) -> TaskCheck:
    """Re-measure ``task`` on the artifact and compare with the masked original, example by example; answers
    whose masked margin is within ``tie`` of zero may flip by rounding and are not counted as disagreements."""
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
                            if m.correct != a.correct and abs(m.margin) > tie)
    return TaskCheck(task.name, "accuracy" if task.has_accuracy else "mean_nll", len(task), _metric(intact),
                     _metric(masked), _metric(after), disagreements, measured_on)


def _metric(result: EvalResult) -> float | None:
    return result.accuracy if result.has_accuracy else result.mean_nll
