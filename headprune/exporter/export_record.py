"""``ExportRecord``: what an export removed, how it was verified, and the hash of every file it wrote.

Written as ``headprune_export.json`` next to the checkpoint; ``push`` re-reads it to refuse edited folders
and to show the card's metadata. No torch here: checking and pushing an export loads no model code.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from headprune.core.hashing import sha256_file
from headprune.core.io import user_path
from headprune.core.record_json import from_json, to_json
from headprune.errors import ResultFileError
from headprune.exporter.quantized import QuantizedExport
from headprune.search.guards import GuardEffect
from headprune.search.shrink_record import Shrink
from headprune.search.stats import NonInferiority, Verdict
from headprune.surgery.plan import LayerPlan

RECORD_NAME = "headprune_export.json"
# 3: RuntimeCheck.gguf_type became file_type (it holds ONNX's file type too); 4: the GGUF-only field "gguf" became
# "format_details", each format's own (GGUF's: formats.gguf.GgufInfo).
SCHEMA_VERSION = 6


@dataclass(frozen=True)
class SourceInfo:
    """The model the heads were removed from."""

    name: str
    weight_hash: str
    family: str
    hub_id: str | None = None
    license: str | None = None
    revision: str | None = None  # the Hub commit the weights were read at (None: not a Hub snapshot)


@dataclass(frozen=True)
class Counts:
    before: int
    after: int


@dataclass(frozen=True)
class LogitCheck:
    """The export's outputs against the hook-masked original on real task inputs."""

    max_abs_diff: float
    max_abs_logit: float  # the scale the difference is judged against
    tolerance: float
    allowed: float  # tolerance x max(1, max_abs_logit)
    outputs: tuple[str, ...] = ("logits",)  # the outputs compared (the head's logits, hidden states, ...)
    dtype: str = "float32"  # the precision both models ran in (the tolerance follows it)
    examples: int = 0  # verification examples compared (all of them), their input sequences and real tokens
    sequences: int = 0
    tokens: int = 0


@dataclass(frozen=True)
class TensorCheck:
    """The original's tensors in the export, by name: unchanged, sliced (smaller), edited (same shape, heads
    zeroed), removed (absent: never allowed), and changed ones outside the pruned attention (never allowed)."""

    kept: tuple[str, ...]
    sliced: tuple[str, ...]
    edited: tuple[str, ...]
    removed: tuple[str, ...]
    unexpected: tuple[str, ...] = ()

    _derived = ("ok",)

    @property
    def ok(self) -> bool:
        return not self.removed and not self.unexpected


@dataclass(frozen=True)
class TaskCheck:
    """The task re-measured on the export, beside the intact and the masked original."""

    task: str
    metric: str  # "accuracy" or "mean_nll"
    n: int
    intact: float | None
    masked: float | None
    exported: float | None
    disagreements: int  # examples the export answers differently from the masked model (beyond ties)
    measured_on: str


@dataclass(frozen=True)
class Verification:
    logits: LogitCheck
    task: TaskCheck | None  # None: heads given by hand without a task (outputs compared on a text sample)
    tensors: TensorCheck | None = None  # None in records written before tensors were checked
    runtime: RuntimeCheck | None = None  # ONNX: the folder run in ONNX Runtime GenAI (GGUF: in format_details)


@dataclass(frozen=True)
class RuntimeCheck:
    """An exported file run in its runtime (llama.cpp, ONNX Runtime GenAI) against the
    hook-masked original in torch: greedy tokens on task prompts, and (llama.cpp) the runtime's tokenizer against
    the model's own on the task texts."""

    runtime: str  # "llama.cpp b11549 (xllamacpp 2026.10.11549)"; "" when not done
    done: bool
    reason: str = ""  # why it was not done
    file_type: str = "f32"  # the type of the file run (GGUF: f32, f16, bf16, q8_0; ONNX: f32)
    gated: bool = True  # False: reported only (a lossy type; the float32 copy is the one the gate ran)
    prompts: int = 0
    tokens: int = 0  # greedy tokens compared
    identical: int = 0  # prompts whose greedy tokens all equal the masked original's
    ties: int = 0  # prompts that diverged where the original's two candidates were within the tolerance
    mismatches: int = 0  # prompts that diverged beyond it
    max_abs_logit_diff: float = 0.0  # over the compared steps
    max_abs_logit: float = 0.0
    tokenizer_texts: int = 0
    tokenizer_agree: int = 0  # texts llama.cpp tokenizes exactly as the model's tokenizer does


