"""GPT-2: ``transformer.h[i].attn`` with a fused ``c_attn`` and a ``Conv1D`` output projection ``c_proj``."""

from headprune.loading.adapters.base import Adapter

GPT2 = Adapter(
    family="gpt2",
    model_types=("gpt2",),
    layers_path="h",
    attention_path="attn",
    output_projection_path="attn.c_proj",
    projection_is_conv1d=True,
    qkv_layout="gpt2",
    qkv_paths=("attn.c_attn",),
    count_attrs=("num_heads",),
)
