"""``export``: physically pruned checkpoints (sliced or dense safetensors, or ONNX), verified before writing.

The flow: resolve the head set (a find result or a list) and plan every layer, build the artifact in
memory, write it to a staging folder, load it back the way a user would, verify it against the masked
original (logits, then the task), and only then move the folder into place with its model card and record.
"""

from __future__ import annotations

import json
import logging
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import torch

from headprune.errors import (HeadSpecError, ResultFileError, SearchSettingsError, UnconfirmedSetError,
                              UnsupportedModelError, VerificationError)
from headprune.exporter.passthrough import unchanged, write_through
from headprune.surgery.plan import plan_layers
from headprune.surgery.slicing import count_parameters
from headprune.exporter.record import (Counts, ExportRecord, FindOrigin, SourceInfo, Verification, file_hashes)
from headprune.exporter.runtime_check import compare_greedy, eos_ids, gate, task_texts
from headprune.exporter.shards import shard_size
from headprune.extras import require
from headprune.heads import Head, parse_heads
from headprune.io import atomic_folder
from headprune.models import LoadedModel, load_model, quiet_transformers
from headprune.search.result import FindResult
from headprune.tasks import Task, load_task

log = logging.getLogger("headprune")

FORMATS = ("safetensors", "onnx", "gguf")
LAYOUTS = ("sliced", "dense")
DEFAULT_VERIFY_LIMIT = 500
# Float32 runtimes against torch: the kernels sum in another order, so logits differ by rounding alone. Measured as
# max |diff| / max(1, max |logit|) over every position of the verification inputs (and every greedy step): tiny
# llama, qwen2, gpt2, gpt-neox, bert 1e-7 to 3e-7; SmolLM2-135M sliced 1.7e-6 in llama.cpp (8 heads removed, logits
# up to 40) and 1.35e-5 in onnxruntime (67 heads removed). The tolerances leave 4x to 10x that for deeper and wider
# models, and stay far below what a 0.1% error in one weight does (scaled output, embedding, norm, value or output
# projection: 1e-4 to 5e-4 on the tiny models, refused by tests/test_export_gates.py; 1e-3 of the largest logit for
# the output on any model). The former 1e-3 for GGUF let every such file through.
GGUF_TOLERANCE = 2e-5
ONNX_TOLERANCE = 5e-5
GREEDY_PROMPTS = 16  # task prompts decoded greedily in the runtime (llama.cpp, ONNX Runtime GenAI) and in torch
GREEDY_STEPS = 16

HeadsLike = str | Path | Sequence[Head | str] | FindResult


def _is_folder(spec: str | Path) -> bool:
    """Whether ``spec`` names a folder (a long head list is no path: the OS refuses to look it up)."""
    try:
        return Path(spec).is_dir()
    except OSError:
        return False


def resolve_heads(heads: HeadsLike, lm: LoadedModel, set_rank: int = 1
                  ) -> tuple[tuple[Head, ...], FindResult | None]:
    """The heads to remove, from a find result (finalist ``set_rank``, 1 = primary) or a head list.

    Raises:
        ResultFileError: the result was made for another model, or has no such finalist.
        HeadSpecError: malformed or out-of-range heads.
    """
    result: FindResult | None = None
    if isinstance(heads, FindResult):
        result = heads
    elif isinstance(heads, (str, Path)) and (str(heads).endswith(".json") or _is_folder(heads)):
        result = FindResult.load(Path(heads))
    if result is None:
        chosen = parse_heads(heads)  # type: ignore[arg-type]
    else:
        if result.model.weight_hash != lm.weight_hash:
            raise ResultFileError(f"the find result was made for a different model ({result.model.name}, "
                                  f"{result.model.weight_hash[:19]}...), not {lm.name}")
        if not 1 <= set_rank <= len(result.finalists):
            raise ResultFileError(f"set_rank {set_rank}: the result has finalists 1..{len(result.finalists)}",
                                  settings=("set_rank",))
        chosen = parse_heads(result.finalists[set_rank - 1].heads)
    if not chosen:
        raise HeadSpecError("no heads to remove")
    return lm.grid.check(chosen), result


