"""GPT-NeoX / Pythia: ``gpt_neox.layers[i].attention`` with a per-head interleaved ``query_key_value``
(rows laid out as ``[head][q|k|v][head_dim]``) and the output projection ``dense``."""

from headprune.loading.adapters.base import Adapter

NEOX = Adapter(
    family="gpt_neox",
    model_types=("gpt_neox",),
    layers_path="layers",
    attention_path="attention",
    output_projection_path="attention.dense",
    qkv_layout="neox",
    qkv_paths=("attention.query_key_value",),
    count_attrs=("num_attention_heads",),
)
