"""ONNX: one graph with the model's head output, run in ONNX Runtime; language models of the families ONNX
Runtime GenAI runs are written as a decoder with a key/value cache and decoded in GenAI itself.

The graphs are written by :mod:`headprune.exporter.onnx.export`; this class chooses which, checks what the
format cannot hold before anything is built, and says how the verification runs the result.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from headprune.errors import UnsupportedModelError
from headprune.exporter.formats.base import ExportFormat, Job, Written, refuse_unless_float32, register

if TYPE_CHECKING:  # pragma: no cover
    from headprune.exporter.export_record import ExportRecord
    from headprune.loading.models import LoadedModel

log = logging.getLogger("headprune")

# Float32 onnxruntime against torch: kernels that sum in another order (measured 1e-7 to 3e-7 on the tiny models,
# 1.35e-5 on SmolLM2-135M with 67 heads removed); see pipeline's note on the tolerances.
ONNX_TOLERANCE = 5e-5
FLOAT32_ONLY = "ONNX export runs in float32; give dtype float32"


@dataclass(frozen=True)
class GenaiCache:
    """An ONNX decoder's key/value cache in ONNX Runtime GenAI at a 4k context against the original's (the record's
    ``format_details``). GenAI gives each layer a float32 buffer of its own key/value heads (what the sliced layout
    writes only where the installed GenAI runs per-layer counts: ``layout_for``), keys and values alike."""

    context: int
    kv_bytes: int
    original_kv_bytes: int


def genai_cache(job: Job) -> GenaiCache:
    """The cache the written decoder gets in GenAI, and the original's, at ``gguf.size.CONTEXT`` tokens."""
    from headprune.exporter.gguf.size import CONTEXT, cache_bytes

    grid = job.lm.grid
    kept = [len(p.kv_heads) for p in job.plans] if job.layout == "sliced" else None
    return GenaiCache(CONTEXT, cache_bytes(grid.cache_width(kept), item=4), cache_bytes(grid.cache_width(), item=4))


def _generates(lm: LoadedModel) -> bool:
    from headprune.exporter.onnx.export import generates

    return generates(lm.model.config.model_type, lm.task_head)


