"""Falcon-H1 (``falcon_h1``): every layer runs a Mamba2 mixer (``mamba``) and grouped-query attention (``self_attn``)
side by side on the same normed input, their outputs added, with μP multipliers on both and on the MLP.

A layer's heads are its attention's query heads (``self_attn.{q,k,v,o}_proj``; ``key_multiplier`` scales every key
alike, so a head is removed exactly). The Mamba2 mixer beside it is never touched (its gated RMS norm spans each
group of its heads), but it carries a state from token to token: the grid is ``stateful``, so a Falcon-H1 is decoded
plainly, as the other hybrids are. The Mamba2 scan goes by chunks: the ONNX graph is traced over two of them.

GGUF is refused in one line: llama.cpp's ``falcon-h1`` converter folds the μP multipliers into the weights
(``conversion/falcon_h1.py``), which headprune's writer does not do.
"""

from __future__ import annotations

from headprune.loading.adapters.base import LLAMA_STYLE, Adapter
from headprune.loading.adapters.family import Family, TinyModel, register
from headprune.loading.adapters.llama import GQA

# The tiny model: two layers, each 4 query heads over 2 key/value heads beside a Mamba2 mixer of 4 heads of 32 (one
# group, its norm on, chunks of 8 tokens so that the suite's prompts span several); multipliers away from 1.
TINY = dict(GQA, mamba_d_ssm=128, mamba_n_heads=4, mamba_d_head=32, mamba_d_state=8, mamba_chunk_size=8,
            mamba_rms_norm=True, key_multiplier=0.7, attention_in_multiplier=0.9, attention_out_multiplier=1.2,
            ssm_multipliers=[1.1, 0.9, 1.2, 0.8, 1.0], ssm_in_multiplier=0.9, ssm_out_multiplier=1.1,
            mlp_multipliers=[0.9, 1.1], embedding_multiplier=2.0, lm_head_multiplier=0.5)
register(Family(
    "falcon_h1", Adapter(family="falcon_h1", **LLAMA_STYLE, stateful=True,  # type: ignore[arg-type]
                         layer_returns_tuple=True),  # (its layer returns a tuple, which its model indexes)
    TinyModel("FalconH1Config", "FalconH1ForCausalLM", TINY),
    note="each layer's query heads; the Mamba2 mixer beside them untouched",
    onnx_tokens=lambda config: int(config.mamba_chunk_size) + 3,
    gguf_refused="llama.cpp's converter folds Falcon-H1's muP multipliers into its weights, which headprune's "
                 "writer does not do"))
