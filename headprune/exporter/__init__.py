"""``export``: physically pruned checkpoints (sliced or dense safetensors, or ONNX), verified before writing.

The flow: resolve the head set (a find result or a list), build the artifact in memory, write it to a
staging folder, load it back the way a user would, verify it against the masked original (logits, then the
task), and only then move the folder into place with its model card and verification record.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

from headprune.errors import HeadSpecError, ResultFileError, SearchSettingsError, VerificationError
from headprune.heads import Head, parse_heads
from headprune.io import atomic_folder, atomic_write_json
from headprune.models import LoadedModel, load_model, quiet_transformers, sha256_file
from headprune.search.result import FindResult
from headprune.tasks import Task, load_task

RECORD_NAME = "headprune_export.json"
DEFAULT_TOLERANCE = 1e-5  # see headprune.exporter.verify
FORMATS = ("safetensors", "onnx")
LAYOUTS = ("sliced", "dense")
DEFAULT_VERIFY_LIMIT = 500


def resolve_heads(heads: str | Path | Sequence[Head | str] | FindResult, lm: LoadedModel, set_rank: int = 1
                  ) -> tuple[tuple[Head, ...], FindResult | None]:
    """The heads to remove, from a find result (finalist ``set_rank``, 1 = primary) or a head list.

    Raises:
        ResultFileError: the result was made for another model, or has no such finalist.
        HeadSpecError: malformed or out-of-range heads.
    """
    result: FindResult | None = None
    if isinstance(heads, FindResult):
        result = heads
    elif isinstance(heads, (str, Path)) and (str(heads).endswith(".json") or Path(heads).is_dir()):
        result = FindResult.load(Path(heads))
    if result is None:
        chosen = parse_heads(heads)  # type: ignore[arg-type]
    else:
        if result.model["weight_hash"] != lm.weight_hash:
            raise ResultFileError(f"the find result was made for a different model ({result.model['name']}, "
                                  f"{result.model['weight_hash'][:19]}...), not {lm.name}")
        if not 1 <= set_rank <= len(result.finalists):
            raise ResultFileError(f"--set {set_rank}: the result has finalists 1..{len(result.finalists)}")
        chosen = parse_heads(result.finalists[set_rank - 1].heads)
    if not chosen:
        raise HeadSpecError("no heads to remove")
    return lm.grid.check(chosen), result


def _result_splits(result: FindResult) -> tuple[Task, Task] | None:
    """Rebuild find's discovery and held-out tasks from the result (checked by content hash)."""
    from headprune.search.split import split_task

    spec = result.task.get("spec")
    if not spec:
        return None
    held_spec = result.heldout_task.get("spec")
    split = split_task(load_task(spec), discovery=result.split["discovery"], heldout=result.split["heldout"],
                       seed=result.split["seed"], heldout_task=load_task(held_spec) if held_spec else None)
    if split.heldout.content_hash() != result.heldout_task["hash"]:
        raise ResultFileError("the task files changed since find ran (held-out hash differs); pass --verify-task")
    return split.discovery, split.heldout


def _count_parameters(model: nn.Module) -> int:
    seen, total = set(), 0
    for parameter in model.parameters():
        if parameter.data_ptr() not in seen:
            seen.add(parameter.data_ptr())
            total += parameter.numel()
    return total


def _weight_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.iterdir() if p.suffix in (".safetensors", ".bin", ".onnx"))


def file_hashes(folder: Path) -> dict[str, str]:
    """sha256 of every file in an export folder except the verification record itself."""
    return {str(path.relative_to(folder)): sha256_file(path)
            for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.name != RECORD_NAME)}


def _source_metadata(lm: LoadedModel) -> dict:
    from headprune.models import builtin_hub_id

    meta = {"name": lm.name, "weight_hash": lm.weight_hash, "family": lm.adapter.family,
            "hub_id": builtin_hub_id(lm.name), "license": None}
    card = lm.folder / "README.md"
    if card.is_file():
        for line in card.read_text(encoding="utf-8", errors="replace").splitlines()[:40]:
            if line.startswith("license:"):
                meta["license"] = line.split(":", 1)[1].strip().strip("\"'")
            if line.startswith("base_model:") and not meta["hub_id"]:
                meta["hub_id"] = line.split(":", 1)[1].strip().strip("\"'") or None
    return meta


