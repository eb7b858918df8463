"""Whether the installed transformers loads a checkpoint whose layers have different head counts with the family's
own class, without remote code: found by building a two-layer model of the family whose second layer is given fewer
heads through ``per_layer_config`` (transformers 5's per-layer overrides), not assumed from a version.

transformers 5.25 honours ``per_layer_config`` in a few new families only; measured for headprune's: the Llama,
Gemma 2, Gemma 3 and GPT-NeoX configs refuse it (reading the global head count raises
``AmbiguousGlobalPerLayerAttributeError``), and Qwen2, Qwen3, Mistral, Gemma, SmolLM3 and GPT-2 build every layer
with the global count. Where it cannot, the sliced safetensors layout loads through the small
``modeling_headprune.py`` written beside it (``trust_remote_code=True``) or ``headprune.load``, and servers that
run only stock classes (vLLM) take the dense layout; the card says which.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from headprune.loading.adapters.base import Adapter


@dataclass(frozen=True)
class StockLoading:
    """Whether stock transformers can express this export's per-layer head counts (the record's
    ``format_details`` of a sliced safetensors export)."""

    transformers: str  # the installed release probed
    model_type: str
    per_layer_heads: bool
    reason: str  # what the probe saw (empty when it could)


def probe(model_type: str, adapter: Adapter) -> StockLoading:
    """Build a two-layer ``model_type`` model whose layer 1 has half the query (and key/value) heads of layer 0 from
    ``per_layer_config``, and read the width its own class gives each layer's attention output projection."""
    import transformers

    can, reason = _probe(model_type, adapter)
    return StockLoading(transformers.__version__, model_type, can, reason)


@lru_cache(maxsize=None)
def _probe(model_type: str, adapter: Adapter) -> tuple[bool, str]:
    import torch
    from transformers import AutoConfig, AutoModel

    from headprune.heads import ATTENTION
    from headprune.loading.adapters.base import get_path

    heads, head_dim = 4, 8
    sizes = {adapter.hidden_attr: heads * head_dim, adapter.heads_attr: heads, "num_hidden_layers": 2,
             "intermediate_size": 64, "vocab_size": 64, "head_dim": head_dim, "pad_token_id": 0, "bos_token_id": 1,
             "eos_token_id": 2}
    fewer = {adapter.heads_attr: heads // 2}
    if adapter.kv_heads_attr:
        sizes[adapter.kv_heads_attr], fewer[adapter.kv_heads_attr] = heads // 2, heads // 4
    try:
        config = AutoConfig.for_model(model_type, **sizes, per_layer_config={1: fewer})
        with torch.device("meta"):
            model = AutoModel.from_config(config)
    except Exception as error:  # noqa: BLE001 - any refusal is the answer: this release cannot express it
        return False, f"its {model_type} config refuses per_layer_config ({type(error).__name__})"
    if adapter.kinds(adapter.sizes(config)) != [ATTENTION] * 2:  # a hybrid's: not two attention layers to compare
        return False, f"its {model_type} config does not build the probe's two layers as attention layers"
    layers = get_path(model.base_model, adapter.layers_path)
    weights = [get_path(layer, adapter.output_projection_path).weight for layer in layers]
    widths = [int(w.shape[0] if adapter.projection_is_conv1d else w.shape[1]) for w in weights]
    if widths == [heads * head_dim, heads // 2 * head_dim]:
        return True, ""
    return False, f"{type(model).__name__} builds every layer with the same head count (per_layer_config ignored)"
