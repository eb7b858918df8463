"""OLMo 3 (``Olmo3ForCausalLM``, model type ``olmo3``): OLMo-2's layout (``model.layers[i].self_attn.{q,k,v,o}_proj``
with RMS norms over the whole query and the whole key), three sliding-window layers in four. Like OLMo-2 it is dense
only: those norms are taken over all heads at once.

GGUF: llama.cpp's ``olmo2`` graph with the sliding window and its layers (the converter's ``Olmo2Model`` writes OLMo 3
so), which takes one head count for every layer.
"""

from __future__ import annotations

from typing import Any

from headprune.loading.adapters.family import Family, TinyModel, register
from headprune.loading.adapters.gguf_spec import Gguf
from headprune.loading.adapters.llama import GQA
from headprune.loading.adapters.olmo2 import OLMO2


def _keys(writer: Any, config: Any) -> None:
    """The window and which layers use it (llama.cpp's key, written by name: gguf-py 0.14 has no writer for it)."""
    writer.add_sliding_window(int(config.sliding_window))
    writer.add_array(f"{writer.arch}.attention.sliding_window_pattern",
                     [t == "sliding_attention" for t in config.layer_types])


def _layers(config: Any) -> str | None:
    """llama.cpp's olmo2 graph rotates the sliding layers by the global layers' base, without their scaling, and adds
    no attention biases."""
    rope = getattr(config, "rope_parameters", None) or {}
    local, full = rope.get("sliding_attention") or {}, rope.get("full_attention") or rope
    if local and (local.get("rope_type", "default") != "default" or local.get("rope_theta") != full.get("rope_theta")):
        return ("its sliding-window layers' RoPE is not plain RoPE of the global layers' base, as llama.cpp's olmo2 "
                "graph computes it")
    if getattr(config, "attention_bias", False):
        return "its attention has biases (attention_bias), which llama.cpp's olmo2 graph does not add"
    return None


register(Family(
    "olmo3", OLMO2, TinyModel("Olmo3Config", "Olmo3ForCausalLM", dict(
        GQA, sliding_window=4, layer_types=["sliding_attention", "full_attention"])),
    Gguf("olmo2", dense_only="its q/k norms are taken over all heads", keys=_keys, refuse=_layers,
         sliding_window=True, holds=("blk.0.attn_q_norm.weight", "olmo2.attention.sliding_window_pattern"),
         refused=({"attention_bias": True}, "attention_bias")),
    note="dense only: q/k norms over all heads at once; sliding-window layers"))
