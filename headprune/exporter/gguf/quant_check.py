"""A lossy GGUF file (f16, bf16, q8_0 or a K-quant) checked in llama.cpp before it is written: its logits against
the float32 GGUF of the same pruned model, and the task on it and on the original written in the same type.

Whether a head set's gain survives quantization is measured, not assumed: the task is run in llama.cpp on the
quantized original (every head, the stock architecture, the same type, :func:`writer.write_files`) and on the
quantized pruned file, and their paired change is tested as find tests a gain (exact McNemar test, score
interval), beside the float figures of the export's task check.

The logit gate's tolerance is derived from the quantization itself, of this file on this model: the root mean
square difference its rounded weights make to the logits when computed exactly (torch in float32, on the tensors as
read back from the file by gguf-py, against the unrounded model), times :data:`QUANT_FACTOR`; llama.cpp's run of
the file must be within that of its float32 GGUF over every real token of the verification inputs. A root mean
square, not the largest difference: the largest of millions of logits moves with the tail (on SmolLM2-135M
q4_k_m it was 2.3x the original's for a 3-head prune while the root mean square was 0.95x), and a heavy prune is
legitimately more sensitive to rounding (67 heads: 4.9x the original's, in torch and in llama.cpp alike), which a
tolerance taken from the original model would refuse. Bytes that are not the rounding of the pruned weights are
refused before this, when the file is read back (:data:`read.ROUNDING`).
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from typing import Any

from headprune.errors import VerificationError
from headprune.search.stats import Verdict, verdict

log = logging.getLogger("headprune")

# llama.cpp also rounds the activations it multiplies (to 8 bits for quantized weights, 16 for f16): measured on
# SmolLM2-135M, its root mean square difference to the float32 file was 0.95x to 1.75x torch's on the rounded
# weights alone (q4_k_m and q8_0; the original, a 3-head and a 67-head prune).
QUANT_FACTOR = 3.0
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
    rms_diff: float  # llama.cpp: root mean square |quantized - float32 file| over the real tokens' logits
    reference_rms: float  # torch: the same over the file's rounded weights against the unrounded model
    allowed: float  # QUANT_FACTOR x reference_rms
    max_abs_diff: float  # llama.cpp: the largest |quantized - float32 file| (reported)
    max_abs_logit: float
    tokens: int  # real tokens compared
    task: str = ""
    metric: str = "accuracy"  # or "mean_nll" (a text task: no answers to compare)
    n: int = 0
    original: float | None = None  # the quantized original's task metric, in llama.cpp
    pruned: float | None = None  # the quantized pruned model's
    change: Verdict | None = None  # paired: the quantized original (before) against the quantized pruned (after)


def _values(out: Any) -> Any:
    """A forward pass's compared values: a decoder's logits, an encoder's last hidden states (its GGUF's)."""
    logits = getattr(out, "logits", None)
    return logits if logits is not None else out.last_hidden_state


def _differences(want: Any, have: Any, evaluator: Any) -> tuple[float, float, float, int]:
    """Root mean square and largest |have - want| and largest |want| over the real tokens' logits (an encoder's:
    last hidden states) of the
    ``evaluator``'s task inputs; the tokens compared (every sequence's, a shared prefix's included).

    A prompt prefix the inputs share is computed once: by two torch models (its keys and values then serve every
    batch), or by llama.cpp's runners, which share it themselves (:mod:`headprune.exporter.llama_cpp.rows`) and are
    given whole rows, read after the prefix. Its differences count once for every sequence, as if computed in each."""
    import torch

    from headprune.core.compat import cache_of, passing_cache
    from headprune.evaluation.prefix import SharedPrefix

    worst = scale = squares = 0.0
    tokens = count = 0
    modules = all(isinstance(m, torch.nn.Module) for m in (want, have))
    shared = bool(evaluator.prefix) and (modules or all(getattr(m, "shares_prefix", False) for m in (want, have)))
    prefix = (0.0, 0)  # the prefix's squared differences and values, counted again for every sequence
    caches: tuple = ()
    if shared:
        ids = torch.tensor([evaluator.prefix.tokens], device=evaluator.lm.device)
        options = {"use_cache": True} if modules else {}
        outs = [m(input_ids=ids, attention_mask=torch.ones_like(ids), **options) for m in (want, have)]
        a, b = (_values(out)[0].float().cpu() for out in outs)
        diff = a - b
        worst, scale = float(diff.abs().max()), float(a.abs().max())
        prefix = (float(diff.double().square().sum()), diff.numel())
        caches = tuple(cache_of(out) for out in outs) if modules else ()
    start = len(evaluator.prefix) if shared else 0
    for ids, mask, extra in evaluator.reference_batches(after_prefix=shared):
        if shared and not modules:  # whole rows: the prefix's tokens, then each row's own (right-padded)
            whole = torch.cat([torch.tensor([evaluator.prefix.tokens] * len(ids), device=ids.device), ids], dim=1)
            a = _values(want(input_ids=whole, attention_mask=mask, logits_to_keep=ids.shape[1])).float().cpu()
            b = _values(have(input_ids=whole, attention_mask=mask, logits_to_keep=ids.shape[1])).float().cpu()
        else:
            past = [passing_cache(SharedPrefix.rows(c, len(ids))) for c in caches] if shared else [{}, {}]
            a = _values(want(input_ids=ids, attention_mask=mask, **extra, **past[0])).float().cpu()
            b = _values(have(input_ids=ids, attention_mask=mask, **extra, **past[1])).float().cpu()
        real = mask[:, start:].bool().cpu()
        diff = a[real] - b[real]
        if diff.numel():
            worst = max(worst, float(diff.abs().max()))
            scale = max(scale, float(a[real].abs().max()))
        squares += float(diff.double().square().sum()) + len(ids) * prefix[0]
        count += diff.numel() + len(ids) * prefix[1]
        tokens += int(mask.sum())
    return (squares / max(1, count)) ** 0.5, worst, scale, tokens


def with_stored(artifact: Any, plan: Any, stored: dict) -> Any:
    """A copy of ``artifact`` holding a lossy file's de-quantised tensors (q/k rows back in Hugging Face order)."""
    import copy

    import gguf
    import torch

    from headprune.exporter.gguf.experts import join_experts
    from headprune.exporter.gguf.writer import gguf_name, unpermute
    from headprune.exporter.gguf.families import family_of, qkv_of

    arch_enum = next(a for a, name in gguf.MODEL_ARCH_NAMES.items() if name == plan.arch)
    names = gguf.get_tensor_name_map(arch_enum, len(plan.head_count))
    model = copy.deepcopy(artifact)
    family = family_of(artifact.config)
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            new = gguf_name(names, family.tensors.to_llama_cpp(name, tensor, artifact.config)[0], family.renamed)
            joined = join_experts(name, stored, family.experts)
            if joined is None and family.join is not None:  # (MLA's kv_b_proj from attn_k_b and attn_v_b)
                joined = family.join(name, stored, artifact.config)
            if joined is None and new not in stored:  # rotary frequencies, a tied output
                continue
            if joined is None:  # GPT-2's Conv1D and NeoX's fused q/k/v back in the model's layout
                joined = qkv_of(artifact.config).from_llama_cpp(name, torch.from_numpy(stored[new]), plan.head_dim)
            data = joined.reshape(-1, *tensor.shape[1:])  # (RoBERTa's positions: rows cut)
            if new is not None and new.endswith("norm.weight"):  # Gemma's gains: stored as llama.cpp takes them
                data = data - family.norm_offset
            if new == "position_embd.weight" and family.position_offset:  # RoBERTa's rows the file leaves out
                data = torch.cat([tensor[:family.position_offset(artifact.config)], data])
            permuted = plan.permuted and new is not None and (".attn_q." in new or ".attn_k." in new)
            data = unpermute(data, plan.head_dim) if permuted else data
            tensor.copy_(family.tensors.from_llama_cpp(name, data, artifact.config))  # (the writer's first step)
    return model.eval()


