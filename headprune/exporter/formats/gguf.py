"""GGUF: one file for llama.cpp (dense in each family's stock llama.cpp architecture, sliced as ``deci`` where that
graph computes the family: :mod:`headprune.exporter.gguf.families`), run in llama.cpp itself before it is written.

The file is written and read back by :mod:`headprune.exporter.gguf.writer` (K-quants by llama.cpp's own quantizer,
:mod:`headprune.exporter.gguf.quant`). The verification runs a float32 file (the written one, or a float32 copy when
the written type is lossy) in llama.cpp; a lossy file is then gated on that float32 file with a tolerance derived
from its type, and the task is run on it and on the original in the same type
(:mod:`headprune.exporter.gguf.quant_check`). Without llama.cpp it runs the torch model the file was written from and
the record says the file was not run (K-quants, which llama.cpp makes, are refused). An installed llama.cpp
that headprune cannot run (an xllamacpp release it has no declarations for) is refused before anything is done.
The record's ``format_details`` is a :class:`GgufInfo`: what the CLI prints and the card says of the file.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from headprune.core.choices import GGUF_TYPES
from headprune.exporter.export_record import ExportRecord, RuntimeCheck
from headprune.exporter.formats.base import (ExportFormat, FormatOption, Job, Written, refuse_unless_float32,
                                             register)
from headprune.exporter.gguf.quant_check import QuantCheck
from headprune.exporter.gguf.size import DeploySize

if TYPE_CHECKING:  # pragma: no cover
    from headprune.loading.models import LoadedModel
    from headprune.tasks import Task

log = logging.getLogger("headprune")

# Float32 llama.cpp against torch: 1e-7 to 3e-7 on the tiny models, 1.7e-6 on SmolLM2-135M sliced (8 heads
# removed, logits up to 40), 2.2e-5 at its greedy steps with 67 heads removed on an AVX-512 Xeon (llama.cpp's kernels
# are chosen by the CPU); a 0.1% error in one weight does 1e-4 to 5e-4 (see pipeline's note on the tolerances), so
# ONNX's 5e-5 serves here too: twice the largest runtime difference seen, half the smallest error.
GGUF_TOLERANCE = 5e-5
FLOAT32_ONLY = "GGUF export is verified in float32; give dtype float32 (gguf_type sets the file's own type)"
# Task examples llama.cpp runs side by side in the checks, on their shared prompt prefix (llama_cpp.rows): on
# SmolLM2-135M a decoding step of 16 rows costs about what one of a single row does.
TASK_ROWS = 16




@dataclass(frozen=True)
class GgufInfo:
    """What a GGUF export wrote and how the file itself was checked (its record's ``format_details``)."""

    architecture: str  # the family's llama.cpp architecture (dense: llama, qwen2, phi3, ...) or deci (sliced, where the
    # family's own graph does not read per-layer head counts)
    gguf_type: str  # f32, f16, bf16, q8_0
    file: str
    head_count: tuple[int, ...]  # per layer
    head_count_kv: tuple[int, ...]
    tokenizer: str
    chat_template: bool
    tensors_read_back: int  # tensors read back from the file and compared with what was written
    read_back_max_abs_diff: float  # 0 for float32; the rounding of the stored type otherwise
    runtime: RuntimeCheck  # the float32 file (the written one, or a verification copy for other types)
    typed_runtime: RuntimeCheck | None = None  # the written file when it is not float32
    notes: tuple[str, ...] = ()
    quantized: QuantCheck | None = None  # a lossy file against its float32 one, and the task on it and the original
    size: DeploySize | None = None  # the file and llama.cpp's key/value cache against the original's
    pooling: str = ""  # an encoder's file: the pooling it carries (mean), which the runtime check ran; "": a decoder


@register
class Gguf(ExportFormat):
    name = "gguf"
    title = "GGUF"
    help = "for llama.cpp (the families of docs/models.md); run in llama.cpp before writing."
    extra = "gguf"
    tolerance = GGUF_TOLERANCE
    kv_map = False  # llama.cpp repeats key/value heads evenly: no query-to-key/value map
    takes = (FormatOption("gguf_type", GGUF_TYPES, "f32", "With --format gguf: the file's tensor type; K-quants "
                          "(q4_k_m, q5_k_m, q6_k) are made by llama.cpp's quantizer. A float32 copy is verified in "
                          "llama.cpp, and a lossy file is gated on it and has the task run on it and on the original "
                          "in the same type."),)
    details_type = GgufInfo
    weight_suffixes = (".gguf",)
    encoder = False  # the model is a bare encoder (set by check_model)

    def check_options(self) -> None:
        from headprune.exporter.gguf.writer import llama_cpp_version
        from headprune.exporter.gguf.families import check_type
        from headprune.exporter.gguf.quant import K_QUANTS, quantizer_library

        super().check_options()
        check_type(self.chosen["gguf_type"])
        refuse_unless_float32(self.options.dtype, FLOAT32_ONLY)
        llama_cpp_version()  # an installed llama.cpp headprune cannot run (another xllamacpp release): exit 2 now
        if self.chosen["gguf_type"] in K_QUANTS:
            quantizer_library()  # only llama.cpp makes K-quants: without its quantizer, exit 2 now

    def check_model(self, lm: LoadedModel) -> None:
        from headprune.exporter.gguf.families import check_supported, family_of
        from headprune.exporter.gguf.tokenizer import check_wordpiece

        super().check_model(lm)
        self.arch = check_supported(lm, self.options.layout, self.chosen["gguf_type"])
        self.encoder = family_of(lm.model.config).encoder  # embeddings (llama_cpp.encoder), not logits
        backend = getattr(lm.tokenizer, "backend_tokenizer", None)
        if backend is not None:  # a tokenizer llama.cpp would split otherwise: refused before anything is built
            check_wordpiece(json.loads(backend.to_str()))
        self.tolerance = family_of(lm.model.config).tolerance or self.tolerance  # (Gemma: llama.cpp's GELU table)
        refuse_unless_float32(lm.dtype, FLOAT32_ONLY)

    def write(self, job: Job, staging: Path, scratch: Path) -> Written:
        """``model.gguf`` (it carries its tokenizer), and llama.cpp on its float32 file when llama.cpp is here."""
        from headprune.exporter.gguf import writer as gguf_export
        from headprune.loading.models import LoadedModel

        lm, artifact = job.lm, job.artifact
        plans = job.plans if self.options.layout == "sliced" else None  # (a dense file keeps every head in shape)
        files = gguf_export.write_files(lm, artifact, self.arch, plans, staging, scratch, self.chosen["gguf_type"])
        version, reason = gguf_export.llama_cpp_version()
        self.runtime, self.reason = version or "", reason
        if version is None:
            log.warning("export: the GGUF file was not run in llama.cpp: %s", reason)
            exported = LoadedModel("gguf-source", staging, artifact, lm.tokenizer, lm.adapter, lm.grid,
                                   lm.model_class)
            return Written(exported, artifact, artifact,
                           "the torch model the GGUF file was written from (llama.cpp was not available)",
                           files=files)
        runner = _runner(lm, files.f32_path, _context_for(lm, job.task, job.greedy_steps), self.encoder)
        exported = LoadedModel("gguf", staging, runner, lm.tokenizer, lm.adapter, lm.grid,  # type: ignore
                               lm.model_class)
        return Written(exported, runner, artifact, f"{version}, float32 file", [runner], files=files)

    def runtime_check(self, job: Job, written: Written) -> tuple[Any, Any]:
        """The runtime gate on the float32 file (greedy tokens and their logits, tokenizer), and the written
        type's agreement reported beside it when that type is lossy.

        Raises:
            VerificationError: the float32 file disagrees.
        """
        from headprune.exporter.gguf import writer as gguf_export
        from headprune.exporter.runtime_check import compare_greedy, gate, task_texts
        from headprune.exporter.runtimes import LlamaCppModel

        lm, files, gguf_type = job.lm, written.files, self.chosen["gguf_type"]
        if self.encoder and written.closers:
            return None, self._encoder_check(job, written)
        texts = task_texts(job.task)[:job.greedy_prompts]
        prompts = [list(lm.tokenizer(text)["input_ids"]) for text in texts]
        typed = quantized = None
        if not written.closers:  # llama.cpp was not available
            check = gguf_export.not_run(self.reason, "f32")
            typed = None if gguf_type == "f32" else gguf_export.not_run(self.reason, gguf_type)
        else:
            runner = written.runner
            options = dict(steps=job.greedy_steps, mode=job.ablation, means=job.means, tolerance=job.tolerance,
                           runtime=self.runtime, texts=texts, reference={})  # the original decoded once for both
            check = compare_greedy(lm, job.removed, runner, prompts, file_type="f32", gated=True, **options)
            gate(check, job.tolerance, "llama.cpp")
            if gguf_type != "f32":
                typed_runner = LlamaCppModel(files.path, n_ctx=runner.n_ctx, eos=runner.eos, rows=TASK_ROWS)
                written.closers.append(typed_runner)
                typed = compare_greedy(lm, job.removed, typed_runner, prompts, file_type=gguf_type, gated=False,
                                       **options)
                quantized = self._quantized(job, written, typed_runner)
        info = GgufInfo(files.plan.arch, gguf_type, files.path.name, files.plan.head_count, files.plan.head_count_kv,
                        files.tokenizer, files.chat_template, files.read_back, files.read_back_diff, check, typed,
                        files.notes, quantized, _size(job, files))
        return None, info

    def _encoder_check(self, job: Job, written: Written) -> GgufInfo:
        """An encoder's files (:func:`llama_cpp.encoder.check_files`); a lossy one gated on the float32 one as a
        decoder's is (its hidden states, not logits), with the task run on it and on the original.

        Raises:
            VerificationError: the float32 file disagrees, or the lossy one beyond its rounding.
        """
        from headprune.exporter.llama_cpp.encoder import check_files

        files, gguf_type, runner = written.files, self.chosen["gguf_type"], written.runner
        check, typed = check_files(job, files, runner.n_ctx, gguf_type=gguf_type, runtime=self.runtime)
        quantized = None
        if gguf_type != "f32":
            written.closers.append(_runner(job.lm, files.path, runner.n_ctx, True))
            quantized = self._quantized(job, written, written.closers[-1])
        return GgufInfo(files.plan.arch, gguf_type, files.path.name, files.plan.head_count, files.plan.head_count_kv,
                        files.tokenizer, files.chat_template, files.read_back, files.read_back_diff, check, typed,
                        files.notes, quantized, None, pooling="mean")

    def _quantized(self, job: Job, written: Written, typed_runner: Any) -> QuantCheck:
        """The lossy file gated on the float32 one, and the task on it and on the original in the same type.

        Raises:
            VerificationError: the lossy file's logits differ by more than its type explains.
        """
        from headprune.exporter.gguf.quant_check import check_quantized
        from headprune.exporter.runtimes import LlamaCppModel

        runner = written.runner
        original = _runner(job.lm, written.files.original_path, runner.n_ctx, self.encoder)
        written.closers.append(original)
        return check_quantized(job, written.files, runner, typed_runner, original, gguf_type=self.chosen["gguf_type"])

    @classmethod
    def summary_lines(cls, record: ExportRecord) -> list[str]:
        from headprune.exporter.gguf.quant_check import summary

        info = cls.details(record)
        if info is None:
            return []
        check, typed = info.runtime, info.typed_runtime
        if info.pooling and check.done:  # an encoder's embeddings
            from headprune.exporter.llama_cpp.encoder import pooled_lines

            return pooled_lines(info) + (summary(info.quantized) if info.quantized else [])
        lines = [f"note: the GGUF file was not run in llama.cpp: {check.reason}" if not check.done else
                 f"llama.cpp ({info.architecture}, float32): {check.identical} of {check.prompts} prompts decode "
                 f"greedily to the masked original's tokens ({check.ties} near-ties, {check.tokens} tokens); "
                 f"tokenizer agrees on {check.tokenizer_agree} of {check.tokenizer_texts} texts"]
        if typed is not None and typed.done:
            lines.append(f"{info.gguf_type} file (lossy, reported, not gated): {typed.identical} of {typed.prompts} "
                         f"prompts give the same greedy tokens ({typed.mismatches} diverge)")
        if info.quantized is not None:
            lines += summary(info.quantized)
        if info.size is not None:
            from headprune.exporter.gguf.size import summary_line

            lines.append(summary_line(info.size, info.gguf_type))
        return lines

    @classmethod
    def load_hint(cls, record: ExportRecord, out: str) -> str:
        info = cls.details(record)
        checked = info.runtime.runtime if info is not None else ""
        file = info.file if info is not None else "model.gguf"
        if "llama-cpp-python" in checked:
            embedding = ", embedding=True" if info is not None and info.pooling else ""
            return f'llama_cpp.Llama("{out}/{file}"{embedding}), as checked in {checked}'
        if info is not None and info.pooling:  # an encoder: an embedding model
            return f"llama-embedding or llama-server --embeddings -m {out}/{file}" + (f"; checked in {checked}"
                                                                                      if checked else "")
        return f"llama-cli or llama-server -m {out}/{file}, or xllamacpp.Server" + (
            f"; checked in {checked}" if checked else "; not run in llama.cpp here")

    @classmethod
    def card_lines(cls, record: ExportRecord) -> list[str]:
        info = cls.details(record)
        if info is None:
            return []
        lines = [f"- GGUF `{info.file}` ({info.architecture} architecture, {info.gguf_type}; tokenizer "
                 f"{info.tokenizer}{', chat template' if info.chat_template else ''}): {info.tensors_read_back} "
                 "tensors read back and compared with the pruned model's (largest difference "
                 f"{info.read_back_max_abs_diff:.2e})."]
        for check in (info.runtime, info.typed_runtime):
            if check is None:
                continue
            if not check.done:
                lines.append(f"- Not run in llama.cpp ({check.file_type}): {check.reason}.")
                continue
            lossy = "" if check.gated else " (lossy: reported, not gated)"
            if info.pooling:  # an encoder's embeddings
                from headprune.exporter.llama_cpp.encoder import pooled_card_line

                lines.append(pooled_card_line(check, info.pooling, lossy))
                continue
            lines.append(f"- In {check.runtime}, {check.file_type} file{lossy}: {check.identical} of {check.prompts} "
                         f"task prompts decode greedily to the masked original's tokens ({check.ties} near-ties, "
                         f"{check.mismatches} mismatches; {check.tokens} tokens, largest logit difference "
                         f"{check.max_abs_logit_diff:.2e}); llama.cpp's tokenizer agrees on {check.tokenizer_agree} "
                         f"of {check.tokenizer_texts} task texts.")
        if info.quantized is not None:
            from headprune.exporter.gguf.quant_check import card_lines

            lines += card_lines(info.quantized)
        if info.size is not None:
            from headprune.exporter.gguf.size import card_line

            lines.append(card_line(info.size, info.gguf_type))
        return lines + [f"- Note: {note}." for note in info.notes]

    @classmethod
    def card_usage(cls, record: ExportRecord) -> list[str]:
        info = cls.details(record)
        if info is None:
            return usage("", "model.gguf")
        lines = usage(info.runtime.runtime, info.file)
        if info.pooling:  # an encoder: llama.cpp's embedding tools, which pool as the file says
            lines = [f"Checked in {info.runtime.runtime}: an embedding model ({info.pooling} pooling, as headprune "
                     "scores it):", "", "```bash", f"llama-embedding -m {info.file} -p \"the film is a delight\"",
                     f"llama-server --embeddings -m {info.file}", "```"]
        if record.layout == "sliced":  # deci, or a family's own graph that reads them (gemma4, granitehybrid, nemotron_h)
            arch = info.architecture
            lines += ["", f"Layers have different head counts: the file uses llama.cpp's `{arch}` architecture, which "
                      f"reads them per layer (`{arch}.attention.head_count`, `{arch}.attention.head_count_kv`)."]
        return lines

    @classmethod
    def credential_place(cls, path: Path, offset: int) -> str | None:
        from headprune.exporter.gguf.read import place_at

        return place_at(path, offset) if path.suffix == ".gguf" else None


def _size(job: Job, files: Any) -> DeploySize:
    """The written file and llama.cpp's key/value cache against the original's (written in the same type)."""
    from headprune.exporter.export_record import weight_bytes
    from headprune.exporter.gguf.writer import gguf_plan
    from headprune.exporter.gguf.size import deploy_size

    stock = gguf_plan(job.lm, "llama", None)  # the original's head counts (the architecture name aside)
    original = weight_bytes(files.original_path) if files.original_path is not None else 0
    layers = job.lm.grid.layers  # each layer's head size; a layer reading another's keys and values caches none
    plan = files.plan  # (MLA: one latent key/value head a layer, of the latent's length, no values apart)
    sizes = [plan.key_length] * len(layers) if plan.key_length else [layer.head_dim for layer in layers]

    def cached(counts: Any) -> list[int]:
        return [n if layer.kv_source is None else 0 for n, layer in zip(counts, layers, strict=True)]

    return deploy_size(weight_bytes(files.path), original, cached(plan.head_count_kv), cached(stock.head_count_kv),
                       sizes, values=plan.values_cached)


def _runner(lm: LoadedModel, path: Path, n_ctx: int, encoder: bool) -> Any:
    """llama.cpp on ``path`` as the verification calls a model: an encoder's hidden states or a decoder's logits."""
    from headprune.exporter.llama_cpp.encoder import LlamaCppEncoder
    from headprune.exporter.runtime_check import eos_ids
    from headprune.exporter.runtimes import LlamaCppModel

    if encoder:
        return LlamaCppEncoder(path, n_ctx=n_ctx)
    return LlamaCppModel(path, n_ctx=n_ctx, eos=eos_ids(lm), rows=TASK_ROWS)


def usage(runtime: str, file: str) -> list[str]:
    """How to run a GGUF export in the runtime headprune checked it in (``runtime`` as the record names it; empty:
    none was), as markdown: llama-cpp-python's ``Llama``, or llama.cpp's own programs and xllamacpp's server."""
    if "llama-cpp-python" in runtime:
        return [f"Checked in {runtime}:", "", "```python", "from llama_cpp import Llama",
                f'llm = Llama("{file}")', 'print(llm("12 + 7 =", max_tokens=8))', "```"]
    build = runtime.split()[1] if runtime.startswith("llama.cpp ") else ""
    lines = [f"Checked in {runtime}: llama.cpp's own programs of that build or later, or xllamacpp's server:" if build
             else "Not run in llama.cpp when it was exported; llama.cpp's own programs:", "", "```bash",
             f"llama-cli -m {file}      # or: llama-server -m {file}", "```"]
    if build:
        lines += ["", "```python", "import xllamacpp", "", "params = xllamacpp.CommonParams()",
                  f'params.model.path = "{file}"', "server = xllamacpp.Server(params)",
                  'print(server.handle_completions({"prompt": "12 + 7 =", "n_predict": 8, "temperature": 0}))',
                  "```"]
    return lines


def _context_for(lm: LoadedModel, task: Task, steps: int) -> int:
    """A llama.cpp context that holds the longest verification input plus the greedy tokens."""
    from headprune.evaluation import Evaluator

    from headprune.exporter.gguf.families import family_of

    config = lm.model.config
    family = family_of(config)
    longest = max(ids.shape[1] for ids, _, _ in Evaluator(lm, task, share_prefix=False).reference_batches())
    need = longest + (0 if family.encoder else max(steps, task.max_new_tokens or 0)) + 8
    positions = int(config.max_position_embeddings) - (family.position_offset(config) if family.position_offset
                                                       else 0)  # the file's context (RoBERTa's: without its offset)
    return min(positions, 64 * -(-need // 64))

