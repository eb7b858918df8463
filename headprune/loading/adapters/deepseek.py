"""Multi-head latent attention (MLA): DeepSeek-V2, DeepSeek-V3/R1, GLM-4.7-Flash, Mistral Small 4, and the
sparse-attention DeepSeek-V3.2 and GLM-5. (Kimi K2's text model is DeepSeek-V3's, but its checkpoints name a
``kimi_k2`` type that transformers knows only inside Kimi K2.5's wrapper, and a tokenizer of remote code: not taken.)

``model.layers[i].self_attn``: the hidden state goes through a query latent (``q_a_proj``, ``q_a_layernorm``) and
``q_b_proj`` (or straight through ``q_proj`` where ``q_lora_rank`` is unset), and through a key/value latent
(``kv_a_proj_with_mqa``: the latent and one rotary key every head shares, ``kv_a_layernorm``) that ``kv_b_proj``
expands into each head's key part without RoPE and its value. A head is its ``qk_head_dim`` rows of the query
projection (``qk_nope_head_dim`` without RoPE, then ``qk_rope_head_dim`` rotary), its ``qk_nope_head_dim +
v_head_dim`` rows of ``kv_b_proj`` and its ``v_head_dim`` columns of ``o_proj`` (the ``latent`` q/k/v layout); the
latents, their norms and the rotary key stay whole. Removing those rows gives exactly the masked model: each head's
softmax reads only its own query and key rows. Routers, shared and routed experts are never touched; DeepSeek-V3.2's
and GLM-5's sparse-attention indexer (its own heads, which choose the keys every head attends to from the hidden
state and the query latent) is left whole too.
"""

from __future__ import annotations

from typing import Any

from headprune.loading.adapters.base import Adapter
from headprune.loading.adapters.family import Family, TinyModel, register
from headprune.loading.adapters.gguf_spec import Gguf, one_count
from headprune.loading.complex_rope import real_rope

# Where a latent attention keeps its heads (also for a wrapper around such a language model: Mistral 3's)
LATENT = dict(layers_path="layers", attention_path="self_attn", output_projection_path="self_attn.o_proj",
               qkv_layout="latent", qkv_paths=("self_attn.kv_b_proj", "self_attn.q_b_proj", "self_attn.q_proj"),
               count_attrs=("num_heads",), head_dim_attr="qk_head_dim", out_dim_attr="v_head_dim")
MLA = Adapter(family="mla", **LATENT)  # type: ignore[arg-type]
# GLM-5's layers return their sparse-attention top-k beside the hidden states, for a later layer that reuses it
# ("shared" indexer layers, indexer_types): a pass may start only at a layer that computes its own.
GLM_DSA = Adapter(family="glm_dsa", **LATENT, layer_returns_tuple=True,  # type: ignore[arg-type]
                  layer_starts=lambda config: [kind != "shared" for kind in config.indexer_types])
# The tiny models' latent attention: a query head 16 wide (8 without RoPE, 8 rotary), a value 12 wide (so a head's
# output is narrower than its query), latents of 24 and 16; one dense layer, then a layer of 4 experts in 2 groups.
TINY = dict(num_key_value_heads=4, q_lora_rank=24, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8,
            v_head_dim=12, n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1, moe_intermediate_size=32,
            first_k_dense_replace=1)
_GROUPED = dict(n_group=2, topk_group=1)
# DeepSeek-V3's and Mistral Small 4's YaRN (their defaults, sized for the tiny model's 256 positions), and Mistral's
# query scale, which grows past 64 positions
_YARN = dict(rope_type="yarn", rope_theta=10000.0, factor=4.0, original_max_position_embeddings=64, beta_fast=32.0,
             beta_slow=1.0, mscale=1.0, mscale_all_dim=1.0)
_MISTRAL4_ROPE = dict(_YARN, llama_4_scaling_beta=0.1)
# llama.cpp's test of DeepSeek-V3 as shipped: YaRN, and the router's name as its config.json gives it
_DEEPSEEK_V3 = {"rope_parameters": _YARN, "topk_method": "noaux_tc"}
# transformers normalises the latents with 1e-6 whatever the config says, llama.cpp with the config's rms_norm_eps
# (GLM's 1e-5): on the tiny model's small random latents that alone moves the logits by 7.9e-5 of 0.66, past GGUF's
# gate, so llama.cpp's test runs GLM's tiny models with DeepSeek's 1e-6 (a real model's latents are far larger than
# the epsilon)
_LATENT_EPS = {"rms_norm_eps": 1e-6}