def _write_sliced_code(folder: Path, base_class: str, encoder: bool) -> None:
    from headprune.exporter import remote_modeling

    source = Path(remote_modeling.__file__).read_text(encoding="utf-8")
    (folder / "modeling_headprune.py").write_text(source.replace('"{base_class}"', json.dumps(base_class)),
                                                  encoding="utf-8")
    config_path = folder / "config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["auto_map"] = {"AutoModel" if encoder else "AutoModelForCausalLM": "modeling_headprune.HeadprunedModel"}
    config_path.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


def export(
    model: str | LoadedModel,
    heads: str | Path | Sequence[Head | str] | FindResult,
    *,
    set_rank: int = 1,
    format: str = "safetensors",  # noqa: A002 - the CLI's name
    layout: str = "sliced",
    ablation: str = "zero",
    verify_task: str | Task | None = None,
    verify_limit: int = DEFAULT_VERIFY_LIMIT,
    tolerance: float = DEFAULT_TOLERANCE,
    out: Path,
    batch_size: int = 16,
) -> dict:
    """Remove ``heads`` from ``model`` and write a verified checkpoint to ``out``.

    Args:
        model: model spec or loaded model.
        heads: a find result (object, ``result.json`` or its folder) or heads like ``"L0.H1,L3.H2"``.
        set_rank: which finalist of a result (1 = the primary set).
        format: ``safetensors`` or ``onnx`` (ONNX is exported from the chosen layout).
        layout: ``sliced`` (heads physically removed) or ``dense`` (same shapes, heads silenced).
        ablation: ``zero``, or ``mean`` (the mean output folded into the output bias, where there is one).
        verify_task: task re-measured on the artifact (default: the held-out set recorded in the result).
        verify_limit: at most this many verification examples.
        tolerance: largest allowed logit difference to the masked original, relative to the largest |logit|
            (at least 1): the gate passes when ``max |diff| <= tolerance * max(1, max |logit|)``.
        out: the folder to write (replaced atomically).

    Returns:
        The verification record written as ``headprune_export.json``.

    Raises:
        VerificationError (nothing written), HeadSpecError, ResultFileError, SearchSettingsError, TaskError.
    """
    from headprune.evaluate import Evaluator
    from headprune.exporter.card import render_card
    from headprune.exporter.loading import load
    from headprune.exporter.onnx_export import ONNX_NAME, OnnxModel, export_onnx
    from headprune.exporter.slicing import densify, plan_layers, slice_model
    from headprune.exporter.verify import check_task, max_logit_difference

    if format not in FORMATS or layout not in LAYOUTS or ablation not in ("zero", "mean"):
        raise SearchSettingsError(f"format must be one of {FORMATS}, layout one of {LAYOUTS}, ablation zero or mean")
    started = time.perf_counter()
    quiet_transformers()
    lm = load_model(model) if isinstance(model, str) else model
    removed, result = resolve_heads(heads, lm, set_rank)
    plans = plan_layers(lm, removed)  # refuses removing a whole layer before any work
    splits = _result_splits(result) if result is not None else None
    task = (load_task(verify_task) if isinstance(verify_task, (str, Path)) else verify_task) or (
        splits[1] if splits else None)
    if task is None:
        raise SearchSettingsError("a task is needed to verify the export: pass --verify-task (or --heads RESULT.json)")
    task = task.head(verify_limit)
    means = None
    if ablation == "mean":  # the same reference inputs as find used: its discovery set, when known
        reference = splits[0] if splits else task
        means = Evaluator(lm, reference, batch_size=batch_size).head_means()
    artifact = slice_model(lm, removed, means=means)[0] if layout == "sliced" else densify(lm, removed, means=means)
    artifact.eval()

    with atomic_folder(Path(out), replace=True) as staging:
        lm.tokenizer.save_pretrained(staging)
        if format == "onnx":
            export_onnx(artifact, staging / ONNX_NAME, encoder=lm.is_encoder)
            artifact.config.save_pretrained(staging)
            runner = OnnxModel(staging / ONNX_NAME, encoder=lm.is_encoder)
            exported = LoadedModel(str(staging), staging, runner, lm.tokenizer, lm.adapter, lm.grid)  # type: ignore
            measured_on = "onnxruntime"
            if task.kind == "generate":  # decoding needs generate(); the ONNX graph is the sliced model's logits
                exported = LoadedModel("sliced", staging, artifact, lm.tokenizer, lm.adapter, lm.grid)  # type: ignore
                measured_on = "the torch model the ONNX graph was exported from (decoding)"
        else:
            artifact.save_pretrained(staging)
            if layout == "sliced":
                _write_sliced_code(staging, type(lm.model).__name__, lm.is_encoder)
            exported = load(staging)
            runner = exported.model
            measured_on = "the checkpoint loaded back from disk"
        difference, scale = max_logit_difference(lm, removed, runner, task, mode=ablation, means=means)
        allowed = tolerance * max(1.0, scale)
        if not difference <= allowed:
            raise VerificationError(f"the exported model differs from the masked original by {difference:.3g} "
                                    f"(allowed {allowed:.3g}: tolerance {tolerance:g} x largest |logit| {scale:.3g}); "
                                    "nothing was written")
        check = check_task(lm, removed, exported, task, mode=ablation, means=means, measured_on=measured_on,
                           batch_size=batch_size)
        if check.disagreements:
            raise VerificationError(f"the exported model answers {check.disagreements} of {check.n} {task.name} "
                                    "examples differently from the masked original; nothing was written")
        record = {
            "headprune_export": 1, "source": _source_metadata(lm), "removed_heads": [str(h) for h in removed],
            "layout": layout, "format": format, "ablation": ablation, "encoder": lm.is_encoder,
            "layers": [p.to_dict() for p in plans] if layout == "sliced" else [],
            "parameters": {"before": _count_parameters(lm.model), "after": _count_parameters(artifact)},
            "bytes": {"before": _weight_bytes(lm.folder) if lm.folder.is_dir() and _weight_bytes(lm.folder) else
                      _count_parameters(lm.model) * 4, "after": _weight_bytes(staging)},
            "verification": {"max_abs_logit_diff": difference, "max_abs_logit": scale, "tolerance": tolerance,
                             "allowed_diff": allowed, "task": check.to_dict()},
            "task_kind": task.kind,
            "find_verdict": result.finalists[set_rank - 1].heldout if result is not None else None,
            "find_task": result.task["name"] if result is not None else None,
            "seconds": round(time.perf_counter() - started, 2),
        }
        record["model_index"] = _model_index(record)
        (staging / "README.md").write_text(render_card(record), encoding="utf-8")
        record["files"] = file_hashes(staging)
        atomic_write_json(staging / RECORD_NAME, record)
    return record


