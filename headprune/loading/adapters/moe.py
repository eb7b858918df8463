"""Mixture-of-experts decoders whose attention is Llama-style: Mixtral, Qwen3-MoE.

Only attention heads are removed: ``model.layers[i].self_attn.{q,k,v,o}_proj`` as in Llama (Qwen3-MoE's q/k norms
act within a head). The router and the experts (``mlp`` / ``block_sparse_moe``) are never touched, so every token
goes to the experts it went to, given the same attention output.
"""

from __future__ import annotations

from typing import Any

from headprune.loading.adapters.base import LLAMA_STYLE, Adapter
from headprune.loading.adapters.family import Family, TinyModel, register
from headprune.loading.adapters.gguf_spec import Gguf, expert_keys, one_count
from headprune.loading.adapters.llama import GQA

MOE = Adapter(family="moe", **LLAMA_STYLE)  # type: ignore[arg-type]
MOE_TINY = dict(GQA, num_experts_per_tok=2)  # 4 experts (each config names its count), 2 a token


def _qwen3_moe(config: Any) -> str | None:
    """llama.cpp's qwen3moe graph renormalises the chosen experts' weights and puts experts in every layer."""
    if not getattr(config, "norm_topk_prob", False):
        return ("its router's top-k weights are not renormalised (norm_topk_prob false), which llama.cpp's qwen3moe "
                "graph always does")
    if getattr(config, "mlp_only_layers", None) or getattr(config, "decoder_sparse_step", 1) != 1:
        return "it has layers with a dense MLP (mlp_only_layers, decoder_sparse_step), which llama.cpp's qwen3moe lacks"
    return None


_EXPERTS = "routers and experts untouched"
register(
    Family("mixtral", MOE, TinyModel("MixtralConfig", "MixtralForCausalLM", dict(
        MOE_TINY, num_local_experts=4, sliding_window=None)),
        Gguf("llama", permuted=True, dense_only=one_count("llama", "experts", "Mixtral"), keys=expert_keys,
             holds=("blk.0.ffn_gate_exps.weight", "llama.expert_count")),
        note=_EXPERTS),
    Family("qwen3_moe", MOE, TinyModel("Qwen3MoeConfig", "Qwen3MoeForCausalLM", dict(
        MOE_TINY, num_experts=4, moe_intermediate_size=32, head_dim=16, norm_topk_prob=True)),  # as shipped
        Gguf("qwen3moe", dense_only=one_count("qwen3moe", "q/k norms or experts", "Qwen3-MoE"), keys=expert_keys,
             refuse=_qwen3_moe, holds=("blk.0.ffn_down_exps.weight", "qwen3moe.expert_feed_forward_length")),
        note=_EXPERTS),
)