def _deepseek_v2_modeling() -> Any:
    from transformers.models.deepseek_v2 import modeling_deepseek_v2

    return modeling_deepseek_v2


# DeepSeek-V2's RoPE, which transformers computes in complex numbers, in real ones while the ONNX exporter traces it
_REAL_ROPE = real_rope(_deepseek_v2_modeling, "DeepseekV2RotaryEmbedding", heads_axis=1)
_NOTE = "multi-head latent attention: a head's query and key/value-expansion rows and its output columns"
_EXPERTS = "; routers and experts untouched"


def _lengths(config: Any) -> tuple[int, int, int]:
    """What llama.cpp caches of a layer (the converter's ``DeepseekV2Model``): one key of the key/value latent and the
    rotary key, whose value is the latent, and the rotary part of each head's query."""
    return (int(config.kv_lora_rank) + int(config.qk_rope_head_dim), int(config.kv_lora_rank),
            int(config.qk_rope_head_dim))


def _kv_b(name: str) -> tuple[str, str] | None:
    """(layer, GGUF tensor prefix) of a ``kv_b_proj`` weight, else None."""
    if not name.endswith(".self_attn.kv_b_proj.weight"):
        return None
    layer = name.split(".layers.")[1].split(".")[0]
    return layer, f"blk.{layer}."


def split_kv_b(name: str, data: Any, config: Any) -> dict[str, Any] | None:
    """``kv_b_proj`` (heads x (key without RoPE | value), latent) as llama.cpp's graph multiplies the latent by it
    (the converter's ``DeepseekV2Model.modify_tensors``): ``attn_k_b`` (heads, latent, key part), the key part
    transposed, to absorb into each head's query; ``attn_v_b`` (heads, value, latent)."""
    found = _kv_b(name)
    if found is None:
        return None
    nope, value = int(config.qk_nope_head_dim), int(config.v_head_dim)
    per_head = data.reshape(-1, nope + value, data.shape[-1])  # (heads, nope + value, latent)
    keys, values = per_head.split([nope, value], dim=1)
    return {found[1] + "attn_k_b.weight": keys.transpose(1, 2).contiguous(),
            found[1] + "attn_v_b.weight": values.contiguous()}


def join_kv_b(name: str, stored: Any, config: Any) -> Any:
    """``kv_b_proj`` back from a file's ``attn_k_b`` and ``attn_v_b`` (:func:`split_kv_b`'s inverse), else None."""
    import torch

    found = _kv_b(name)
    if found is None or found[1] + "attn_k_b.weight" not in stored:
        return None
    keys = torch.as_tensor(stored[found[1] + "attn_k_b.weight"]).transpose(1, 2)
    values = torch.as_tensor(stored[found[1] + "attn_v_b.weight"])
    return torch.cat((keys, values), dim=1).flatten(0, 1)


def _dense_layers(config: Any) -> int:
    """Leading layers with a dense MLP (llama.cpp's ``leading_dense_block_count``): GLM's ``mlp_layer_types``, else
    ``first_k_dense_replace``."""
    kinds = getattr(config, "mlp_layer_types", None)
    if kinds:
        return next((i for i, kind in enumerate(kinds) if kind != "dense"), len(kinds))
    return int(getattr(config, "first_k_dense_replace", None) or 0)