def check_quantized(job: Any, files: Any, f32_runner: Any, typed_runner: Any, original_runner: Any, *,
                    gguf_type: str) -> QuantCheck:
    """Gate the quantized file on its float32 file and measure the task on it and on the quantized original.

    Raises:
        VerificationError: llama.cpp's logits of the quantized file differ from the float32 file's by more than the
            file's rounding explains; nothing is written.
    """
    import torch

    from headprune.evaluation import Evaluator
    from headprune.exporter.export_record import weight_bytes

    lm, task = job.lm, job.task
    evaluator = Evaluator(lm, task, batch_size=job.batch_size)
    log.info("export: %s gate: llama.cpp's logits against the float32 GGUF's at every token of %d examples, and "
             "torch's on the rounded weights", gguf_type, len(task))
    with torch.inference_mode():
        rounded = with_stored(job.artifact, files.plan, files.stored)
        reference, _, _, _ = _differences(job.artifact, rounded, evaluator)
        del rounded
        rms, diff, scale, tokens = _differences(f32_runner, typed_runner, evaluator)
    allowed = QUANT_FACTOR * reference
    if not rms <= allowed:
        raise VerificationError(
            f"in llama.cpp, the {gguf_type} file's logits differ from the float32 file's by {rms:.3g} (root mean "
            f"square; allowed {allowed:.3g}: {QUANT_FACTOR:g} x the {reference:.3g} its rounded weights make in "
            "torch); nothing was written")
    counts: dict[str, int] = {}
    for name in files.types.values():
        counts[name] = counts.get(name, 0) + 1
    check = QuantCheck(gguf_type, dict(sorted(counts.items())), weight_bytes(files.path),
                       weight_bytes(files.original_path), weight_bytes(files.f32_path), rms, reference, allowed, diff,
                       scale, tokens)
    return _with_task(check, job, typed_runner, original_runner)


