"""An encoder's GGUF file in llama.cpp (BERT, RoBERTa: :mod:`headprune.exporter.gguf.encoders`): the runner that
answers the calls headprune's evaluator and verifier make of a bare encoder (each real token's last hidden state),
and the runtime check of the file as llama.cpp's embedding tools use it, pooled as the file says.

The verification compares the runner's per-token hidden states with the masked original's at every real token of
the verification inputs, and re-measures the task on them (an encoder's choice task mean-pools them, as
:mod:`headprune.evaluation.evaluator` does). The runtime check then runs the file with the pooling it carries (mean:
what ``llama-embedding`` and ``llama-server --embeddings`` give) on the task's texts (prompts and choices) against the
masked original's mean over each text's tokens, and llama.cpp's tokenizer against the model's on the same texts.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from headprune.errors import VerificationError
from headprune.exporter.llama_cpp.runtime import LlamaCpp

if TYPE_CHECKING:  # pragma: no cover - torch is imported where it is used: the card's lines below need none
    import torch


def _open(path: Path, n_ctx: int, embeddings: str, threads: int | None = None) -> LlamaCpp:
    try:
        return LlamaCpp(path, n_ctx=n_ctx, threads=threads, embeddings=embeddings)
    except ValueError as error:
        raise VerificationError(f"{error}; nothing was written") from error


class LlamaCppEncoder:
    """An encoder's GGUF file in llama.cpp, called as a transformers base model is: ``last_hidden_state``
    ``(B, T, n_embd)`` at every real token of each row (each row run alone, from position 0), zeros at padding.

    Raises:
        VerificationError: llama.cpp refused the file or the context.
    """

    def __init__(self, path: Path, *, n_ctx: int, threads: int | None = None) -> None:
        self.llm = _open(path, n_ctx, "tokens", threads)
        self.n_ctx = n_ctx

    def close(self) -> None:
        self.llm.close()

    def __call__(self, *, input_ids: torch.Tensor, attention_mask: torch.Tensor, **_: object) -> SimpleNamespace:
        import torch

        batch, width = input_ids.shape
        out = torch.zeros(batch, width, self.llm.n_embd)
        for row in range(batch):
            columns = attention_mask[row].cpu().nonzero()[:, 0]  # the row's real tokens
            tokens = input_ids[row].cpu()[columns].tolist()
            if tokens:
                out[row, columns] = torch.from_numpy(self.llm.embed(tokens))
        return SimpleNamespace(last_hidden_state=out)

    def tokenize(self, text: str) -> list[int]:
        return self.llm.tokenize(text)


def encoder_texts(task: Any) -> list[str]:
    """Every text an encoder embeds for the task: each example's prompt (or text) and its choices."""
    texts = []
    for example in task.examples:
        texts += [t for t in (example.prompt or example.text, *(example.choices or ())) if t]
    return list(dict.fromkeys(texts))


def compare_pooled(lm: Any, heads: Any, path: Path, texts: list[str], *, n_ctx: int, mode: str,
                   means: torch.Tensor | None, tolerance: float, runtime: str, file_type: str, gated: bool) -> Any:
    """The file's own pooled embedding of each text in llama.cpp against the masked original's mean of that text's
    last hidden states, and llama.cpp's tokens of each text against the model's tokenizer's: a ``RuntimeCheck``
    whose prompts are the texts, ``identical`` those within ``tolerance`` x max(1, largest |value|), ``mismatches``
    the others (what :func:`runtime_check.gate` refuses).

    Raises:
        VerificationError: the file pools otherwise than by the mean headprune scores with.
    """
    import torch

    from headprune.exporter.export_record import RuntimeCheck
    from headprune.surgery.ablation import ablated

    llm = _open(path, n_ctx, "pooled")
    diffs, tokens, agree, scale = [], 0, 0, 0.0
    try:
        if llm.pooling != "mean":
            raise VerificationError(f"llama.cpp pools {path.name}'s embeddings by {llm.pooling}, not by the mean "
                                    "headprune scores with; nothing was written")
        for text in texts:
            ids = list(lm.tokenizer(text)["input_ids"])
            with ablated(lm, heads, mode=mode, means=means), torch.inference_mode():  # type: ignore[arg-type]
                hidden = lm.model(input_ids=torch.tensor([ids], device=lm.device)).last_hidden_state[0]
            want = hidden.float().mean(0).cpu()  # (D,): headprune's pooling, the mean over the text's tokens
            got = torch.from_numpy(llm.embed(ids)[0])
            diffs.append(float((got - want).abs().max()))
            scale = max(scale, float(want.abs().max()))
            tokens += len(ids)
            agree += llm.tokenize(text) == ids
    finally:
        llm.close()
    allowed = tolerance * max(1.0, scale)
    within = sum(d <= allowed for d in diffs)
    return RuntimeCheck(runtime, True, "", file_type, gated, len(texts), tokens, within, 0, len(texts) - within,
                        max(diffs, default=0.0), scale, len(texts), agree)


def check_files(job: Any, files: Any, n_ctx: int, *, gguf_type: str, runtime: str) -> tuple[Any, Any]:
    """The runtime check of an export's encoder files (``files``: its ``GgufFiles``): the float32 one with its own
    pooling on the task's texts, gated (:func:`runtime_check.gate`), and a lossy one beside it, reported.

    Raises:
        VerificationError: the float32 file disagrees with the masked original, or pools otherwise.
    """
    from headprune.exporter.runtime_check import gate

    texts = encoder_texts(job.task)[:job.greedy_prompts * 4]  # a choice task's prompts and their choices
    options = dict(n_ctx=n_ctx, mode=job.ablation, means=job.means, tolerance=job.tolerance, runtime=runtime)
    check = compare_pooled(job.lm, job.removed, files.f32_path, texts, file_type="f32", gated=True, **options)
    gate(check, job.tolerance, "llama.cpp")
    typed = None if gguf_type == "f32" else compare_pooled(job.lm, job.removed, files.path, texts,
                                                            file_type=gguf_type, gated=False, **options)
    return check, typed


def pooled_lines(info: Any) -> list[str]:
    """What ``headprune export`` prints of an encoder's GGUF checks (``info``: its ``GgufInfo``)."""
    check, typed = info.runtime, info.typed_runtime
    lines = [f"llama.cpp ({info.architecture}, float32, {info.pooling} pooling): {check.identical} of {check.prompts} "
             f"task texts' embeddings match the masked original's (largest difference {check.max_abs_logit_diff:.2e});"
             f" tokenizer agrees on {check.tokenizer_agree} of {check.tokenizer_texts} texts"]
    if typed is not None and typed.done:
        lines.append(f"{info.gguf_type} file (lossy, reported, not gated): {typed.identical} of {typed.prompts} texts' "
                     f"embeddings within the tolerance (largest difference {typed.max_abs_logit_diff:.2e})")
    return lines


def pooled_card_line(check: Any, pooling: str, lossy: str) -> str:
    """The card's line of one encoder file's run in llama.cpp (``lossy``: what is said of a lossy type's)."""
    return (f"- In {check.runtime}, {check.file_type} file{lossy}, with its own {pooling} pooling: "
            f"{check.identical} of {check.prompts} task texts' embeddings within the tolerance of the masked "
            f"original's mean-pooled last hidden states (largest difference {check.max_abs_logit_diff:.2e}); "
            "llama.cpp's tokenizer agrees on "
            f"{check.tokenizer_agree} of {check.tokenizer_texts} texts.")