def _keys(writer: Any, config: Any, *, sigmoid: bool) -> None:
    """The converter's ``DeepseekV2Model.set_gguf_parameters`` (and its ``TextModel`` experts' keys): the latents, a
    head's sizes, the experts and how they are chosen (``sigmoid``: DeepSeek-V3's gating; else a softmax), YaRN's
    attention scale. Beyond it: the query latent's rank 0 where there is none (llama.cpp wants the key unless the
    model has DeepSeek-V2-Lite's layer count), the gating function (the converter reads it from a ``scoring_func``
    that transformers' configs do not keep), and Mistral 4's query scale by position (``llama_4_scaling_beta``),
    which llama.cpp's graph applies when the file says so."""
    import gguf

    rope = getattr(config, "rope_parameters", None) or {}
    writer.add_leading_dense_block_count(_dense_layers(config))
    writer.add_q_lora_rank(int(config.q_lora_rank or 0))
    writer.add_kv_lora_rank(int(config.kv_lora_rank))
    writer.add_key_length_mla(int(config.qk_nope_head_dim) + int(config.qk_rope_head_dim))
    writer.add_value_length_mla(int(config.v_head_dim))
    writer.add_expert_feed_forward_length(int(config.moe_intermediate_size))
    writer.add_expert_count(int(config.n_routed_experts))
    writer.add_expert_used_count(int(config.num_experts_per_tok))
    writer.add_expert_shared_count(int(config.n_shared_experts or 0))
    writer.add_expert_weights_scale(float(config.routed_scaling_factor))
    if getattr(config, "norm_topk_prob", False):
        writer.add_expert_weights_norm(True)
    if getattr(config, "n_group", None):
        writer.add_expert_group_count(int(config.n_group))
        writer.add_expert_group_used_count(int(config.topk_group))
    gating = gguf.ExpertGatingFuncType.SIGMOID if sigmoid else gguf.ExpertGatingFuncType.SOFTMAX
    writer.add_expert_gating_func(gating)
    if rope.get("mscale_all_dim") is not None:  # llama.cpp divides it by 0.1 again ([TAG_DEEPSEEK2_YARN_LOG_MUL_FIX])
        writer.add_rope_scaling_yarn_log_mul(0.1 * float(rope["mscale_all_dim"]))
    if rope.get("llama_4_scaling_beta") is not None:  # 1 + beta * log(1 + floor(position / original context))
        writer.add_attn_temperature_scale(float(rope["llama_4_scaling_beta"]))
        writer.add_attn_temperature_length(int(rope["original_max_position_embeddings"]))


def _refuse(config: Any) -> str | None:
    """What llama.cpp's deepseek2 graphs compute otherwise: attention biases, a dense layer after an experts' one,
    DeepSeek-V2's choice of expert groups by each group's best score."""
    if getattr(config, "attention_bias", False):
        return "its attention projections have biases, which llama.cpp's deepseek2 graph has no place for"
    kinds = list(getattr(config, "mlp_layer_types", None) or ())
    if "dense" in kinds[_dense_layers(config):]:
        return "it has a dense MLP after a layer of experts, and llama.cpp's graph only before the first"
    # (only DeepSeek-V2's router reads it: DeepSeek-V3's and Mistral 4's configs name their own "noaux_tc", which
    # transformers and llama.cpp both compute by the sum of each group's best two)
    if config.model_type == "deepseek_v2" and getattr(config, "topk_method", "greedy") not in ("greedy", None):
        return (f"its router picks experts by {config.topk_method!r} (each group's best score), and llama.cpp's graph "
                "greedily or by the sum of each group's best two")
    return None


def _refuse_indexer(config: Any) -> str | None:
    """What llama.cpp's sparse-attention graphs cannot take beyond :func:`_refuse`: it rotates the indexer's keys by
    a Hadamard matrix of 64 (or a power of two times it) and aborts on a head size it does not divide."""
    if int(config.index_head_dim) % 64:
        return (f"its sparse-attention indexer's heads are {config.index_head_dim} wide, and llama.cpp's graph takes "
                "a multiple of 64")
    return _refuse(config)


# The gguf-py writers the keys above call (gguf-py 0.14, the floor, has none of the latent or group ones).
WRITES_WITH = ("add_key_length_mla", "add_value_length_mla", "add_expert_group_count", "add_expert_group_used_count",
               "add_attn_temperature_length", "add_attn_temperature_scale", "add_indexer_head_count",
               "add_indexer_key_length", "add_indexer_top_k")


def _gguf(arch: str, *, sigmoid: bool = True, **fields: Any) -> Gguf:
    """The file of a latent-attention family: llama.cpp's deepseek2 graph or its kin (RoPE on adjacent pairs, as the
    checkpoint keeps it: no permutation), dense only."""
    fields.setdefault("keys", lambda writer, config: _keys(writer, config, sigmoid=sigmoid))
    fields.setdefault("refuse", _refuse)
    return Gguf(arch, dense_only=one_count(arch), latent=_lengths, split=split_kv_b, join=join_kv_b,
                writes_with=WRITES_WITH, **fields)


