"""Apertus (``ApertusForCausalLM``, model type ``apertus``): laid out as Llama
(``model.layers[i].self_attn.{q,k,v,o}_proj``, grouped-query attention) with RMS norms of each head's query and key
(one weight of the head's size, nothing to slice), an MLP without a gate whose activation (xIELU) has learned scalars
of its own in every layer, and Llama 3.1's RoPE.

GGUF: llama.cpp's ``apertus`` graph (the xIELU scalars as per-layer arrays of its metadata, the RoPE factors as its
``rope_freqs`` tensor), which takes one head count for every layer: dense only.
"""

from headprune.loading.adapters.family import Family, TinyModel, register
from headprune.loading.adapters.gguf_spec import Gguf, one_count
from headprune.loading.adapters.llama import GQA, LLAMA

# the converter's ApertusModel: each layer's xIELU scalars, in llama.cpp's metadata
_XIELU = tuple((f"mlp.act_fn.{name}", f"xielu.{name}") for name in ("alpha_n", "alpha_p", "beta", "eps"))
register(Family(
    "apertus", LLAMA, TinyModel("ApertusConfig", "ApertusForCausalLM", GQA),
    Gguf("apertus", dense_only=one_count("apertus", "q/k norms or xIELU", "Apertus"), activation=("xielu",),
         gated=False, layer_scalars=_XIELU, rope_freqs=True, holds=("rope_freqs.weight", "xielu.alpha_p")),
    note="per-head q/k norms; xIELU's learned scalars untouched"))