@dataclass(frozen=True)
class FindOrigin:
    """The find result the heads came from: its task, the finalist's rank and held-out verdict (and, for a
    ``find --objective compress`` result, its non-inferiority verdict)."""

    task: str
    rank: int
    verdict: Verdict
    non_inferiority: NonInferiority | None = None
    guards: tuple[GuardEffect, ...] = ()  # find --guard: the finalist's change on each guard's held-out examples
    guards_kept: bool = True  # with guards: a candidate kept them on discovery (else the set is the best trade)
    shrink: Shrink | None = None  # find --shrink: this is the grown set; its record (the test against the primary)
    improving: Verdict | None = None  # with shrink: the primary set's held-out verdict (better than the original)
    shrink_claimed: bool = False  # with shrink: the claim held (the primary confirmed, the grown set non-inferior)

    @property
    def guards_held(self) -> bool:
        """No guards, or every guard held (the primary set's claim: ``headprune.search.guards``)."""
        return not self.guards or (self.guards_kept and all(g.held for g in self.guards))

    @property
    def confirmed(self) -> bool:
        """The claim held: the task's gain confirmed and, with guards, every guard non-inferior."""
        return self.verdict.confirmed and self.guards_held


@dataclass(frozen=True)
class ExportRecord:
    source: SourceInfo
    removed_heads: tuple[str, ...]
    layout: str  # "sliced" or "dense"
    format: str  # a registered export format's name (headprune.exporter.formats)
    ablation: str
    encoder: bool
    layers: tuple[LayerPlan, ...]  # sliced layout only
    parameters: Counts
    bytes: Counts
    verification: Verification
    model_class: str = ""  # the class with its task head (BertForMaskedLM), named in config.json architectures
    head: str = "causal-lm"  # causal-lm, masked-lm, sequence-classification, base, ...
    auto_class: str | None = None  # the auto class that loads it (its key in auto_map for sliced exports)
    origin: FindOrigin | None = None
    seconds: float = 0.0
    files: dict[str, str] = field(default_factory=dict)  # path -> sha256 of every other file of the folder
    # What the format itself recorded, as JSON (its class's details_type reads it: GGUF's GgufInfo); {}: nothing.
    format_details: dict[str, Any] = field(default_factory=dict)
    # The checkpoint's own class where transformers lacks it (model_class stood in), and the checkpoint tensors
    # model_class does not use, written through unchanged.
    stands_in_for: str | None = None
    passthrough: tuple[str, ...] = ()
    layout_note: str = ""  # where the format chose the layout: which it wrote and why (ONNX: GenAI's key/value heads)
    # A quantized checkpoint's quantization and how the export wrote it; the checkpoint tensors the class drops by
    # design (multi-token prediction), written through unchanged where ``passthrough`` lists them, else left out.
    quantization: QuantizedExport | None = None
    dropped: tuple[str, ...] = ()
    schema_version: int = SCHEMA_VERSION

    def save(self, folder: Path) -> None:
        from headprune.core.io import atomic_write_json

        atomic_write_json(Path(folder) / RECORD_NAME, to_json(self))


def public_name(spec: str) -> str:
    """A model or task as cards and records name it: a Hub id, built-in name or task spec as given; a local file or
    folder by its own name, never by its path (which says where it lives, on whose machine)."""
    if spec.startswith("lm-eval:"):  # lm-eval:NAME[,NAME...][:options], a NAME may be a YAML file's path
        names, sep, options = spec[len("lm-eval:"):].partition(":")
        return "lm-eval:" + ",".join(public_name(name) for name in names.split(",")) + sep + options
    try:
        path = user_path(spec)
        if path.is_absolute() or spec.startswith((".", "~")) or path.exists():
            return path.resolve().name or spec
    except (OSError, ValueError):
        pass
    return spec


def file_hashes(folder: Path) -> dict[str, str]:
    """sha256 of every file in an export folder except the verification record itself."""
    return {str(path.relative_to(folder)): sha256_file(path)
            for path in sorted(p for p in Path(folder).rglob("*") if p.is_file() and p.name != RECORD_NAME)}


# The weight files a model folder may hold (a source checkpoint, or an export of the built-in formats); an export's
# own are its format's (ExportFormat.weight_suffixes).
EXPORT_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".onnx", ".gguf")


def weight_bytes(path: Path, suffixes: tuple[str, ...] = EXPORT_WEIGHT_SUFFIXES) -> int:
    """Bytes of the weight files (those ending in ``suffixes``) in a model folder, or of one file."""
    path = Path(path)
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.iterdir() if p.suffix in suffixes)


