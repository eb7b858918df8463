"""Runtime checks: an exported file run in the runtime people deploy it with (llama.cpp, ONNX Runtime GenAI)
against the hook-masked original in torch: greedy tokens on task prompts, token for token, and the runtime's
tokenizer against the model's own. A runner has ``greedy(prompt, steps) -> (tokens, logits per token)`` and,
when it tokenizes by itself, ``tokenize(text) -> tokens``.
"""

from __future__ import annotations

from typing import Any

import torch

from headprune.compat import cache_of, passing_cache


def eos_ids(lm: Any) -> tuple[int, ...]:
    config = getattr(lm.model, "generation_config", None) or lm.model.config
    eos = getattr(config, "eos_token_id", None)
    if eos is None:
        eos = lm.tokenizer.eos_token_id
    return tuple(eos) if isinstance(eos, (list, tuple)) else (() if eos is None else (int(eos),))


@torch.inference_mode()
def torch_greedy(lm: Any, prompt: list[int], steps: int, eos: tuple[int, ...]) -> tuple[list[int], list[torch.Tensor]]:
    """Greedy tokens of ``lm.model`` (under whatever ablation is active) and the logits behind each."""
    ids = torch.tensor([prompt], device=lm.device)
    out = lm.model(input_ids=ids, use_cache=True)
    tokens, logits = [], []
    for _ in range(steps):
        last = out.logits[0, -1].float().cpu()
        token = int(last.argmax())
        tokens.append(token)
        logits.append(last)
        if token in eos:
            break
        out = lm.model(input_ids=torch.tensor([[token]], device=lm.device), **passing_cache(cache_of(out)),
                       use_cache=True)
    return tokens, logits


def task_texts(task: Any) -> list[str]:
    """The text each example's generation starts from: its prompt, or its text."""
    return [example.prompt or example.text for example in task.examples if example.prompt or example.text]


def compare_greedy(lm: Any, heads: Any, runner: Any, prompts: list[list[int]], *, steps: int, mode: str,
                   means: torch.Tensor | None, tolerance: float, runtime: str, gguf_type: str, gated: bool,
                   texts: list[str]) -> Any:
    """Greedy decoding of each prompt in a runtime (``runner.greedy``) and in the hook-masked original, token by
    token; ``texts`` are tokenized by the runtime (``runner.tokenize``) and by the model's tokenizer.

    A divergence counts as a tie when the original's own logits for the two tokens are within ``tolerance``
    x max(1, largest |logit|) of each other (rounding can pick either), else as a mismatch.
    """
    from headprune.ablation import ablated
    from headprune.exporter.record import RuntimeCheck

    eos = eos_ids(lm)
    identical = ties = mismatches = tokens = 0
    worst = scale = 0.0
    for prompt in prompts:
        with ablated(lm, heads, mode=mode, means=means):  # type: ignore[arg-type]
            want, want_logits = torch_greedy(lm, prompt, steps, eos)
        got, got_logits = runner.greedy(prompt, steps)
        outcome = "identical" if want == got else "mismatch"
        for step, (a, b) in enumerate(zip(want, got)):
            tokens += 1
            worst = max(worst, float((want_logits[step] - got_logits[step]).abs().max()))
            scale = max(scale, float(want_logits[step].abs().max()))
            if a != b:
                margin = float(want_logits[step][a] - want_logits[step][b])
                outcome = "tie" if margin <= tolerance * max(1.0, scale) else "mismatch"
                break
        identical += outcome == "identical"
        ties += outcome == "tie"
        mismatches += outcome == "mismatch"
    agree = 0
    for text in texts:
        ours = list(lm.tokenizer(text)["input_ids"])
        theirs = runner.tokenize(text)
        agree += ours == list(theirs)
    return RuntimeCheck(runtime, True, "", gguf_type, gated, len(prompts), tokens, identical, ties, mismatches,
                        worst, scale, len(texts), agree)
