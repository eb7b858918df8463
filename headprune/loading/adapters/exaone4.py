"""EXAONE 4.0 (``Exaone4ForCausalLM``, model type ``exaone4``): laid out as Llama
(``model.layers[i].self_attn.{q,k,v,o}_proj``, grouped-query attention) with RMS norms of each head's query and key
(one weight of the head's size, shared by the heads: nothing to slice) and norms after the attention and the MLP.
Sliding-window layers use RoPE; where a window is set, the global layers use none.

GGUF: llama.cpp's ``exaone4`` graph, which takes one head count for every layer: dense only.
"""

from __future__ import annotations

from typing import Any

from headprune.loading.adapters.family import Family, TinyModel, register
from headprune.loading.adapters.gguf_spec import Gguf, one_count
from headprune.loading.adapters.llama import GQA, LLAMA


def _pattern(config: Any) -> list[bool]:
    return [t == "sliding_attention" for t in config.layer_types]


def _keys(writer: Any, config: Any) -> None:
    """The converter's ``Exaone4Model``: the window and which layers use it."""
    if config.sliding_window:
        writer.add_sliding_window(int(config.sliding_window))
        writer.add_array(f"{writer.arch}.attention.sliding_window_pattern", _pattern(config))


def _windows(config: Any) -> str | None:
    """llama.cpp's exaone4 graph applies sliding windows (and leaves RoPE out of the global layers) only in a model
    of 64 layers (EXAONE 4.0 32B)."""
    if config.sliding_window and any(_pattern(config)) and config.num_hidden_layers != 64:
        return ("it has sliding-window layers, which llama.cpp's exaone4 graph applies only in a model of 64 layers "
                f"(EXAONE 4.0 32B), and this one has {config.num_hidden_layers}")
    return None


register(Family(
    "exaone4", LLAMA, TinyModel("Exaone4Config", "Exaone4ForCausalLM", dict(
        GQA, sliding_window=4, sliding_window_pattern=2)),  # layer 0 sliding, layer 1 global without RoPE
    Gguf("exaone4", dense_only=one_count("exaone4", "q/k norms", "EXAONE 4.0"), keys=_keys, refuse=_windows,
         sliding_window=True, rope_freqs=True,
         holds=("blk.0.post_ffw_norm.weight", "exaone4.attention.sliding_window_pattern"),
         variant={"num_hidden_layers": 64, "sliding_window_pattern": 4},  # EXAONE 4.0 32B's layers
         refused=({}, "only in a model of 64 layers")),
    note="per-head q/k norms; global layers without RoPE"))
