"""What every architecture adapter says about a family: where the heads live and how many there are.

An adapter is declarative: paths from the model's base module to its layers, and from a layer to the
attention output projection (the module whose *input* is the concatenation of the query heads' outputs,
``(B, T, num_heads * head_dim)``). Ablation, search and export only talk to models through an adapter.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn
from transformers import PretrainedConfig, PreTrainedModel

from headprune.errors import UnsupportedModelError
from headprune.heads import HeadGrid
from headprune.surgery.remote_modeling import QKV_LAYOUTS


def get_path(module: nn.Module, path: str) -> nn.Module:
    """Follow a dotted attribute path (``"encoder.layer"``) from ``module``."""
    for part in path.split("."):
        module = getattr(module, part)
    return module


# Llama's layout, which most decoders share: ``model.layers[i].self_attn.{q,k,v,o}_proj``, grouped-query attention
# through ``num_key_value_heads``.
LLAMA_STYLE = dict(layers_path="layers", attention_path="self_attn", output_projection_path="self_attn.o_proj",
                   kv_heads_attr="num_key_value_heads",
                   qkv_paths=("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"))
# A vision-language model as shipped (Gemma 3, LLaVA, Qwen2-VL): its language model's Llama-style attention, from the
# model's base module, sized by the text sub-config; the vision tower and projector sit beside it, never touched.
VISION_LANGUAGE = dict(LLAMA_STYLE, layers_path="language_model.layers", text_config="text_config")


@dataclass(frozen=True)
class Adapter:
    """One architecture family.

    Attributes:
        family: the adapter's name, as records and reports show it (``"llama"``, ``"gpt2"``, ...); the model types it
            serves are the :class:`~headprune.loading.adapters.family.Family` specs that name it.
        layers_path: path from ``model.base_model`` to the list of transformer layers.
        attention_path: path from a layer to its attention module.
        output_projection_path: path from a layer to the attention output projection.
        heads_attr / kv_heads_attr / hidden_attr: config attribute names.
        is_encoder: bidirectional encoder without an LM head (BERT family).
        projection_is_conv1d: the output projection is a GPT-2 ``Conv1D`` (weight is ``(in, out)``).
    """

    family: str
    layers_path: str
    attention_path: str
    output_projection_path: str
    heads_attr: str = "num_attention_heads"
    kv_heads_attr: str | None = None
    hidden_attr: str = "hidden_size"
    is_encoder: bool = False
    projection_is_conv1d: bool = False
    qkv_layout: str = "separate"  # a name of QKV_LAYOUTS (headprune.surgery.remote_modeling): one class a layout
    qkv_paths: tuple[str, ...] = ()  # from a layer: (q, k, v) for "separate", (qkv,) for fused layouts
    count_attrs: tuple[str, ...] = ()  # attention-module attributes holding the query-head count
    # transformers' model classes whose output reads the last layer at the first position alone (a sequence
    # classifier's pooler): the evaluator computes that layer from its attention output on there only
    # (headprune.evaluation.first_position)
    first_position_classes: tuple[str, ...] = ()
    # the sub-config holding the heads' sizes (a vision-language model's "text_config"); empty: the config itself
    text_config: str = ""
    # the model types that sub-config may have, where the language model can be of several families (LLaVA's);
    # another is refused when the adapter is looked up. Empty: whatever the family ships.
    text_model_types: tuple[str, ...] = ()
    # (path from a layer, "q" or "kv"): parameters with a row per query (or key/value) head, sliced with their heads:
    # GPT-OSS's attention sinks, Cohere's per-head q/k norm weights. A path a model lacks is skipped.
    head_params: tuple[tuple[str, str], ...] = ()
    # (path from a layer, "q" or "kv"): further linear projections whose output rows are head_dim rows a head, sliced
    # with their heads like q/k/v: DeBERTa-v2's projections of the relative positions. A path a model lacks is skipped.
    head_projections: tuple[tuple[str, str], ...] = ()
    # a layer returns (hidden states, attention weights) (DeBERTa): a skipped layer's stand-in must return a pair too
    layer_returns_tuple: bool = False
    # (config attribute, why): a family setting headprune cannot prune exactly, refused when the attribute is true
    unsupported_settings: tuple[tuple[str, str], ...] = ()
    # why removing a head's rows cannot give the masked model's outputs (empty: it can); such a family exports dense
    dense_only: str = ""

    def __post_init__(self) -> None:
        if self.qkv_layout not in QKV_LAYOUTS:  # slicing a layout it does not know would write a wrong model
            raise ValueError(f"adapter {self.family!r}: unknown qkv_layout {self.qkv_layout!r}; known: "
                             f"{', '.join(QKV_LAYOUTS)}")

    def module_paths(self) -> dict:
        """The paths export records in config.json, so a pruned checkpoint can be rebuilt without headprune."""
        return {"layers": self.layers_path, "attention": self.attention_path, "output": self.output_projection_path,
                "qkv": list(self.qkv_paths), "qkv_layout": self.qkv_layout, "count_attrs": list(self.count_attrs),
                **({"head_params": [list(p) for p in self.head_params]} if self.head_params else {}),
                **({"head_projections": [list(p) for p in self.head_projections]} if self.head_projections else {})}

    def check_config(self, config: PretrainedConfig, where: str = "config.json") -> None:
        """Refuse a config no model can be built from, before any weight is allocated: sizes and counts that are
        not positive whole numbers, key/value heads that do not divide the query heads, no head at all.

        Raises:
            UnsupportedModelError: naming the field (``where``: the file, as the message shows it).
        """
        if self.text_config:
            where, config = f"{where} {self.text_config}", getattr(config, self.text_config)
        fields = (self.hidden_attr, self.heads_attr, "num_hidden_layers", "vocab_size", "intermediate_size",
                  "head_dim", "max_position_embeddings", *((self.kv_heads_attr,) if self.kv_heads_attr else ()))
        for name in fields:
            value = getattr(config, name, None)
            if value is None and name not in (self.hidden_attr, self.heads_attr, "num_hidden_layers"):
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise UnsupportedModelError(f"{where}: {name} must be a whole number of at least 1, not {value!r}")
        for name, why in self.unsupported_settings:
            if getattr(config, name, None):
                raise UnsupportedModelError(f"{where}: {name} is set: {why}")
        heads = int(getattr(config, self.heads_attr))
        kv_heads = getattr(config, self.kv_heads_attr, None) if self.kv_heads_attr else None
        if kv_heads and heads % kv_heads:
            raise UnsupportedModelError(f"{where}: {self.kv_heads_attr} ({kv_heads}) must divide "
                                        f"{self.heads_attr} ({heads})")
        if getattr(config, "head_dim", None) is None and int(getattr(config, self.hidden_attr)) % heads:
            raise UnsupportedModelError(f"{where}: {self.hidden_attr} ({getattr(config, self.hidden_attr)}) is not "
                                        f"a multiple of {self.heads_attr} ({heads}) and no head_dim is given")

    def grid(self, config: PretrainedConfig) -> HeadGrid:
        """Layers, query heads, KV heads and head size from a config."""
        config = getattr(config, self.text_config) if self.text_config else config
        num_heads = int(getattr(config, self.heads_attr))
        kv_heads = getattr(config, self.kv_heads_attr, None) if self.kv_heads_attr else None
        head_dim = getattr(config, "head_dim", None) or int(getattr(config, self.hidden_attr)) // num_heads
        return HeadGrid(
            num_layers=int(config.num_hidden_layers),
            num_heads=num_heads,
            num_kv_heads=int(kv_heads) if kv_heads else num_heads,
            head_dim=int(head_dim),
        )

    def layers_container(self, model: PreTrainedModel) -> nn.ModuleList:
        """The model's own ``ModuleList`` of layers (entries can be swapped in place)."""
        return get_path(model.base_model, self.layers_path)

    def layers(self, model: PreTrainedModel) -> list[nn.Module]:
        return list(self.layers_container(model))

    def attention(self, model: PreTrainedModel, layer: int) -> nn.Module:
        return get_path(self.layers(model)[layer], self.attention_path)

    def output_projection(self, model: PreTrainedModel, layer: int) -> nn.Module:
        return get_path(self.layers(model)[layer], self.output_projection_path)
