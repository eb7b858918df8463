"""GGUF: one file for llama.cpp (Llama-style models: dense as the stock ``llama``/``qwen2`` architecture, sliced
as ``deci``), run in llama.cpp itself before it is written.

The file is written and read back by :mod:`headprune.exporter.gguf_export`. The verification runs a float32
file (the written one, or a float32 copy when the written type is lossy) in llama.cpp; without llama.cpp it
runs the torch model the file was written from and the record says the file was not run. An installed llama.cpp
that headprune cannot run (an xllamacpp release it has no declarations for) is refused before anything is done.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from headprune.exporter.formats.base import ExportFormat, Job, Written, refuse_unless_float32, register
from headprune.loading.models import LoadedModel
from headprune.tasks import Task

log = logging.getLogger("headprune")

# Float32 llama.cpp against torch: 1e-7 to 3e-7 on the tiny models, 1.7e-6 on SmolLM2-135M sliced (8 heads
# removed, logits up to 40); a 0.1% error in one weight does 1e-4 to 5e-4 (see pipeline's note on the tolerances).
GGUF_TOLERANCE = 2e-5
FLOAT32_ONLY = "GGUF export is verified in float32; give dtype float32 (gguf_type sets the file's own type)"


@register
class Gguf(ExportFormat):
    name = "gguf"
    extra = "gguf"
    tolerance = GGUF_TOLERANCE
    kv_map = False  # llama.cpp repeats key/value heads evenly: no query-to-key/value map

    def check_options(self) -> None:
        from headprune.exporter.gguf_export import check_type, llama_cpp_version

        super().check_options()
        check_type(self.options.gguf_type)
        refuse_unless_float32(self.options.dtype, FLOAT32_ONLY)
        llama_cpp_version()  # an installed llama.cpp headprune cannot run (another xllamacpp release): exit 2 now

    def check_model(self, lm: LoadedModel) -> None:
        from headprune.exporter.gguf_export import check_supported

        super().check_model(lm)
        self.arch = check_supported(lm, self.options.layout, self.options.gguf_type)
        refuse_unless_float32(lm.dtype, FLOAT32_ONLY)

    def write(self, job: Job, staging: Path, scratch: Path) -> Written:
        """``model.gguf`` (it carries its tokenizer), and llama.cpp on its float32 file when llama.cpp is here."""
        from headprune.exporter import gguf_export
        from headprune.exporter.runtime_check import eos_ids
        from headprune.exporter.runtimes import LlamaCppModel

        lm, artifact = job.lm, job.artifact
        files = gguf_export.write_files(lm, artifact, self.arch, job.plans, staging, scratch, self.options.gguf_type)
        version, reason = gguf_export.llama_cpp_version()
        self.runtime, self.reason = version or "", reason
        if version is None:
            log.warning("export: the GGUF file was not run in llama.cpp: %s", reason)
            exported = LoadedModel("gguf-source", staging, artifact, lm.tokenizer, lm.adapter, lm.grid,
                                   lm.model_class)
            return Written(exported, artifact, artifact,
                           "the torch model the GGUF file was written from (llama.cpp was not available)",
                           files=files)
        runner = LlamaCppModel(files.f32_path, n_ctx=_context_for(lm, job.task, job.greedy_steps), eos=eos_ids(lm))
        exported = LoadedModel("gguf", staging, runner, lm.tokenizer, lm.adapter, lm.grid,  # type: ignore
                               lm.model_class)
        return Written(exported, runner, artifact, f"{version}, float32 file", [runner], files=files)

    def runtime_check(self, job: Job, written: Written) -> tuple[Any, Any]:
        """The runtime gate on the float32 file (greedy tokens and their logits, tokenizer), and the written
        type's agreement reported beside it when that type is lossy.

        Raises:
            VerificationError: the float32 file disagrees.
        """
        from headprune.exporter import gguf_export
        from headprune.exporter.export_record import GgufInfo
        from headprune.exporter.runtime_check import compare_greedy, gate, task_texts
        from headprune.exporter.runtimes import LlamaCppModel

        lm, files, gguf_type = job.lm, written.files, self.options.gguf_type
        texts = task_texts(job.task)[:job.greedy_prompts]
        prompts = [list(lm.tokenizer(text)["input_ids"]) for text in texts]
        typed = None
        if not written.closers:  # llama.cpp was not available
            check = gguf_export.not_run(self.reason, "f32")
            typed = None if gguf_type == "f32" else gguf_export.not_run(self.reason, gguf_type)
        else:
            runner = written.runner
            options = dict(steps=job.greedy_steps, mode=job.ablation, means=job.means, tolerance=job.tolerance,
                           runtime=self.runtime, texts=texts)
            check = compare_greedy(lm, job.removed, runner, prompts, file_type="f32", gated=True, **options)
            gate(check, job.tolerance, "llama.cpp")
            if gguf_type != "f32":
                typed_runner = LlamaCppModel(files.path, n_ctx=runner.n_ctx, eos=runner.eos)
                written.closers.append(typed_runner)
                typed = compare_greedy(lm, job.removed, typed_runner, prompts, file_type=gguf_type, gated=False,
                                       **options)
        info = GgufInfo(files.plan.arch, gguf_type, files.path.name, files.plan.head_count, files.plan.head_count_kv,
                        files.tokenizer, files.chat_template, files.read_back, files.read_back_diff, check, typed,
                        files.notes)
        return None, info


def _context_for(lm: LoadedModel, task: Task, steps: int) -> int:
    """A llama.cpp context that holds the longest verification input plus the greedy tokens."""
    from headprune.evaluation import Evaluator

    longest = max(ids.shape[1] for ids, _, _ in Evaluator(lm, task, share_prefix=False).reference_batches())
    need = longest + max(steps, task.max_new_tokens or 0) + 8
    return min(int(lm.model.config.max_position_embeddings), 64 * -(-need // 64))

