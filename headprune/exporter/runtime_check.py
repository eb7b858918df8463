"""Runtime checks: an exported file run in the runtime people deploy it with (llama.cpp, ONNX Runtime GenAI)
against the hook-masked original in torch: greedy decoding of task prompts, and the runtime's tokenizer against the
model's own. A runner has ``greedy(prompt, steps) -> (tokens, logits per token)`` and, when it tokenizes by itself,
``tokenize(text) -> tokens``.

The gate is on numbers, not only on tokens: at every compared step the runtime's whole logit vector must be
within the tolerance of the original's (:func:`gate`). Tokens alone would pass a file whose weights are slightly
wrong (a 0.1% error rarely changes an argmax). A token that differs is a tie only when it is explained by that
tolerance: the logits agree within ``allowed`` and the original's margin between the two tokens is at most
``2 x allowed`` (the most two values each off by ``allowed`` can swap by); anything else is a mismatch.
"""

from __future__ import annotations

from typing import Any

import torch



def eos_ids(lm: Any) -> tuple[int, ...]:
    config = getattr(lm.model, "generation_config", None) or lm.model.config
    eos = getattr(config, "eos_token_id", None)
    if eos is None:
        eos = lm.tokenizer.eos_token_id
    return tuple(eos) if isinstance(eos, (list, tuple)) else (() if eos is None else (int(eos),))


def task_texts(task: Any) -> list[str]:
    """The text each example's generation starts from: its prompt, or its text."""
    return [example.prompt or example.text for example in task.examples if example.prompt or example.text]


def compare_greedy(lm: Any, heads: Any, runner: Any, prompts: list[list[int]], *, steps: int, mode: str,
                   means: torch.Tensor | None, tolerance: float, runtime: str, file_type: str, gated: bool,
                   texts: list[str], reference: dict | None = None) -> Any:
    """Greedy decoding of each prompt in a runtime (``runner.greedy``, or ``runner.greedy_many`` where it decodes
    prompts side by side) and in the hook-masked original (every prompt in one batch), token by token, with the
    largest logit difference over every compared step (up to and including the first step whose tokens differ);
    ``texts`` are tokenized by the runtime (``runner.tokenize``) and by the model's tokenizer. ``reference`` keeps
    the masked original's decoding of each prompt for another runtime's comparison.
    """
    from headprune.exporter.export_record import RuntimeCheck
    from headprune.exporter.runtimes import TorchRunner
    from headprune.surgery.ablation import ablated

    eos = eos_ids(lm)
    identical = ties = mismatches = tokens = 0
    worst = scale = 0.0
    reference = {} if reference is None else reference
    missing = [prompt for prompt in prompts if (tuple(prompt), steps) not in reference]
    if missing:  # the masked original's greedy decoding, every prompt in one batch
        with ablated(lm, heads, mode=mode, means=means):  # type: ignore[arg-type]
            found = TorchRunner(lm.model, eos=eos, device=lm.device).greedy_many(missing, steps)
        reference.update({(tuple(prompt), steps): decoded for prompt, decoded in zip(missing, found)})
    # A runtime that decodes several prompts side by side (llama.cpp's rows) does; each alone otherwise.
    decoded = runner.greedy_many(prompts, steps) if hasattr(runner, "greedy_many") else [
        runner.greedy(prompt, steps) for prompt in prompts]
    for prompt, (got, got_logits) in zip(prompts, decoded):
        want, want_logits = reference[tuple(prompt), steps]
        outcome = "identical" if want == got else "mismatch"
        for step, (a, b) in enumerate(zip(want, got)):
            tokens += 1
            diff = float((want_logits[step] - got_logits[step]).abs().max())
            worst = max(worst, diff)
            scale = max(scale, float(want_logits[step].abs().max()))
            if a != b:
                allowed = tolerance * max(1.0, scale)
                margin = float(want_logits[step][a] - want_logits[step][b])
                outcome = "tie" if diff <= allowed and margin <= 2 * allowed else "mismatch"
                break
        identical += outcome == "identical"
        ties += outcome == "tie"
        mismatches += outcome == "mismatch"
    agree = 0
    for text in texts:
        ours = list(lm.tokenizer(text)["input_ids"])
        theirs = runner.tokenize(text)
        agree += ours == list(theirs)
    return RuntimeCheck(runtime, True, "", file_type, gated, len(prompts), tokens, identical, ties, mismatches,
                        worst, scale, len(texts), agree)


def gate(check: Any, tolerance: float, where: str) -> None:
    """Refuse an export whose runtime run differs from the masked original: logits beyond ``tolerance`` x
    max(1, largest |logit|) at any compared step, a greedy token that is not a tie, or a text tokenized otherwise.

    Raises:
        VerificationError: naming the runtime (``where``) and what differed; nothing is written.
    """
    from headprune.errors import VerificationError

    allowed = tolerance * max(1.0, check.max_abs_logit)
    if not check.max_abs_logit_diff <= allowed:
        raise VerificationError(f"in {where}, the greedy steps' logits differ from the masked original's by "
                                f"{check.max_abs_logit_diff:.3g} (allowed {allowed:.3g}: tolerance {tolerance:g} x "
                                f"largest |logit| {check.max_abs_logit:.3g}); nothing was written")
    if check.mismatches:
        raise VerificationError(f"in {where}, {check.mismatches} of {check.prompts} prompts decode greedily to other "
                                "tokens than the masked original; nothing was written")
    if check.tokenizer_agree < check.tokenizer_texts:
        raise VerificationError(f"{where} tokenizes {check.tokenizer_texts - check.tokenizer_agree} of "
                                f"{check.tokenizer_texts} task texts differently from the model's tokenizer; "
                                "nothing was written")