def refuse_unconfirmed(result: FindResult, set_rank: int) -> None:
    """An unconfirmed set (a primary set whose held-out verdict is not confirmed, or any other finalist, which
    is exploratory by construction) is exported only when asked for explicitly.

    Raises:
        UnconfirmedSetError
    """
    verdict = result.finalists[set_rank - 1].heldout
    if verdict.confirmed:
        return
    if set_rank == 1 and result.compression is not None:  # find --objective compress: non-inferiority
        tested = result.compression.verdict
        if tested.accepted:
            return
        raise UnconfirmedSetError(
            f"the compressed set was not shown non-inferior on held-out data ({100 * tested.level:g}% score CI lower "
            f"end {100 * tested.interval[0]:+.1f} points, margin -{100 * tested.margin:g}); give allow_unconfirmed to "
            "export it anyway (its model card then says so)", settings=("allow_unconfirmed",))
    if verdict.role == "exploratory":
        why = (f"finalist {set_rank} is exploratory (not the set find chose on discovery; Holm-adjusted "
               f"p = {verdict.adjusted_p:.3g})")
    else:
        why = (f"the primary set is not confirmed on held-out data ({verdict.difference * 100:+.1f} points, "
               f"p = {verdict.p_value:.3g})")
    raise UnconfirmedSetError(f"{why}; give allow_unconfirmed to export it anyway (its model card then says it is "
                              "unconfirmed)", settings=("allow_unconfirmed",))


def result_splits(result: FindResult) -> tuple[Task, Task] | None:
    """Rebuild find's discovery and held-out tasks from the result (checked by content hash)."""
    from headprune.search.split import split_task

    if not result.task.spec:
        return None
    held_spec = result.heldout_task.spec
    split = split_task(load_task(result.task.spec), discovery=result.split.discovery, heldout=result.split.heldout,
                       seed=result.split.seed, heldout_task=load_task(held_spec) if held_spec else None)
    if split.heldout.content_hash() != result.heldout_task.hash:
        raise ResultFileError("the task files changed since find ran (held-out hash differs); give a verify_task",
                              settings=("verify_task",))
    return split.discovery, split.heldout


def find_means(lm: LoadedModel, result: FindResult, splits: tuple[Task, Task] | None) -> torch.Tensor:
    """The head means find ablated with: recomputed on its discovery set (checked by content hash) the way find
    computed them, and checked against the digest find recorded; otherwise refused, never replaced by others.

    Raises:
        ResultFileError
    """
    from headprune.ablation import means_digest
    from headprune.evaluation import Evaluator

    def refuse(why: str) -> None:
        raise ResultFileError(f"mean ablation: {why}; the export would not be the model find measured")

    if splits is None:
        refuse("find's discovery set cannot be rebuilt (the result's task was given in memory, not as a spec)")
    if result.means_digest is None or result.task.discovery_hash is None:
        refuse("the result does not record the means find used (made with zero ablation or by an older headprune)")
    if splits[0].content_hash() != result.task.discovery_hash:
        refuse("the task changed since find ran (its discovery set hash differs)")
    means = Evaluator(lm, splits[0], batch_size=result.settings.batch_size).head_means()
    if means_digest(means) != result.means_digest:
        refuse(f"the head means recomputed on find's discovery set differ from those find used (digest "
               f"{result.means_digest[:19]}...); export with the dtype and device find ran with")
    return means


def _pad_id(lm: LoadedModel) -> int:
    tokenizer = lm.tokenizer
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (eos_ids(lm) or (0,))[0]


def _weight_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.iterdir() if p.suffix in (".safetensors", ".bin", ".onnx", ".gguf"))


def _source_info(lm: LoadedModel) -> SourceInfo:
    from headprune.models import builtin_hub_id

    hub_id, license_ = builtin_hub_id(lm.name), None
    card = lm.folder / "README.md"
    if card.is_file():
        for line in card.read_text(encoding="utf-8", errors="replace").splitlines()[:40]:
            if line.startswith("license:"):
                license_ = line.split(":", 1)[1].strip().strip("\"'")
            if line.startswith("base_model:") and not hub_id:
                hub_id = line.split(":", 1)[1].strip().strip("\"'") or None
    return SourceInfo(lm.name, lm.weight_hash, lm.adapter.family, hub_id, license_)


def _write_sliced_code(folder: Path, base_class: str, auto_class: str | None) -> None:
    """``modeling_headprune.py`` beside the weights, registered in config.json under the auto class of the
    model's own head, so ``AutoModelFor<Head>.from_pretrained(folder, trust_remote_code=True)`` rebuilds it."""
    from headprune.surgery import remote_modeling

    source = Path(remote_modeling.__file__).read_text(encoding="utf-8")
    (folder / "modeling_headprune.py").write_text(source.replace('"{base_class}"', json.dumps(base_class)),
                                                  encoding="utf-8")
    config_path = folder / "config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    if auto_class is not None:
        config["auto_map"] = {auto_class: "modeling_headprune.HeadprunedModel"}
    config_path.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


