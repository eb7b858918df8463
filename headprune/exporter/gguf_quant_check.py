"""A lossy GGUF file (f16, bf16, q8_0 or a K-quant) checked in llama.cpp before it is written: its logits against
the float32 GGUF of the same pruned model, and the task on it and on the original written in the same type.

Whether a head set's gain survives quantization is measured, not assumed: the task is run in llama.cpp on the
quantized original (every head, the stock architecture, the same type, :func:`gguf_export.write_files`) and on the
quantized pruned file, and their paired change is tested as find tests a gain (exact McNemar test, score
interval), beside the float figures of the export's task check.

The logit gate's tolerance is derived from the quantization itself: the largest difference the same type makes on
the original model (its quantized GGUF in llama.cpp against the original in torch, which its float32 GGUF matches to
about 1e-6), relative to the largest |logit|, times :data:`QUANT_FACTOR`; never below the float32 GGUF tolerance.
A file whose quantized weights are wrong (bytes of another type, a tensor from another layer) moves the logits far
beyond what rounding to the type does and is refused; the rounding itself passes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from headprune.errors import VerificationError
from headprune.search.stats import Verdict, verdict

# The pruned model's quantization noise against the original's: the same rounding on mostly the same weights; its
# largest value over thousands of logits varies by tens of percent between two models, so twice the original's.
QUANT_FACTOR = 2.0
LEVEL_ALPHA = 0.05  # the paired change's interval: 95%


@dataclass(frozen=True)
class QuantCheck:
    """A lossy GGUF file run in llama.cpp against its float32 file, and the task on it and the original in the
    same type (the record's ``format_details.quantized``)."""

    gguf_type: str
    tensor_types: dict[str, int]  # GGML type -> how many tensors of the written file have it
    bytes: int  # the written file
    original_bytes: int  # the original written in the same type
    float_bytes: int  # the float32 GGUF of the pruned model
    max_abs_diff: float  # the quantized file against the float32 file, over the verification inputs, in llama.cpp
    max_abs_logit: float
    reference_diff: float  # relative: the same type's largest difference on the original model
    tolerance: float  # relative: max(float32 GGUF tolerance, QUANT_FACTOR x reference_diff)
    allowed: float  # tolerance x max(1, max_abs_logit)
    tokens: int  # real tokens compared
    task: str = ""
    metric: str = "accuracy"  # or "mean_nll" (a text task: no answers to compare)
    n: int = 0
    original: float | None = None  # the quantized original's task metric, in llama.cpp
    pruned: float | None = None  # the quantized pruned model's
    change: Verdict | None = None  # paired: the quantized original (before) against the quantized pruned (after)


def _logit_diff(want: Any, have: Any, batches: list) -> tuple[float, float, int]:
    """Largest |have - want| and largest |want| over the real tokens of ``batches``; the tokens compared."""
    worst = scale = 0.0
    tokens = 0
    for ids, mask, extra in batches:
        a = want(input_ids=ids, attention_mask=mask, **extra).logits.float().cpu()
        b = have(input_ids=ids, attention_mask=mask, **extra).logits.float().cpu()
        real = mask.bool().cpu()
        worst = max(worst, float((a[real] - b[real]).abs().max()))
        scale = max(scale, float(a[real].abs().max()))
        tokens += int(real.sum())
    return worst, scale, tokens


def check_quantized(job: Any, files: Any, f32_runner: Any, typed_runner: Any, original_runner: Any, *,
                    gguf_type: str, float_tolerance: float) -> QuantCheck:
    """Gate the quantized file on its float32 file and measure the task on it and on the quantized original.

    Raises:
        VerificationError: the quantized file's logits differ from the float32 file's by more than the quantization
            explains; nothing is written.
    """
    from headprune.evaluation import Evaluator
    from headprune.exporter.export_record import weight_bytes

    import torch

    lm, task = job.lm, job.task
    batches = list(Evaluator(lm, task, share_prefix=False, batch_size=job.batch_size).reference_batches())
    with torch.inference_mode():
        ref_diff, ref_scale, _ = _logit_diff(lm.model, original_runner, batches)
        diff, scale, tokens = _logit_diff(f32_runner, typed_runner, batches)
    reference = ref_diff / max(1.0, ref_scale)
    tolerance = max(float_tolerance, QUANT_FACTOR * reference)
    allowed = tolerance * max(1.0, scale)
    if not diff <= allowed:
        raise VerificationError(
            f"in llama.cpp, the {gguf_type} file's logits differ from the float32 file's by {diff:.3g} (allowed "
            f"{allowed:.3g}: tolerance {tolerance:.3g} = {QUANT_FACTOR:g} x the {reference:.3g} that {gguf_type} "
            f"makes on the original, x largest |logit| {scale:.3g}); nothing was written")
    counts: dict[str, int] = {}
    for name in files.types.values():
        counts[name] = counts.get(name, 0) + 1
    check = QuantCheck(gguf_type, dict(sorted(counts.items())), weight_bytes(files.path),
                       weight_bytes(files.original_path), weight_bytes(files.f32_path), diff, scale, reference,
                       tolerance, allowed, tokens)
    return _with_task(check, job, typed_runner, original_runner)


def _with_task(check: QuantCheck, job: Any, typed_runner: Any, original_runner: Any) -> QuantCheck:
    """The task re-measured in llama.cpp on the quantized original and the quantized pruned model, paired."""
    from dataclasses import replace

    from headprune.evaluation import Evaluator
    from headprune.loading.models import LoadedModel

    lm, task = job.lm, job.task
    runs = []
    for name, runner in (("original", original_runner), ("pruned", typed_runner)):
        model = LoadedModel(f"gguf-{name}", lm.folder, runner, lm.tokenizer, lm.adapter, lm.grid, lm.model_class)
        runs.append(Evaluator(model, task, batch_size=job.batch_size, share_prefix=False).run())
    before, after = runs
    if not task.has_accuracy:
        return replace(check, task=task.name, metric="mean_nll", n=len(task), original=before.mean_nll,
                       pruned=after.mean_nll)
    change = verdict(before.correct, after.correct, alpha=LEVEL_ALPHA)
    return replace(check, task=task.name, n=len(task), original=before.accuracy, pruned=after.accuracy,
                   change=change)


def summary(check: QuantCheck) -> list[str]:
    """What the CLI prints of a quantized check (plain text)."""
    lines = [f"{check.gguf_type}: {check.bytes:,} bytes (float32 {check.float_bytes:,}; the original in {check.gguf_type} "
             f"{check.original_bytes:,}); tensor types {_types(check)}",
             f"{check.gguf_type} gate in llama.cpp: max |logit diff| to the float32 GGUF {check.max_abs_diff:.2e} <= "
             f"{check.allowed:.2e} (tolerance {check.tolerance:.2e} = {QUANT_FACTOR:g} x {check.reference_diff:.2e}, "
             f"what {check.gguf_type} does to the original)"]
    return lines + ([_task_line(check)] if check.task else [])


def _types(check: QuantCheck) -> str:
    return ", ".join(f"{count} {name}" for name, count in check.tensor_types.items())


def _task_line(check: QuantCheck) -> str:
    if check.change is None:
        return (f"{check.task} (n={check.n}, mean nll) in llama.cpp, both in {check.gguf_type}: original "
                f"{check.original:.4f}, pruned {check.pruned:.4f}")
    c = check.change
    return (f"{check.task} (n={c.n}) in llama.cpp, both in {check.gguf_type}: original {c.accuracy_before:.2%}, pruned "
            f"{c.accuracy_after:.2%} (change {c.difference:+.2%}, {100 * c.level:.3g}% interval "
            f"[{c.interval[0]:+.2%}, {c.interval[1]:+.2%}], exact McNemar p = {c.p_value:.3g}; {c.rescued} answers "
            f"rescued, {c.damaged} damaged)")


def card_lines(check: QuantCheck) -> list[str]:
    """The card's lines of a quantized check (markdown list items)."""
    lines = [f"- `{check.gguf_type}` file: {check.bytes:,} bytes (float32 {check.float_bytes:,}; the original model in "
             f"`{check.gguf_type}` {check.original_bytes:,}); tensor types: {_types(check)}. Made by llama.cpp's own "
             "quantizer (`ggml_quantize_chunk`) where the type is a K-quant.",
             f"- In llama.cpp, its logits differ from the float32 GGUF's by at most {check.max_abs_diff:.2e} over "
             f"{check.tokens:,} tokens (allowed {check.allowed:.1e}: {QUANT_FACTOR:g} x the {check.reference_diff:.1e} of "
             f"the largest |logit| that `{check.gguf_type}` changes on the original model)."]
    if check.task:
        lines.append(f"- Task after quantization: {_task_line(check)}. Whether a gain survives quantization is this "
                     "measurement, beside the float figures above.")
    return lines