@register
class Onnx(ExportFormat):
    name = "onnx"
    title = "ONNX"
    weight_suffixes = (".onnx",)
    extra = "onnx"
    tolerance = ONNX_TOLERANCE
    details_type = GenaiCache  # a decoder for GenAI: its key/value cache against the original's

    def check_options(self) -> None:
        super().check_options()
        refuse_unless_float32(self.options.dtype, FLOAT32_ONLY)

    def check_model(self, lm: LoadedModel) -> None:
        from headprune.exporter.onnx.export import onnx_output
        from headprune.loading.adapters import FAMILIES

        super().check_model(lm)
        model_type = lm.model.config.model_type
        family = FAMILIES.get(model_type)
        if family is not None and family.onnx_refused:  # (a Gated DeltaNet's scan, unrolled for one length)
            raise UnsupportedModelError(f"{lm.name} ({model_type}) cannot be exported as ONNX: {family.onnx_refused}; "
                                        "export it as safetensors, or as gguf where docs/models.md lists it")
        self.output = onnx_output(lm.task_head)  # refuses heads whose outputs are not one tensor
        refuse_unless_float32(lm.dtype, FLOAT32_ONLY)
        if lm.adapter.text_config:  # a vision-language model: the graph is traced from text inputs alone
            log.warning("export: the ONNX graph of this vision-language model (%s) is its language model on text: "
                        "the vision tower is not in it (--format safetensors keeps it)", lm.model.config.model_type)

    def layout_for(self, lm: LoadedModel, plans: Sequence[Any]) -> str:
        """The sliced layout where layers keep different key/value head counts only when the installed ONNX Runtime
        GenAI runs them (:func:`onnx.genai_probe.per_layer_kv_heads`, which runs it), and where recurrent layers
        with heads (Gated DeltaNets) keep different counts never (GenAI 0.18 gives every recurrent layer's states
        the first one's shape: measured, it refuses another); else the dense one, and why."""
        from headprune.heads import ATTENTION

        if self.options.layout != "sliced" or not _generates(lm):
            return self.options.layout
        kept = [(layer.kind, len(p.q_heads), len(p.kv_heads)) for p, layer in zip(plans, lm.grid.layers, strict=True)
                if layer.heads and layer.kv_source is None]  # (a layer without heads, such as a convolution layer,
        # or reading another's, such as Gemma 4's sharing layers, keeps no keys and values of its own)
        counts = [kv for kind, _, kv in kept if kind == ATTENTION]
        recurrent = sorted({(kind, heads, kv) for kind, heads, kv in kept if kind != ATTENTION})
        runs, why, said = True, "", ""
        if len(recurrent) > 1:
            runs, why = False, "ONNX Runtime GenAI gives every recurrent layer's states one shape"
            said = f"recurrent layers would keep {[heads for _, heads, _ in recurrent]} heads"
        elif len(set(counts)) > 1:
            runs, why = self._per_layer_counts(lm)
            said = f"layers would keep {counts} key/value heads"
        if runs:
            self.layout_note = f"sliced with per-layer key/value heads {counts}: {why}" if why else ""
            return "sliced"
        self.layout_note = f"dense, not the sliced layout asked for, whose {said}: {why}"
        log.warning("export: writing the %s", self.layout_note)
        return "dense"

    @staticmethod
    def _per_layer_counts(lm: LoadedModel) -> tuple[bool, str]:
        """Whether GenAI runs this model's type with per-layer key/value head counts, and how that is known."""
        from headprune.exporter.onnx.export import COMBINED_CACHE, CONV_CACHE, GENAI_TYPES
        from headprune.exporter.onnx.genai_probe import per_layer_kv_heads

        kind = GENAI_TYPES[lm.model.config.model_type]
        if kind in COMBINED_CACHE:
            return False, f"ONNX Runtime GenAI keeps a {kind} model's cache as one tensor a layer, with one head " \
                          "count for every layer"
        if kind in CONV_CACHE:
            return False, f"ONNX Runtime GenAI keeps a {kind} model's keys and values beside its convolution " \
                          "states with one head count for every layer"
        return per_layer_kv_heads()

    def write(self, job: Job, staging: Path, scratch: Path) -> Written:
        from headprune.exporter.onnx import export as onnx_export
        from headprune.exporter.runtime_check import eos_ids
        from headprune.exporter.runtimes import OnnxModel
        from headprune.loading.models import LoadedModel
        from headprune.scoring import scorer_for

        lm, artifact = job.lm, job.artifact
        lm.tokenizer.save_pretrained(staging)
        if _generates(lm):  # a decoder with a cache, for ONNX Runtime GenAI
            onnx_export.export_decoder(artifact, staging, eos=eos_ids(lm), pad=_pad_id(lm),
                                       bos=lm.tokenizer.bos_token_id)
        else:
            onnx_export.export_onnx(artifact, staging / onnx_export.ONNX_NAME, output=self.output,
                                    positions=not lm.is_encoder)
        artifact.config.save_pretrained(staging)
        runner = OnnxModel(staging / onnx_export.ONNX_NAME, output=self.output, positions=not lm.is_encoder,
                           config=artifact.config)
        exported = LoadedModel(str(staging), staging, runner, lm.tokenizer, lm.adapter, lm.grid,  # type: ignore
                               lm.model_class)
        measured_on = "onnxruntime"
        scorer = scorer_for(job.task, lm)
        # Decoding needs generate(), and an encoder's choice task its hidden states; the ONNX graph gives the
        # sliced model's logits (checked against the masked original's all the same).
        why = ("decoding" if scorer.generates else "the task reads hidden states, the graph gives logits"
               if scorer.readout == "pooled" and self.output != "last_hidden_state" else "")
        if why:
            exported = LoadedModel("sliced", staging, artifact, lm.tokenizer, lm.adapter, lm.grid, lm.model_class)
            measured_on = f"the torch model the ONNX graph was exported from ({why})"
        return Written(exported, runner, artifact, measured_on)  # the graph's weights are the artifact's

    def runtime_check(self, job: Job, written: Written) -> tuple[Any, Any]:
        """ONNX Runtime GenAI itself loads the folder and decodes task prompts greedily like the masked original.
        Records why when onnxruntime-genai is not installed.

        Raises:
            VerificationError: a mismatch.
        """
        from headprune.exporter.export_record import RuntimeCheck
        from headprune.exporter.onnx.export import genai_version
        from headprune.exporter.runtime_check import compare_greedy, gate, task_texts
        from headprune.exporter.runtimes import GenaiRunner

        if not _generates(job.lm):
            return None, None
        cache = genai_cache(job)
        version, reason = genai_version()
        if version is None:
            log.warning("export: the ONNX model was not run in ONNX Runtime GenAI: %s", reason)
            return RuntimeCheck("", False, reason), cache
        lm = job.lm
        prompts = [list(lm.tokenizer(text)["input_ids"]) for text in task_texts(job.task)[:job.greedy_prompts]]
        check = compare_greedy(lm, job.removed, GenaiRunner(written.exported.folder), prompts, steps=job.greedy_steps,
                               mode=job.ablation, means=job.means, tolerance=job.tolerance,
                               runtime=f"ONNX Runtime GenAI {version}", file_type="f32", gated=True, texts=[])
        gate(check, job.tolerance, "ONNX Runtime GenAI")
        return check, cache

    @classmethod
    def summary_lines(cls, record: ExportRecord) -> list[str]:
        from headprune.exporter.gguf.size import against

        cache = cls.details(record)
        return [] if cache is None else [f"size in ONNX Runtime GenAI: key/value cache at a {cache.context:,}-token "
                                         f"context (float32) {against(cache.kv_bytes, cache.original_kv_bytes)}"]

    @classmethod
    def card_lines(cls, record: ExportRecord) -> list[str]:
        from headprune.exporter.gguf.size import against

        cache = cls.details(record)
        return [] if cache is None else [
            f"- Size where it runs (ONNX Runtime GenAI): its key/value cache at a {cache.context:,}-token context "
            f"(float32, a buffer per layer) is {against(cache.kv_bytes, cache.original_kv_bytes)}; the weight "
            "bytes are in the table above."]

    @classmethod
    def load_hint(cls, record: ExportRecord, out: str) -> str:
        return f'onnxruntime.InferenceSession("{out}/model.onnx")'

    @classmethod
    def card_usage(cls, record: ExportRecord) -> list[str]:
        output = "last_hidden_state" if record.head == "base" else "logits"
        return ["```python", "import onnxruntime", 'session = onnxruntime.InferenceSession("model.onnx")',
                "# inputs: input_ids, attention_mask" + ("" if record.encoder else ", position_ids (int64)")
                + f"; output: {output}", "```"]


def _pad_id(lm: LoadedModel) -> int:
    from headprune.exporter.runtime_check import eos_ids

    tokenizer = lm.tokenizer
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (eos_ids(lm) or (0,))[0]