def changed_prefixes(lm: LoadedModel, layers: Sequence[int]) -> list[str]:
    """State-dict name prefixes of the attention projections of ``layers`` (what pruning may change)."""
    adapter = lm.adapter
    base = "" if lm.model.base_model is lm.model else f"{lm.model.base_model_prefix}."
    return [f"{base}{adapter.layers_path}.{layer}.{path}." for layer in layers
            for path in (*adapter.qkv_paths, adapter.output_projection_path)]


def _passthrough(lm: LoadedModel, format: str) -> tuple[str, ...]:  # noqa: A002 - the CLI's name
    """The checkpoint tensors a safetensors export writes through unchanged (those the class that stands in
    for one transformers lacks does not use); refuses an export that would lose checkpoint tensors."""
    if not lm.unused_tensors:
        return ()
    chosen = lm.model_class.name if lm.model_class else "the loaded class"
    shown = ", ".join(lm.unused_tensors[:4]) + (" ..." if len(lm.unused_tensors) > 4 else "")
    lost = f"{lm.name}: {len(lm.unused_tensors)} checkpoint tensors are not used by {chosen} ({shown})"
    if lm.model_class is not None and lm.model_class.stands_in_for:
        if format == "safetensors" and any(lm.folder.glob("*.safetensors")):
            return lm.unused_tensors
        raise UnsupportedModelError(f"{lost}; a safetensors export writes them through, a {format} file cannot hold "
                                    "them", settings=("format",))
    raise UnsupportedModelError(f"{lost}; an export would lose them. Give the checkpoint an architectures entry in "
                                "config.json that names its head class")


