"""Phi-3 and Phi-4 (``phi3``): ``model.layers[i].self_attn`` with one fused ``qkv_proj`` whose rows are the query
heads, then the key heads, then the value heads (grouped-query), and the output projection ``o_proj``.

Slicing takes each kept head's rows out of the fused projection and writes them back fused, in the same order.
"""

from headprune.loading.adapters.base import LLAMA_STYLE, Adapter
from headprune.loading.adapters.family import Family, TinyModel, register
from headprune.loading.adapters.gguf_spec import Gguf, one_count
from headprune.loading.adapters.llama import GQA

PHI3 = Adapter(**dict(LLAMA_STYLE, family="phi3", qkv_layout="fused", qkv_paths=("self_attn.qkv_proj",)))
register(Family("phi3", PHI3, TinyModel("Phi3Config", "Phi3ForCausalLM", GQA),
                Gguf("phi3", dense_only=one_count("phi3") + " (its fused attn_qkv is sized by it)",
                     holds=("blk.0.attn_qkv.weight", "phi3.rope.dimension_count")), genai="phi3",
                note="the fused qkv_proj is split by head and written back fused"))