def read_record(folder: Path) -> ExportRecord:
    """The export record of ``folder`` (records written by earlier versions too).

    Raises:
        ResultFileError: not a headprune export, or an unreadable record.
    """
    path = Path(folder) / RECORD_NAME
    if not path.is_file():
        raise ResultFileError(f"{folder} is not a headprune export (no {RECORD_NAME})")
    try:
        return from_json(ExportRecord, upgrade(json.loads(path.read_text(encoding="utf-8"))))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, ValueError,
            AttributeError) as error:
        raise ResultFileError(f"{path} is not a valid export record ({type(error).__name__}: {error})") from error


def verify_record(folder: Path) -> ExportRecord:
    """Re-check an export folder: its record exists and every file still has the recorded hash.

    Raises:
        ResultFileError: not a headprune export, or edited after export (naming the file).
    """
    folder = Path(folder)
    record = read_record(folder)
    actual = file_hashes(folder)
    for name in sorted(set(record.files) | set(actual)):
        if record.files.get(name) != actual.get(name):
            state = "added" if name not in record.files else "missing" if name not in actual else "changed"
            raise ResultFileError(f"{folder}: {name} was {state} after export; re-run headprune export")
    return record


def upgrade(data: dict) -> dict:
    """A record's JSON of any schema version in the current layout, one version's step after another.

    Raises:
        KeyError, TypeError, AttributeError: not an export record's shape.
    """
    if data.get("headprune_export") == 1:
        data = _upgrade_v1(data)
    while data.get("schema_version", SCHEMA_VERSION) < SCHEMA_VERSION:
        data = _UPGRADES[data["schema_version"]](data)
    return data


def _upgrade_v1(data: dict) -> dict:
    """A record written before typed records (``"headprune_export": 1``) in the layout of version 2."""
    check = data["verification"]
    task = check["task"]
    verdict = data.get("find_verdict")
    return {
        "source": data["source"], "removed_heads": data["removed_heads"], "layout": data["layout"],
        "format": data["format"], "ablation": data["ablation"], "encoder": data["encoder"],
        "head": "base" if data["encoder"] else "causal-lm",
        "auto_class": "AutoModel" if data["encoder"] else "AutoModelForCausalLM",
        "layers": [{"layer": i, **layer} for i, layer in enumerate(data.get("layers", []))],
        "parameters": data["parameters"], "bytes": data["bytes"],
        "verification": {
            "logits": {"max_abs_diff": check["max_abs_logit_diff"], "max_abs_logit": check["max_abs_logit"],
                       "tolerance": check["tolerance"], "allowed": check["allowed_diff"]},
            "task": {**task, "metric": "mean_nll" if data.get("task_kind") == "text" else "accuracy"}},
        "origin": None if not verdict else {
            "task": data.get("find_task") or "task", "rank": 1,
            "verdict": {**{k: verdict[k] for k in ("n", "accuracy_before", "accuracy_after", "rescued", "damaged",
                                                    "p_value", "alpha")}}},
        "seconds": data.get("seconds", 0.0), "files": data["files"], "schema_version": 2,
    }


def _upgrade_v2(data: dict) -> dict:
    """Version 2 to 3: the runtime checks named the type of the file run ``gguf_type`` (an ONNX one too); now
    ``file_type``."""
    gguf = data.get("gguf") or {}
    checks = [data["verification"].get("runtime"), gguf.get("runtime"), gguf.get("typed_runtime")]
    for check in checks:
        if check is not None and "gguf_type" in check:
            check["file_type"] = check.pop("gguf_type")
    return {**data, "schema_version": 3}


def _upgrade_v3(data: dict) -> dict:
    """Version 3 to 4: GGUF's details were the field ``gguf`` (null for other formats); now every format's
    details are ``format_details`` (``{}``: none)."""
    data = dict(data)
    gguf = data.pop("gguf", None)
    return {**data, "format_details": gguf or {}, "schema_version": 4}


def _upgrade_v4(data: dict) -> dict:
    """Version 4 to 5: the find verdict may carry its share of alpha and the proposal's test (``share``,
    ``gate``), which an older headprune would ignore and so misread; a version 4 verdict has neither (share 1)."""
    return {**data, "schema_version": 5}


def _upgrade_v5(data: dict) -> dict:
    """Version 5 to 6: the find verdict may be confirmed by the proposal's fixed sequence (``steps``), which an
    older headprune would ignore, judging the set by its own test; a version 5 verdict has no steps."""
    return {**data, "schema_version": 6}


_UPGRADES = {2: _upgrade_v2, 3: _upgrade_v3, 4: _upgrade_v4, 5: _upgrade_v5}  # schema version -> the step to the next one