def export(
    model: str | LoadedModel,
    heads: HeadsLike,
    *,
    set_rank: int = 1,
    format: str = "safetensors",  # noqa: A002 - the CLI's name
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
    gguf_type: str = "f32",
    max_shard_size: int | str | None = None,
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
        out: the folder to write (replaced atomically).
        trust_remote_code: allow a checkpoint whose class only its own code defines.
        allow_unconfirmed: export a finalist whose held-out gain is not confirmed (an exploratory finalist, or
            a primary set find did not confirm); its card says so in its first line. Heads given as a list
            make no claim and need no permission (their card says that no improvement is claimed).
        gguf_type: the GGUF file's tensor type (f32, f16, bf16, q8_0); the runtime check runs a float32 copy.
        max_shard_size: safetensors exports larger than this (bytes, or ``"5GB"``, ``"500MB"``) are written in
            shards with a ``model.safetensors.index.json``, as ``save_pretrained`` does (``None``: its default).

    Returns:
        The record written as ``headprune_export.json``.

    Raises:
        VerificationError (nothing written), UnconfirmedSetError, HeadSpecError, ResultFileError,
        SearchSettingsError, TaskError.
    """
    from headprune.evaluation import Evaluator
    from headprune.exporter.card import render_card
    from headprune.exporter.loading import load
    from headprune.exporter.onnx_export import (ONNX_NAME, OnnxModel, export_decoder, export_onnx, generates,
                                                onnx_output)
    from headprune.surgery.slicing import densify, slice_model
    from headprune.exporter.verify import (
        MAX_TOLERANCE,
        MIN_TIE,
        check_logits,
        check_task,
        check_tensors,
        default_tolerance,
    )
    from headprune.scoring import scorer_for

    for name, value, allowed in (("format", format, FORMATS), ("layout", layout, LAYOUTS),
                                 ("ablation", ablation, ("zero", "mean"))):
        if value not in allowed:
            raise SearchSettingsError(f"{name} must be one of {', '.join(allowed)}, not {value!r}", settings=(name,))
    shard_bytes = shard_size(max_shard_size, format)
    if format in ("onnx", "gguf"):
        require(format, f"export format {format!r}")
    started = time.perf_counter()
    quiet_transformers()
    lm = load_model(model, dtype=dtype or "checkpoint", device=device,
                    trust_remote_code=trust_remote_code) if isinstance(model, str) else model
    passthrough = _passthrough(lm, format)
    arch = None
    if format == "gguf":
        from headprune.exporter.gguf_export import check_supported

        arch = check_supported(lm, layout, gguf_type)
        if lm.dtype != torch.float32:
            raise SearchSettingsError("GGUF export is verified in float32; give dtype float32 (gguf_type sets the "
                                      "file's own type)", settings=("dtype", "format"))
    if tolerance is None:
        tolerance = {"gguf": GGUF_TOLERANCE, "onnx": ONNX_TOLERANCE}.get(format, default_tolerance(lm.dtype))
    if not 0 <= tolerance <= MAX_TOLERANCE:
        raise SearchSettingsError(f"tolerance must be between 0 and {MAX_TOLERANCE} (relative to the largest logit), "
                                  f"not {tolerance:g}: a larger one would pass a broken export",
                                  settings=("tolerance",))
    removed, result = resolve_heads(heads, lm, set_rank)
    if result is not None and not allow_unconfirmed:
        refuse_unconfirmed(result, set_rank)
    # Refuses removing a whole layer before any work; llama.cpp repeats KV heads evenly, so no query-to-KV map.
    plans = plan_layers(lm.grid, removed, kv_map=format != "gguf")
    splits = result_splits(result) if result is not None else None
    task = (load_task(verify_task) if isinstance(verify_task, (str, Path)) else verify_task) or (
        splits[1] if splits else None)
    remeasured = task is not None  # heads given by hand without a task: outputs on a text sample, no task
    if task is None:
        if ablation == "mean":
            raise SearchSettingsError("mean ablation of heads given by hand takes its means over a task's inputs: "
                                      "give verify_task", settings=("ablation", "verify_task"))
        from headprune.exporter.sample import sample_task

        task = sample_task(lm)
        log.info("export: no task given: outputs are verified on a built-in text sample (%d texts); no task is "
                 "re-measured", len(task))
    task = task.first(verify_limit)
    if result is not None and result.settings.ablation != ablation:
        raise SearchSettingsError(f"find measured this set with {result.settings.ablation} ablation, not {ablation}; "
                                  f"export it with ablation {result.settings.ablation}", settings=("ablation",))
    means = None
    if ablation == "mean":  # a find result: exactly the means find used; heads given by hand: the verify task's
        means = find_means(lm, result, splits) if result is not None else Evaluator(
            lm, task, batch_size=batch_size).head_means()
    if (format == "onnx" and layout == "sliced" and generates(lm.model.config.model_type, lm.task_head)
            and len({len(p.kv_heads) for p in plans}) > 1):
        log.warning("export: ONNX Runtime GenAI needs one key/value head count in every layer, and this sliced "
                    "layout would keep %s; exporting the dense layout instead (same shapes, heads silenced)",
                    [len(p.kv_heads) for p in plans])
        layout = "dense"
    artifact = slice_model(lm, plans, removed, means=means) if layout == "sliced" else densify(lm, removed,
                                                                                               means=means)
    artifact.eval()
    pruned_layers = [p.layer for p in plans if p.layout != "unchanged"] if layout == "sliced" else sorted(
        {h.layer for h in removed})
    output = onnx_output(lm.task_head) if format == "onnx" else ""
    if format == "onnx" and lm.dtype != torch.float32:
        raise SearchSettingsError("ONNX export runs in float32; give dtype float32", settings=("dtype", "format"))

    log.info("export: removing %d heads (%s, %s); writing %s", len(removed), layout, format, out)
    gguf_info, closers = None, []
    with atomic_folder(Path(out), replace=True) as staging, tempfile.TemporaryDirectory() as scratch:
        if format != "gguf":  # a GGUF file carries its tokenizer
            lm.tokenizer.save_pretrained(staging)
        if format == "gguf":
            from headprune.exporter import gguf_export
            from headprune.exporter.llama_cpp_runtime import LlamaCppModel

            written = gguf_export.write_files(lm, artifact, arch, plans, staging, Path(scratch), gguf_type)
            version, reason = gguf_export.llama_cpp_version()
            runtime = version or ""
            weights = artifact
            if version is None:
                log.warning("export: the GGUF file was not run in llama.cpp: %s", reason)
                runner = artifact
                exported = LoadedModel("gguf-source", staging, artifact, lm.tokenizer, lm.adapter, lm.grid,
                                       lm.model_class)
                measured_on = "the torch model the GGUF file was written from (llama.cpp was not available)"
            else:
                n_ctx = _context_for(lm, task, GREEDY_STEPS)
                runner = LlamaCppModel(written.f32_path, n_ctx=n_ctx, eos=eos_ids(lm))
                closers.append(runner)
                exported = LoadedModel("gguf", staging, runner, lm.tokenizer, lm.adapter, lm.grid,  # type: ignore
                                       lm.model_class)
                measured_on = f"{runtime}, float32 file"
        elif format == "onnx":
            if generates(lm.model.config.model_type, lm.task_head):  # a decoder with a cache, for ONNX Runtime GenAI
                export_decoder(artifact, staging, eos=eos_ids(lm), pad=_pad_id(lm), bos=lm.tokenizer.bos_token_id)
            else:
                export_onnx(artifact, staging / ONNX_NAME, output=output, positions=not lm.is_encoder)
            artifact.config.save_pretrained(staging)
            runner = OnnxModel(staging / ONNX_NAME, output=output, positions=not lm.is_encoder)
            exported = LoadedModel(str(staging), staging, runner, lm.tokenizer, lm.adapter, lm.grid,  # type: ignore
                                   lm.model_class)
            weights, measured_on = artifact, "onnxruntime"  # the graph's weights are the artifact's
            if scorer_for(task, lm).generates:
                # Decoding needs generate(); the ONNX graph is the sliced model's logits.
                exported = LoadedModel("sliced", staging, artifact, lm.tokenizer, lm.adapter, lm.grid, lm.model_class)
                measured_on = "the torch model the ONNX graph was exported from (decoding)"
        else:
            artifact.save_pretrained(staging, **({} if shard_bytes is None else {"max_shard_size": shard_bytes}))
            if layout == "sliced":
                _write_sliced_code(staging, type(lm.model).__name__, lm.model_class.auto_class)
            if passthrough:
                write_through(lm.folder, staging, passthrough, lm.model_class.stands_in_for)
            exported = load(staging, dtype=lm.dtype, device=lm.device)
            runner = weights = exported.model
            measured_on = "the checkpoint loaded back from disk"
        log.info("export: verifying against the masked original (tensors, outputs, %s on %d examples)", task.name,
                 len(task))
        tensors = check_tensors(lm.model, weights, changed_prefixes(lm, pruned_layers))
        if passthrough:  # the tensors no class loads: compared file against file
            same, differ = unchanged(lm.folder, staging, passthrough)
            tensors = replace(tensors, kept=tensors.kept + tuple(same), unexpected=tensors.unexpected + tuple(differ))
        if not tensors.ok:
            lost = tensors.removed or tensors.unexpected
            raise VerificationError(f"the export would lose or change tensors it was not asked to prune "
                                    f"({', '.join(lost[:4])}); nothing was written")
        logits = check_logits(lm, removed, runner, task, mode=ablation, means=means, tolerance=tolerance,
                              batch_size=batch_size)
        if not logits.max_abs_diff <= logits.allowed:
            raise VerificationError(f"the exported model differs from the masked original by {logits.max_abs_diff:.3g} "
                                    f"(allowed {logits.allowed:.3g}: tolerance {tolerance:g} x largest |logit| "
                                    f"{logits.max_abs_logit:.3g}); nothing was written")
        check = check_task(lm, removed, exported, task, mode=ablation, means=means, measured_on=measured_on,
                           batch_size=batch_size, tie=max(MIN_TIE, 2 * logits.allowed)) if remeasured else None
        if check is not None and check.disagreements:
            raise VerificationError(f"the exported model answers {check.disagreements} of {check.n} {task.name} "
                                    "examples differently from the masked original; nothing was written")
        runtime_check = None
        if format == "onnx" and generates(lm.model.config.model_type, lm.task_head):
            runtime_check = _check_genai(lm, removed, staging, task, mode=ablation, means=means, tolerance=tolerance)
        if format == "gguf":
            gguf_info = _check_gguf(lm, removed, written, runner if closers else None, task, mode=ablation,
                                    means=means, tolerance=tolerance, runtime=runtime, reason=reason,
                                    gguf_type=gguf_type, closers=closers)
        record = ExportRecord(
            source=_source_info(lm), removed_heads=tuple(str(h) for h in removed), layout=layout, format=format,
            ablation=ablation, encoder=lm.is_encoder, model_class=lm.model_class.name, head=lm.task_head,
            auto_class=lm.model_class.auto_class, layers=tuple(plans) if layout == "sliced" else (),
            parameters=Counts(count_parameters(lm.model), count_parameters(artifact)),
            bytes=Counts(_weight_bytes(lm.folder) if lm.folder.is_dir() and _weight_bytes(lm.folder) else
                         count_parameters(lm.model) * lm.model.dtype.itemsize, _weight_bytes(staging)),
            verification=Verification(logits, check, tensors, runtime_check),
            origin=None if result is None else FindOrigin(
                result.task.name, set_rank, result.finalists[set_rank - 1].heldout,
                result.compression.verdict if result.compression is not None and set_rank == 1 else None),
            seconds=round(time.perf_counter() - started, 2), gguf=gguf_info,
            stands_in_for=lm.model_class.stands_in_for if lm.model_class else None, passthrough=passthrough)
        (staging / "README.md").write_text(render_card(record), encoding="utf-8")
        record = replace(record, files=file_hashes(staging))
        record.save(staging)
        for closer in closers:
            closer.close()
    return record


def _context_for(lm: LoadedModel, task: Task, steps: int) -> int:
    """A llama.cpp context that holds the longest verification input plus the greedy tokens."""
    from headprune.evaluation import Evaluator

    longest = max(ids.shape[1] for ids, _, _ in Evaluator(lm, task, share_prefix=False).reference_batches())
    need = longest + max(steps, task.max_new_tokens or 0) + 8
    return min(int(lm.model.config.max_position_embeddings), 64 * -(-need // 64))


def _check_genai(lm: LoadedModel, removed: Sequence[Head], folder: Path, task: Task, *, mode: str,
                 means: torch.Tensor | None, tolerance: float):  # noqa: ANN202 - a RuntimeCheck
    """ONNX Runtime GenAI itself loads the folder and decodes task prompts greedily like the masked original.
    Raises VerificationError on a mismatch; records why when onnxruntime-genai is not installed."""
    from headprune.exporter.onnx_export import GenaiRunner, genai_version
    from headprune.exporter.record import RuntimeCheck

    version, reason = genai_version()
    if version is None:
        log.warning("export: the ONNX model was not run in ONNX Runtime GenAI: %s", reason)
        return RuntimeCheck("", False, reason)
    prompts = [list(lm.tokenizer(text)["input_ids"]) for text in task_texts(task)[:GREEDY_PROMPTS]]
    check = compare_greedy(lm, removed, GenaiRunner(folder), prompts, steps=GREEDY_STEPS, mode=mode, means=means,
                           tolerance=tolerance, runtime=f"ONNX Runtime GenAI {version}", gguf_type="f32",
                           gated=True, texts=[])
    gate(check, tolerance, "ONNX Runtime GenAI")
    return check


def _check_gguf(lm: LoadedModel, removed: Sequence[Head], written, runner, task: Task, *, mode: str,  # noqa: ANN001
                means, tolerance: float, runtime: str, reason: str, gguf_type: str, closers: list):  # noqa: ANN001
    """The runtime gate on the float32 file (greedy tokens and their logits, tokenizer), and the written type's agreement
    reported beside it when that type is lossy. Raises VerificationError when the float32 file disagrees."""
    from headprune.exporter import gguf_export
    from headprune.exporter.llama_cpp_runtime import LlamaCppModel
    from headprune.exporter.record import GgufInfo

    texts = task_texts(task)[:GREEDY_PROMPTS]
    prompts = [list(lm.tokenizer(text)["input_ids"]) for text in texts]
    if runner is None:
        check = gguf_export.not_run(reason, "f32")
        typed = None if gguf_type == "f32" else gguf_export.not_run(reason, gguf_type)
    else:
        options = dict(steps=GREEDY_STEPS, mode=mode, means=means, tolerance=tolerance, runtime=runtime, texts=texts)
        check = compare_greedy(lm, removed, runner, prompts, gguf_type="f32", gated=True, **options)
        gate(check, tolerance, "llama.cpp")
        typed = None
        if gguf_type != "f32":
            typed_runner = LlamaCppModel(written.path, n_ctx=runner.n_ctx, eos=runner.eos)
            closers.append(typed_runner)
            typed = compare_greedy(lm, removed, typed_runner, prompts, gguf_type=gguf_type, gated=False,
                                               **options)
    return GgufInfo(written.plan.arch, gguf_type, written.path.name, written.plan.head_count,
                    written.plan.head_count_kv, written.tokenizer, written.chat_template, written.read_back,
                    written.read_back_diff, check, typed, written.notes)
