"""Falcon-H1 (``falcon_h1``): every layer runs a Mamba2 mixer (``mamba``) and grouped-query attention (``self_attn``)
side by side on the same normed input, their outputs added, with μP multipliers on both and on the MLP.

A layer's heads are its attention's query heads (``self_attn.{q,k,v,o}_proj``; ``key_multiplier`` scales every key
alike, so a head is removed exactly). The Mamba2 mixer beside it is never touched (its gated RMS norm spans each
group of its heads), but it carries a state from token to token: the grid is ``stateful``, so a Falcon-H1 is decoded
plainly, as the other hybrids are. The Mamba2 scan goes by chunks: the ONNX graph is traced over two of them.

GGUF (``falcon-h1``; the converter's ``FalconH1Model``): dense only, as llama.cpp's graph sizes every layer's
attention by layer 0's head counts. The converter folds the μP multipliers into the weights (:class:`FalconH1Tensors`:
the embeddings', the attention's input, key and output ones, the Mamba2 input projection's per block of rows, its
output's, the MLP's gate and down ones and the head's) and writes the Mamba2 tensors as for any Mamba2
(:class:`~headprune.loading.adapters.granitemoehybrid.Mamba2Tensors`); the output is written apart from the
embeddings, which it scales otherwise.
"""

from __future__ import annotations

from typing import Any

import torch

from headprune.loading.adapters.base import LLAMA_STYLE, Adapter
from headprune.loading.adapters.family import Family, TinyModel, register
from headprune.loading.adapters.gguf_spec import Gguf, one_count
from headprune.loading.adapters.granitemoehybrid import Mamba2, Mamba2Tensors
from headprune.loading.adapters.llama import GQA

FALCON_MAMBA = Mamba2("mamba", "mamba_d_conv", "mamba_d_state", "mamba_n_groups", "mamba_n_heads", "mamba_d_head")


class FalconH1Tensors(Mamba2Tensors):
    """Falcon-H1's tensors with its μP multipliers folded in, as the converter's ``FalconH1Model.modify_tensors``
    writes them (each weight times what transformers multiplies its input or output by), and back."""

    # (name ends with, the multiplier's config attribute, its index where the attribute is a list)
    SCALED = (("model.embed_tokens.weight", "embedding_multiplier", None),
              ("lm_head.weight", "lm_head_multiplier", None),
              (".feed_forward.gate_proj.weight", "mlp_multipliers", 0),
              (".feed_forward.down_proj.weight", "mlp_multipliers", 1),
              (".self_attn.q_proj.weight", "attention_in_multiplier", None),
              (".self_attn.k_proj.weight", "attention_in_multiplier", None),  # (and key_multiplier)
              (".self_attn.v_proj.weight", "attention_in_multiplier", None),
              (".self_attn.o_proj.weight", "attention_out_multiplier", None),
              (".mamba.out_proj.weight", "ssm_out_multiplier", None),
              (".mamba.in_proj.weight", "ssm_in_multiplier", None))  # (and ssm_multipliers, per block of rows)

    def _scale(self, name: str, config: Any) -> Any:
        """What the converter multiplies ``name`` by: a number, a column of per-row factors, or 1."""
        found = next(((attr, index) for end, attr, index in self.SCALED if name.endswith(end)), None)
        if found is None:
            return 1.0
        value = getattr(config, found[0])
        scale = float(value if found[1] is None else value[found[1]])
        if name.endswith(".self_attn.k_proj.weight"):
            scale *= float(config.key_multiplier)
        if name.endswith(".mamba.in_proj.weight"):  # z, x, B, C, dt: each block of rows its own factor
            heads = int(config.mamba_n_heads)
            inner, groups = heads * int(config.mamba_d_head), int(config.mamba_n_groups) * int(config.mamba_d_state)
            sizes = (inner, inner, groups, groups, heads)
            rows = torch.cat([torch.full((size,), float(m)) for size, m in zip(sizes, config.ssm_multipliers)])
            return (rows * scale).reshape(-1, 1)
        return scale

    def to_llama_cpp(self, name: str, data: Any, config: Any) -> tuple[str, Any]:
        name_out, data = super().to_llama_cpp(name, data, config)
        return name_out, data * self._scale(name, config)

    def from_llama_cpp(self, name: str, data: Any, config: Any) -> Any:
        return super().from_llama_cpp(name, data / self._scale(name, config), config)


def _refuse(config: Any) -> str | None:
    """What llama.cpp's falcon-h1 graph fixes (or folded multipliers leave wrong) that a config can set otherwise."""
    if config.mamba_rms_norm and config.mamba_norm_before_gate:
        return ("its Mamba2 mixers normalise before their gate (mamba_norm_before_gate), and llama.cpp's graph gates "
                "first")
    for bias in ("attention_bias", "projectors_bias"):
        if getattr(config, bias, False):
            return f"it has {bias}, which the converter's folded multipliers would scale wrongly or drop"
    return FALCON_MAMBA.refuse(config, "hidden_act", "mamba_proj_bias")


# The tiny model: two layers, each 4 query heads over 2 key/value heads beside a Mamba2 mixer of 4 heads of 32 (one
# group, its norm on after the gate as Falcon-H1 ships, chunks of 8 tokens so that the suite's prompts span several);
# multipliers away from 1.
TINY = dict(GQA, mamba_d_ssm=128, mamba_n_heads=4, mamba_d_head=32, mamba_d_state=8, mamba_chunk_size=8,
            mamba_rms_norm=True, mamba_norm_before_gate=False, key_multiplier=0.7, attention_in_multiplier=0.9,
            attention_out_multiplier=1.2,
            ssm_multipliers=[1.1, 0.9, 1.2, 0.8, 1.0], ssm_in_multiplier=0.9, ssm_out_multiplier=1.1,
            mlp_multipliers=[0.9, 1.1], embedding_multiplier=2.0, lm_head_multiplier=0.5)
register(Family(
    "falcon_h1", Adapter(family="falcon_h1", **LLAMA_STYLE, stateful=True,  # type: ignore[arg-type]
                         layer_returns_tuple=True),  # (its layer returns a tuple, which its model indexes)
    TinyModel("FalconH1Config", "FalconH1ForCausalLM", TINY),
    Gguf("falcon-h1", dense_only=one_count("falcon-h1"), keys=FALCON_MAMBA.keys, refuse=_refuse,
         tensors=FalconH1Tensors(FALCON_MAMBA), own_output=True,  # (tied: its multiplier is not the embeddings')
         holds=("blk.0.ssm_a", "falcon-h1.ssm.inner_size"),
         refused=({"mamba_norm_before_gate": True}, "normalise before their gate")),
    note="each layer's query heads; the Mamba2 mixer beside them untouched",
    generates_from=("5.25", "fails inside FalconH1ForCausalLM.generate on batched few-shot prompts, a size mismatch "
                            "in its Mamba2 chunking"),
    onnx_tokens=lambda config: int(config.mamba_chunk_size) + 3))