def _with_task(check: QuantCheck, job: Any, typed_runner: Any, original_runner: Any) -> QuantCheck:
    """The task re-measured in llama.cpp on the quantized original and the quantized pruned model, paired."""
    from dataclasses import replace

    from headprune.evaluation import Evaluator
    from headprune.loading.models import LoadedModel

    lm, task = job.lm, job.task
    runs = []
    for name, runner in (("original", original_runner), ("pruned", typed_runner)):
        log.info("export: %s in llama.cpp on the %s %s (%d examples)", task.name, check.gguf_type,
                 "original" if name == "original" else "pruned model", len(task))
        model = LoadedModel(f"gguf-{name}", lm.folder, runner, lm.tokenizer, lm.adapter, lm.grid, lm.model_class)
        runs.append(Evaluator(model, task, batch_size=job.batch_size, share_prefix=False).run(
            progress=sys.stderr.isatty(), label=f"{check.gguf_type} {name}"))
    before, after = runs
    if not task.has_accuracy:
        return replace(check, task=task.name, metric="mean_nll", n=len(task), original=before.mean_nll,
                       pruned=after.mean_nll)
    change = verdict(before.correct, after.correct, alpha=LEVEL_ALPHA)
    return replace(check, task=task.name, n=len(task), original=before.accuracy, pruned=after.accuracy,
                   change=change)


def summary(check: QuantCheck) -> list[str]:
    """What the CLI prints of a quantized check (plain text)."""
    kind = check.gguf_type
    lines = [f"{kind}: {check.bytes:,} bytes (float32 {check.float_bytes:,}; the original in {kind} "
             f"{check.original_bytes:,}); tensor types {_types(check)}",
             f"{kind} gate in llama.cpp: logits to the float32 GGUF {check.rms_diff:.3g} root mean square <= "
             f"{check.allowed:.3g} ({QUANT_FACTOR:g} x {check.reference_rms:.3g}, what its rounded weights do in "
             f"torch); largest difference {check.max_abs_diff:.3g}"]
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
             f"- In llama.cpp, its logits differ from the float32 GGUF's by {check.rms_diff:.3g} root mean square over "
             f"{check.tokens:,} tokens (allowed {check.allowed:.3g}: {QUANT_FACTOR:g} x the "
             f"{check.reference_rms:.3g} its rounded weights make in torch; largest difference "
             f"{check.max_abs_diff:.3g})."]
    if check.task:
        lines.append(f"- Task after quantization: {_task_line(check)}. Whether a gain survives quantization is this "
                     "measurement, beside the float figures above.")
    return lines