def _indexer_keys(writer: Any, config: Any) -> None:
    """GLM-5's sparse-attention indexer (the converter's ``GlmMoeDsaModel``, as its ``DeepseekV32Model``): its heads,
    their size, the keys it keeps, and which layers choose their own (``indexer_types``, written by name: gguf-py
    0.19 has no writer for it)."""
    _keys(writer, config, sigmoid=True)
    writer.add_indexer_head_count(int(config.index_n_heads))
    writer.add_indexer_key_length(int(config.index_head_dim))
    writer.add_indexer_top_k(int(config.index_topk))
    kinds = getattr(config, "indexer_types", None)
    if kinds:
        writer.add_array(f"{writer.arch}.attention.indexer.types", [kind == "full" for kind in kinds])


def _tiny(config_class: str, model_class: str, **overrides: Any) -> TinyModel:
    return TinyModel(config_class, model_class, dict(TINY, **overrides))


# llama.cpp's test: the indexer keeps every key of the test prompts (llama.cpp and transformers may break the
# indexer's ties apart), its heads as wide as llama.cpp's graph takes them (a multiple of 64)
_WHOLE = {"index_topk": 64, "index_head_dim": 64}
# DeepSeek-V3.2's and GLM-5's sparse-attention indexer: 16 heads of 16 (its own; 8 rotary), the 8 best keys of each
# query (fewer than the suite's longer prompts have, so the selection matters). With few heads, a key's score is
# often exactly 0 (every head's ReLU at 0), and top-k picks among such ties by the batch's layout.
_INDEXER = dict(index_n_heads=16, index_head_dim=16, index_topk=8)

register(
    Family("deepseek_v3", MLA, _tiny("DeepseekV3Config", "DeepseekV3ForCausalLM", **_GROUPED),
           _gguf("deepseek2", holds=("blk.0.attn_k_b.weight", "deepseek2.attention.kv_lora_rank"),
                 variant=_DEEPSEEK_V3, refused=({"attention_bias": True}, "llama.cpp's deepseek2 graph has no place")),
           note=_NOTE + _EXPERTS),
    Family("deepseek_v2", MLA, _tiny("DeepseekV2Config", "DeepseekV2ForCausalLM", q_lora_rank=None),
           _gguf("deepseek2", sigmoid=False, holds=("blk.0.attn_q.weight", "deepseek2.expert_gating_func"),
                 refused=({"topk_method": "group_limited_greedy", "n_group": 2, "topk_group": 1},
                          "each group's best score")),
           note=_NOTE + " (q_proj where there is no query latent: DeepSeek-V2-Lite)" + _EXPERTS,
           traceable=_REAL_ROPE),
    Family("glm4_moe_lite", MLA, _tiny("Glm4MoeLiteConfig", "Glm4MoeLiteForCausalLM"),
           _gguf("deepseek2", holds=("blk.1.exp_probs_b.bias", "deepseek2.leading_dense_block_count"),
                 variant=_LATENT_EPS),
           note=_NOTE + " (GLM-4.7-Flash)" + _EXPERTS),
    Family("mistral4", MLA, _tiny("Mistral4Config", "Mistral4ForCausalLM", **_GROUPED, rope_parameters=dict(
        _MISTRAL4_ROPE, partial_rotary_factor=0.5)),
           _gguf("mistral4", sigmoid=False, holds=("blk.0.attn_v_b.weight", "mistral4.attention.temperature_scale"),
                 variant={"rope_parameters": dict(_MISTRAL4_ROPE, original_max_position_embeddings=4,
                                                  partial_rotary_factor=0.5)}),
           note=_NOTE + " (Mistral Small 4); the position-dependent query scale acts on every head alike" + _EXPERTS),
    Family("deepseek_v32", MLA, _tiny("DeepseekV32Config", "DeepseekV32ForCausalLM", **_GROUPED, **_INDEXER),
           note=_NOTE + "; the sparse-attention indexer (its own heads) untouched" + _EXPERTS,
           gguf_refused="gguf-py 0.19 and llama.cpp b11549 have no deepseek32 architecture"),
    Family("glm_moe_dsa", GLM_DSA, _tiny("GlmMoeDsaConfig", "GlmMoeDsaForCausalLM", **_INDEXER),
           _gguf("glm-dsa", keys=_indexer_keys, refuse=_refuse_indexer, variant={**_WHOLE, **_LATENT_EPS},
                 holds=("blk.0.indexer.attn_k.weight", "glm-dsa.attention.indexer.top_k"),
                 refused=({}, "indexer's heads are 16 wide")),  # (the tiny model's: llama.cpp would abort)
           note=_NOTE + " (GLM-5); the sparse-attention indexer (its own heads) untouched" + _EXPERTS),
)
