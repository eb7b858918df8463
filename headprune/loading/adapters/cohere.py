"""Cohere (Command R, R+): Llama-style projections ``model.layers[i].self_attn.{q,k,v,o}_proj`` beside a parallel
MLP. Command R+ sets ``use_qk_norm``: LayerNorms over each head's query and key with a weight row per head
(``q_norm.weight``: ``(heads, head_dim)``), sliced with their heads."""

from __future__ import annotations

from typing import Any

from headprune.loading.adapters.base import LLAMA_STYLE, Adapter
from headprune.loading.adapters.family import Family, TinyModel, register
from headprune.loading.adapters.gguf_spec import Gguf, layer_norm_keys, one_count
from headprune.loading.adapters.llama import GQA

COHERE = Adapter(family="cohere", **LLAMA_STYLE,  # type: ignore[arg-type]
                 head_params=(("self_attn.q_norm.weight", "q"), ("self_attn.k_norm.weight", "kv")))


def _keys(writer: Any, config: Any) -> None:
    layer_norm_keys(writer, config)
    writer.add_logit_scale(float(config.logit_scale))


def _norms(config: Any) -> str | None:
    if getattr(config, "use_qk_norm", False) and config.num_hidden_layers < 64:
        return ("llama.cpp's command-r graph reads per-head q/k norms only in a model of 64 layers or more (Command "
                f"R+), and this one has {config.num_hidden_layers}")
    return None


register(Family("cohere", COHERE, TinyModel("CohereConfig", "CohereForCausalLM", dict(GQA, use_qk_norm=True)),
                Gguf("command-r", dense_only=one_count("command-r"), keys=_keys, refuse=_norms,
                     holds=("blk.0.attn_q.weight", "command-r.logit_scale"), variant={"use_qk_norm": False}),
                note="Command R+'s per-head q/k norm weights go with their heads"))
