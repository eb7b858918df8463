"""ModernBERT (``modernbert``): ``layers[i].attn`` with one fused ``Wqkv`` whose rows are the query heads, then the
key heads, then the value heads (as Phi-3's ``qkv_proj``, one key/value head per query head), and the output
projection ``attn.Wo``.

Local (sliding-window) and global layers alternate: that is a mask and a rotary table per layer, with no parameter
per head, so slicing is the same in both. The attention splits ``Wqkv``'s rows by ``head_dim`` alone (no head count
on the module), so a sliced layer needs only its smaller projections. Its sequence classifier pools the last layer
(``classifier_pooling``: the first position or the mean), and the output projection sits inside the attention
module, which needs every position: no layer is cut at the first position.

GGUF: the bare encoder in llama.cpp's ``modern-bert`` graph, which computes what transformers does to 1.4e-6 (its
GEGLU is the exact GELU; against transformers' tanh GELU it differs by 3.7e-4, so only ``gelu`` is written). Its local
layers' window is written as the converter writes it (``sliding_window``: the whole ``local_attention``, which
llama.cpp halves on each side as transformers does; measured: any other value moves the embeddings by 1e-2).
"""

from __future__ import annotations

from typing import Any

from headprune.loading.adapters.base import Adapter
from headprune.loading.adapters.family import Family, TinyModel, register
from headprune.loading.adapters.gguf_spec import Gguf, one_count

MODERNBERT = Adapter(
    family="modernbert",
    layers_path="layers",
    attention_path="attn",
    output_projection_path="attn.Wo",
    is_encoder=True,
    qkv_layout="fused",
    qkv_paths=("attn.Wqkv",),
)


def _keys(writer: Any, config: Any) -> None:
    """The converter's ``ModernBertModel``: LayerNorm's epsilon, bidirectional attention, the pooling (mean), the
    local layers' window, which layers are local, and their RoPE base (the global one is the file's rope base)."""
    import gguf

    writer.add_layer_norm_eps(float(config.norm_eps))
    writer.add_causal_attention(False)
    writer.add_pooling_type(gguf.PoolingType.MEAN)
    writer.add_sliding_window(int(config.local_attention))
    writer.add_sliding_window_pattern([kind == "sliding_attention" for kind in config.layer_types])
    writer.add_rope_freq_base_swa(float(config.rope_parameters["sliding_attention"]["rope_theta"]))


def _refusal(config: Any) -> str | None:
    """What llama.cpp's modern-bert graph would compute otherwise (None: nothing)."""
    if config.hidden_activation != "gelu":
        return (f"its MLP's activation is {config.hidden_activation}, and llama.cpp's modern-bert graph computes the "
                "exact GELU")
    biased = [name for name in ("norm_bias", "attention_bias", "mlp_bias") if getattr(config, name, False)]
    if biased:
        return f"it has biases ({', '.join(biased)}), which llama.cpp's modern-bert graph does not add"
    kinds = {p.get("rope_type", "default") for p in config.rope_parameters.values()}
    if kinds != {"default"}:
        return f"its RoPE is {', '.join(sorted(kinds))}, and llama.cpp's modern-bert graph rotates plainly"
    return None


# a global layer, then a local one whose window (4 positions) is shorter than the tests' rows
register(Family("modernbert", MODERNBERT, TinyModel("ModernBertConfig", "ModernBertForMaskedLM", dict(
    local_attention=4, cls_token_id=1, sep_token_id=1)),
    Gguf("modern-bert", dense_only=one_count("modern-bert"), keys=_keys, refuse=_refusal, encoder=True,
         sliding_window=True),
    note="the fused Wqkv is split by head and written back fused; local and global layers alike"))
