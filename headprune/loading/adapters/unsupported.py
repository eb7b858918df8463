"""Why a family headprune knows of is not supported, and what to do with a vision-language checkpoint: the words of
the refusal :func:`headprune.loading.adapters.adapter_for` gives (one line, exit 2), so that it says why and what
would work rather than only "unsupported".
"""

from __future__ import annotations

from typing import Any

_FUSED_OR_OTHER = "its attention is laid out in a way no headprune adapter slices yet"
WHY_NOT: dict[str, str] = {
    "phi": "Phi-1/Phi-2's partial-rotary attention with a dense output projection has no headprune adapter yet "
           "(Phi-3 and Phi-4, model type phi3, are supported)",
    "stablelm": "StableLM's attention keeps its head counts in its own attributes, which headprune does not rewrite",
    "falcon": f"Falcon's fused multi-query projection: {_FUSED_OR_OTHER}",
    "gptj": f"GPT-J: {_FUSED_OR_OTHER}",
    "opt": f"OPT: {_FUSED_OR_OTHER}",
    "bloom": f"Bloom's ALiBi per-head slopes: {_FUSED_OR_OTHER}",
    "cohere2": "Cohere 2's interleaved sliding-window layers have no headprune adapter yet (cohere is supported)",
    "deepseek_v4": "DeepSeek-V4's attention (one key/value head every head shares, layers that compress keys across "
                   "tokens, an output projection grouped over heads through a low-rank o_a_proj/o_b_proj) has no "
                   "headprune adapter yet (DeepSeek-V2, V3 and V3.2: deepseek_v2, deepseek_v3, deepseek_v32 are "
                   "supported)",
    "t5": "encoder-decoder models (T5) have two attention stacks and cross-attention; headprune prunes decoder-only "
          "and encoder-only models",
}


def _architecture(config: Any) -> str:
    return (getattr(config, "architectures", None) or [type(config).__name__])[0]


def refusal(config: Any, supported: list[str], is_supported: Any, whole: list[str]) -> str:
    """The one-line refusal of ``config``: why its family is not supported where that is known, and for a
    vision-language checkpoint whether its language model is supported, how to use it, and which vision-language
    model types headprune takes whole (``whole``)."""
    model_type = getattr(config, "model_type", None)
    text = getattr(config, "text_config", None)
    vision = getattr(config, "vision_config", None)
    supported_line = f"supported model types: {', '.join(supported)}"
    if text is not None and vision is not None:
        text_type = getattr(text, "model_type", None)
        head = (f"{model_type!r} ({_architecture(config)}) is a vision-language checkpoint headprune does not take "
                f"whole (it does: {', '.join(whole)})")
        if is_supported(text_type):
            return (f"{head}; its language model ({text_type}) is supported: save the language model alone "
                    f"(docs/models.md, \"Vision-language checkpoints\": AutoModelForCausalLM.from_config(config."
                    f"text_config) with the weights of model.language_model and lm_head) and give that folder; the "
                    f"vision tower is not kept")
        return f"{head}, and its language model ({text_type}) is not supported either; {supported_line}"
    why = WHY_NOT.get(model_type or "")
    return f"unsupported architecture {model_type!r}{': ' + why if why else ''}; {supported_line}"


def text_family_refusal(config: Any, text_model_types: tuple[str, ...], is_supported: Any) -> str:
    """The one-line refusal of a vision-language checkpoint whose adapter takes only some language-model families
    (``text_model_types``: LLaVA's), when its own is another."""
    text_type = getattr(config.text_config, "model_type", None)
    alone = (f"; its language model alone is supported (docs/models.md, \"Vision-language checkpoints\")"
             if is_supported(text_type) else "")
    return (f"{config.model_type!r} ({_architecture(config)}) with a {text_type!r} language model is not supported: "
            f"headprune prunes {config.model_type} checkpoints whose language model is "
            f"{', '.join(text_model_types)}{alone}")
