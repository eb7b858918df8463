"""Llama-style decoders: Llama, Qwen2, Qwen3, Mistral, Gemma 2 and 3, SmolLM, Granite, GLM and GLM-4, OLMo (all
share the layout).

``model.layers[i].self_attn.{q,k,v,o}_proj``; grouped-query attention through ``num_key_value_heads``;
``head_dim`` may be set explicitly (Gemma, Qwen3) rather than ``hidden_size // num_attention_heads``. Granite's
multipliers, GLM's partial rotary and Qwen3's per-head-size q/k norms act within a head, so slicing heads keeps them.
"""

from headprune.loading.adapters.base import Adapter

LLAMA = Adapter(
    family="llama",
    model_types=("llama", "qwen2", "qwen3", "mistral", "gemma", "gemma2", "gemma3_text", "smollm3", "granite", "glm",
                 "glm4", "olmo"),
    layers_path="layers",
    attention_path="self_attn",
    output_projection_path="self_attn.o_proj",
    kv_heads_attr="num_key_value_heads",
    qkv_paths=("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
)