def _model_index(record: dict) -> list | None:
    verdict = record.get("find_verdict")
    if not verdict:
        return None
    name = record["find_task"] or "task"
    return [{"name": f"{record['source']['name']}-headpruned", "results": [{
        "task": {"type": "text-generation", "name": name},
        "dataset": {"type": name, "name": f"{name} (held-out split)"},
        "metrics": [
            {"type": "accuracy", "value": round(verdict["accuracy_after"], 6), "name": "held-out accuracy (pruned)"},
            {"type": "accuracy", "value": round(verdict["accuracy_before"], 6), "name": "held-out accuracy (original)"},
        ]}]}]


def verify_record(folder: Path) -> dict:
    """Re-check an export folder: its record exists and every file still has the recorded hash.

    Raises:
        ResultFileError: not a headprune export, or edited after export (naming the file).
    """
    folder = Path(folder)
    path = folder / RECORD_NAME
    if not path.is_file():
        raise ResultFileError(f"{folder} is not a headprune export (no {RECORD_NAME})")
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        recorded = record["files"]
    except (json.JSONDecodeError, KeyError) as error:
        raise ResultFileError(f"{path} is not a valid export record") from error
    actual = file_hashes(folder)
    for name in sorted(set(recorded) | set(actual)):
        if recorded.get(name) != actual.get(name):
            state = "added" if name not in recorded else "missing" if name not in actual else "changed"
            raise ResultFileError(f"{folder}: {name} was {state} after export; re-run headprune export")
    return record


__all__ = ["export", "resolve_heads", "verify_record", "file_hashes", "RECORD_NAME"]
