"""``export``: physically pruned checkpoints (sliced or dense safetensors, ONNX or GGUF), verified before writing.

The flow never branches on the format (each is a class in :mod:`headprune.exporter.formats`): resolve the
head set (a find result or a list) and check every option, then the loaded model, then plan every layer; build
the artifact in memory; let the format write it to a staging folder; verify it against the masked original
(tensors, logits, the task, then the format's own runtime); and only then record it and move the folder into
place with its model card.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from headprune.core.choices import EXPORT_FORMATS, EXPORT_LAYOUTS
from headprune.core.folder_lock import FolderLock
from headprune.core.io import atomic_folder, temporary_folder
from headprune.core.record_json import to_json
from headprune.errors import ResultFileError, VerificationError
from headprune.exporter.destination import check_destination, export_inputs, final_check
from headprune.exporter.export_options import check_options, check_result_options, format_option_values
from headprune.exporter.export_record import (RECORD_NAME, Counts, ExportRecord, FindOrigin, SourceInfo, Verification,
                                              file_hashes, public_name, weight_bytes)
from headprune.exporter.formats import ExportFormat, ExportOptions, Job, Written, format_for
from headprune.exporter.resolve import (HeadsLike, check_ablation, find_origin, pinned_revision, read_result,
                                        refuse_removed_again, refuse_unconfirmed, resolve_heads,
                                        verification_inputs)
from headprune.heads import Head
from headprune.loading.models import LoadedModel, load_model, quiet_transformers
from headprune.search.find_result import FindResult
from headprune.surgery.plan import plan_layers
from headprune.surgery.slicing import count_parameters
from headprune.surgery.unslicing import sliced_away, unslice
from headprune.tasks import Task

log = logging.getLogger("headprune")

LAYOUTS = EXPORT_LAYOUTS
DEFAULT_VERIFY_LIMIT = 500
# Float32 runtimes against torch: the kernels sum in another order, so logits differ by rounding alone. Measured as
# max |diff| / max(1, max |logit|) over every position of the verification inputs (and every greedy step): tiny
# llama, qwen2, gpt2, gpt-neox, bert 1e-7 to 3e-7; SmolLM2-135M sliced 1.7e-6 in llama.cpp (8 heads removed, logits
# up to 40) and 1.35e-5 in onnxruntime (67 heads removed). The tolerances (GGUF_TOLERANCE, ONNX_TOLERANCE: each
# format's own) leave 4x to 10x that for deeper and wider models, and stay far below what a 0.1% error in one weight
# does (scaled output, embedding, norm, value or output projection: 1e-4 to 5e-4 on the tiny models, refused by
# tests/test_export_gates.py; 1e-3 of the largest logit for the output on any model). The former 1e-3 for GGUF let
# every such file through.
GREEDY_PROMPTS = 16  # task prompts decoded greedily in the runtime (llama.cpp, ONNX Runtime GenAI) and in torch
GREEDY_STEPS = 16

__all__ = ["DEFAULT_VERIFY_LIMIT", "GREEDY_PROMPTS", "GREEDY_STEPS", "LAYOUTS", "export", "resolve_heads"]


def export(
    model: str | LoadedModel,
    heads: HeadsLike,
    *,
    set_rank: int = 1,
    format: str = EXPORT_FORMATS[0],  # noqa: A002 - the CLI's name; the first is safetensors
    layout: str = "sliced",
    ablation: str = "zero",
    verify_task: str | Task | None = None,
    verify_limit: int = DEFAULT_VERIFY_LIMIT,
    tolerance: float | None = None,
    out: Path,
    batch_size: int | str = "auto",
    device: str = "auto",
    dtype: str | None = None,
    trust_remote_code: bool = False,
    allow_unconfirmed: bool = False,
    gguf_type: str | None = None,
    max_shard_size: int | str | None = None,
    overwrite: bool = False,
    format_options: Mapping[str, str] | None = None,
    revision: str | None = None,
) -> ExportRecord:
    """Remove ``heads`` from ``model`` and write a verified checkpoint to ``out``.

    Args:
        model: model spec or loaded model.
        heads: a find result (object, ``result.json`` or its folder) or heads like ``"L0.H1,L3.H2"``.
        set_rank: which finalist of a result (1 = the primary set).
        format: ``safetensors``, ``onnx`` (exported from the chosen layout) or ``gguf`` (llama.cpp; Llama-style
            models: dense as the stock ``llama``/``qwen2`` architecture, sliced as ``deci``).
        layout: ``sliced`` (heads physically removed) or ``dense`` (same shapes, heads silenced).
        ablation: ``zero``, or ``mean`` (the mean output folded into the output bias, where there is one).
        verify_task: task re-measured on the artifact (default: the held-out set recorded in the result; heads
            given by hand without one are verified on a built-in text sample, and no task is re-measured).
        verify_limit: at most this many verification examples.
        tolerance: largest allowed logit difference to the masked original, relative to the largest |logit|
            (at least 1): the gate passes when ``max |diff| <= tolerance * max(1, max |logit|)``; ``None``
            follows the dtype verified in (1e-5 for float32, 5e-3 for float16, 2e-2 for bfloat16).
        device: where the model runs (``auto``: the GPU when there is one).
        dtype: the export's dtype (``None``: the checkpoint's own; a loaded model keeps its dtype).
        out: the folder to write: a new or empty folder, or (with ``overwrite``) a previous export, replaced only
            once the new one is verified; never the source model's folder, a find run's, a root or home folder, or
            a folder of other files (``headprune.exporter.destination``). Locked for the export (one run per folder).
        trust_remote_code: allow a checkpoint whose class only its own code defines, and lm-eval task files that
            run Python.
        allow_unconfirmed: export a finalist whose held-out gain is not confirmed (an exploratory finalist, or
            a primary set find did not confirm); its card says so in its first line. Heads given as a list
            make no claim and need no permission (their card says that no improvement is claimed).
        gguf_type: the GGUF file's tensor type (f32, f16, bf16, q8_0; default f32); the runtime check runs a float32
            copy. Short for ``format_options={"gguf_type": ...}``.
        max_shard_size: safetensors exports larger than this (bytes, or ``"5GB"``, ``"500MB"``) are written in
            shards with a ``model.safetensors.index.json``, as ``save_pretrained`` does (``None``: its default).
        overwrite: replace a previous headprune export in ``out``.
        format_options: the options only the chosen format takes, by name (its class's ``takes``; ``gguf``:
            ``gguf_type``); an option of another format is refused.
        revision: for a Hub id, the branch, tag or commit to read (default: the commit the find result read,
            refused when the Hub id's main has moved since; else main). The card names the commit read.

    Returns:
        The record written as ``headprune_export.json``.

    Raises:
        VerificationError (nothing written), UnconfirmedSetError, HeadSpecError, ResultFileError,
        ExportSettingsError, TaskError.
    """
    # A loaded model keeps its own dtype: only a dtype it is loaded in is an option to check.
    fmt = format_for(format, ExportOptions(layout, dtype if isinstance(model, str) else None, max_shard_size,
                                           format_option_values(format_options, gguf_type=gguf_type)))
    check_options(fmt, ablation, tolerance)
    result = read_result(heads, set_rank)
    check_result_options(result, set_rank, allow_unconfirmed)
    check_ablation(result, ablation, verify_task)  # every option is checked before the model is touched
    revision = pinned_revision(model, result, revision)
    out, inputs = Path(out), export_inputs(model, heads, verify_task, result)
    check_destination(out, sources=inputs, overwrite=overwrite)  # and the folder, before it is locked
    with FolderLock(out, what="export"):
        check_destination(out, sources=inputs, overwrite=overwrite)  # held now: look again
        return _export(fmt, model, heads, result, set_rank=set_rank, ablation=ablation, verify_task=verify_task,
                       verify_limit=verify_limit, tolerance=tolerance, out=out, batch_size=batch_size,
                       device=device, dtype=dtype, trust_remote_code=trust_remote_code,
                       allow_unconfirmed=allow_unconfirmed, overwrite=overwrite, inputs=inputs, revision=revision)


def _export(fmt: ExportFormat, model: str | LoadedModel, heads: HeadsLike, result: FindResult | None, *,
            set_rank: int, ablation: str, verify_task: str | Task | None, verify_limit: int, tolerance: float | None,
            out: Path, batch_size: int | str, device: str, dtype: str | None, trust_remote_code: bool,
            allow_unconfirmed: bool, overwrite: bool, inputs: list, revision: str | None) -> ExportRecord:
    """The export once its options are checked and its folder is held: load, plan, build, write, verify; the
    folder is checked once more before the move (``inputs``: what it reads, for the rule)."""
    started = time.perf_counter()
    quiet_transformers()
    lm = load_model(model, dtype=dtype or "checkpoint", device=device, trust_remote_code=trust_remote_code,
                    revision=revision) if isinstance(model, str) else model
    inputs = inputs + export_inputs(lm)  # the files read (a Hub id's, a GGUF's converted folder)
    check_destination(out, sources=inputs, overwrite=overwrite)
    earlier = sliced_away(lm)
    lm = unslice(lm)  # a sliced export in its original shapes: the heads it lacks go again, with the new ones
    fmt.check_model(lm)
    removed, result = resolve_heads(result or heads, lm, set_rank)
    if earlier:
        refuse_removed_again(lm.name, earlier, removed)
        log.info("export: %s is a sliced export without %s; those go too", lm.name, ",".join(map(str, earlier)))
        removed = lm.grid.check((*earlier, *removed))
    if result is not None and not allow_unconfirmed:
        refuse_unconfirmed(result, set_rank)
    # Refuses removing a whole layer before any work.
    plans = plan_layers(lm.grid, removed, kv_map=fmt.kv_map)
    task, means, remeasured = verification_inputs(lm, result, verify_task, limit=verify_limit, ablation=ablation,
                                                  batch_size=batch_size, trust_remote_code=trust_remote_code)
    job = _build(fmt, lm, removed, plans, task=task, ablation=ablation, means=means, batch_size=batch_size,
                 tolerance=tolerance if tolerance is not None else fmt.tolerance)
    origin = None if result is None else find_origin(result, set_rank)
    log.info("export: removing %d heads (%s, %s); writing %s", len(removed), job.layout, fmt.name, out)
    return _write_verified(fmt, job, out, origin=origin, remeasured=remeasured, started=started,
                           check=final_check(out, sources=inputs, overwrite=overwrite))


def _build(fmt: ExportFormat, lm: LoadedModel, removed: tuple[Head, ...], plans: list, *, task: Task, ablation: str,
           means: object, batch_size: int | str, tolerance: float | None) -> Job:
    """The artifact in memory, in the layout the format takes, with what its verification needs."""
    from headprune.exporter.verify import default_tolerance
    from headprune.surgery import slicing

    layout = fmt.layout_for(lm, plans)
    if layout == "sliced":
        artifact = slicing.slice_model(lm, plans, removed, means=means)
    else:
        artifact = slicing.densify(lm, removed, means=means)
    artifact.eval()
    return Job(lm, artifact, removed, plans, layout, task, ablation, means,  # type: ignore[arg-type]
               default_tolerance(lm.dtype) if tolerance is None else tolerance, batch_size, GREEDY_PROMPTS,
               GREEDY_STEPS)


def _write_verified(fmt: ExportFormat, job: Job, out: Path, *, origin: FindOrigin | None, remeasured: bool,
                    started: float, check: Callable[[Path], None]) -> ExportRecord:
    """Write into a staging folder, verify, record; the folder replaces ``out`` only when everything passed and
    ``out`` still passes ``check`` (else the verified export stays in the staging folder, which the error names)."""
    from headprune.exporter.card import render_card

    # Staging and scratch sit beside out (a killed export's are removed by the next run on out); the new folder
    # replaces out only once verified, its record moved last where files go into an existing empty folder.
    with atomic_folder(out, replace=True, last=(RECORD_NAME,), check=check) as staging, \
            temporary_folder(out) as scratch:
        written = fmt.write(job, staging, scratch)
        try:
            _refuse_credentials(fmt, staging)  # what the format wrote, before minutes of verification
            verification = _verify(fmt, job, written, staging, remeasured)
            runtime, details = fmt.runtime_check(job, written)
            record = _record(fmt, job, staging, replace(verification, runtime=runtime), details=details,
                             origin=origin, started=started)
            (staging / "README.md").write_text(render_card(record), encoding="utf-8")
            record = replace(record, files=file_hashes(staging))
            record.save(staging)
            _refuse_credentials(fmt, staging, ("README.md", RECORD_NAME))  # and what the export itself wrote
        finally:
            written.close()
    return record


def _refuse_credentials(fmt: ExportFormat, staging: Path, names: tuple[str, ...] | None = None) -> None:
    """No credential in the export (``names``: in those files): the load strips those of the source's configs; one
    left (in a tokenizer's vocabulary, or a chat template that a GGUF file carries inside) stops the export, and
    nothing is written. Every file is read, binary ones as bytes (``headprune.core.credentials``).

    Raises:
        ResultFileError: naming the file and the place, never the value.
    """
    from headprune.core.credentials import credentials_in_folder

    found = credentials_in_folder(staging, fmt.credential_place, names)
    if found:
        name, place = found[0]
        raise ResultFileError(f"the export's {name} would carry a credential ({place}) from the source model's files; "
                              "nothing was written: remove it from the source")


def _verify(fmt: ExportFormat, job: Job, written: Written, staging: Path, remeasured: bool) -> Verification:
    """Tensors by name, outputs on the verification inputs, then the task, against the masked original.

    Raises:
        VerificationError: the export loses or changes what it should not, or computes something else.
    """
    from headprune.exporter.passthrough import unchanged
    from headprune.exporter.verify import MIN_TIE, check_logits, check_task, check_tensors

    lm, task = job.lm, job.task
    log.info("export: verifying against the masked original (tensors, outputs, %s on %d examples)", task.name,
             len(task))
    pruned_layers = [p.layer for p in job.plans if p.layout != "unchanged"] if job.layout == "sliced" else sorted(
        {h.layer for h in job.removed})
    tensors = check_tensors(lm.model, written.weights, changed_prefixes(lm, pruned_layers))
    if fmt.passthrough:  # the tensors no class loads: compared file against file
        same, differ = unchanged(lm.folder, staging, fmt.passthrough)
        tensors = replace(tensors, kept=tensors.kept + tuple(same), unexpected=tensors.unexpected + tuple(differ))
    if not tensors.ok:
        lost = tensors.removed or tensors.unexpected
        raise VerificationError(f"the export would lose or change tensors it was not asked to prune "
                                f"({', '.join(lost[:4])}); nothing was written")
    options = dict(mode=job.ablation, means=job.means, batch_size=job.batch_size)
    logits = check_logits(lm, job.removed, written.runner, task, tolerance=job.tolerance, **options)
    if not logits.max_abs_diff <= logits.allowed:
        raise VerificationError(f"the exported model differs from the masked original by {logits.max_abs_diff:.3g} "
                                f"(allowed {logits.allowed:.3g}: tolerance {job.tolerance:g} x largest |logit| "
                                f"{logits.max_abs_logit:.3g}); nothing was written")
    check = check_task(lm, job.removed, written.exported, task, measured_on=written.measured_on,
                       tie=max(MIN_TIE, 2 * logits.allowed), **options) if remeasured else None
    if check is not None and check.disagreements:
        raise VerificationError(f"the exported model answers {check.disagreements} of {check.n} {task.name} "
                                "examples differently from the masked original; nothing was written")
    return Verification(logits, check and replace(check, task=public_name(check.task)), tensors)


def _record(fmt: ExportFormat, job: Job, staging: Path, verification: Verification, *, details: object,
            origin: FindOrigin | None, started: float) -> ExportRecord:
    """The export's record (its files' hashes are added once the card is written)."""
    lm = job.lm
    source_bytes = weight_bytes(lm.folder) if lm.folder.is_dir() else 0
    return ExportRecord(
        source=_source_info(lm), removed_heads=tuple(str(h) for h in job.removed), layout=job.layout, format=fmt.name,
        ablation=job.ablation, encoder=lm.is_encoder, model_class=lm.model_class.name, head=lm.task_head,
        auto_class=lm.model_class.auto_class, layers=tuple(job.plans) if job.layout == "sliced" else (),
        parameters=Counts(count_parameters(lm.model), count_parameters(job.artifact)),
        bytes=Counts(source_bytes or count_parameters(lm.model) * lm.model.dtype.itemsize,
                     weight_bytes(staging, fmt.weight_suffixes)),
        verification=verification, origin=origin, seconds=round(time.perf_counter() - started, 2),
        format_details=to_json(details) if details is not None else {},
        stands_in_for=lm.model_class.stands_in_for if lm.model_class else None, passthrough=fmt.passthrough,
        layout_note=fmt.layout_note, quantization=fmt.quantization, dropped=lm.dropped_tensors)


def _source_info(lm: LoadedModel) -> SourceInfo:
    from headprune.loading.model_download import commit_of
    from headprune.loading.models import builtin_hub_id

    hub_id, license_ = builtin_hub_id(lm.name), None
    card = lm.folder / "README.md"
    if card.is_file():
        for line in card.read_text(encoding="utf-8", errors="replace").splitlines()[:40]:
            if line.startswith("license:"):
                license_ = line.split(":", 1)[1].strip().strip("\"'")
            if line.startswith("base_model:") and not hub_id:
                hub_id = line.split(":", 1)[1].strip().strip("\"'") or None
    return SourceInfo(public_name(str(lm.name)), lm.weight_hash, lm.adapter.family, hub_id, license_,
                      commit_of(lm.folder))


def changed_prefixes(lm: LoadedModel, layers: Sequence[int]) -> list[str]:
    """State-dict name prefixes of the attention projections of ``layers`` (DeBERTa's position projections too), and
    the names of their per-head parameters (sinks, per-head norms): what pruning may change."""
    adapter, found = lm.adapter, []
    base = "" if lm.model.base_model is lm.model else f"{lm.model.base_model_prefix}."
    for layer in layers:
        mixer, where = adapter.mixer(lm.grid.layers[layer].kind), f"{base}{adapter.layers_path}.{layer}."
        found += [f"{where}{path}." for path in (*mixer.qkv_paths, *(p for p, _ in mixer.head_projections),
                                                   mixer.output_projection_path)]
        found += [f"{where}{path}" for path, _ in mixer.head_params]
    return found
