"""What every architecture adapter says about a family: where the heads live and how many there are.

An adapter is declarative: paths from the model's base module to its layers, and from a layer to the
attention output projection (the module whose *input* is the concatenation of the query heads' outputs,
``(B, T, num_heads * head_dim)``). Ablation, search and export only talk to models through an adapter.

Layers may differ. Each layer is of a kind (:meth:`Adapter.kinds`): an attention layer, whose heads the adapter's own
fields place (its attention :class:`Mixer`), a layer of another mixer the family declares (``Adapter.mixers``:
Qwen3.5's Gated DeltaNet layers, whose value heads are removed the same way), or a layer without heads (a Mamba or
convolution layer, left untouched). Each layer's counts and widths are read from the config by its mixer's
attributes, and a family whose config sizes layers apart adjusts them (``Adapter.layer_heads``): the result is the
model's :class:`~headprune.heads.HeadGrid`, one :class:`~headprune.heads.LayerHeads` a layer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields

from torch import nn
from transformers import PretrainedConfig, PreTrainedModel

from headprune.errors import UnsupportedModelError
from headprune.heads import ATTENTION, HeadGrid, LayerHeads
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
class Mixer:
    """Where one kind of layer keeps its heads (the layer's token mixer: softmax attention, a Gated DeltaNet), and the
    config attributes that count and size them. An :class:`Adapter`'s own fields of the same names are its attention
    layers' mixer; a family with layers of another kind whose heads are removed the same way declares that kind in
    ``Adapter.mixers``.

    Attributes:
        name: the layers' kind, as :class:`~headprune.heads.LayerHeads`, records and reports name it.
        attention_path: path from a layer to the module (whose sizes :meth:`QkvLayout.resize` and ``count_attrs``
            set).
        output_projection_path: path from a layer to the projection whose *input* is the heads' outputs side by
            side, ``out_dim`` each: where a head is silenced.
        projection_is_conv1d: the output projection is a GPT-2 ``Conv1D`` (weight is ``(in, out)``).
        qkv_layout: a name of ``QKV_LAYOUTS`` (headprune.surgery.remote_modeling): one class a layout.
        qkv_paths: from a layer, the projections that layout slices, in its order of parts: (q, k, v) for
            "separate", (qkv,) for fused layouts.
        count_attrs: module attributes holding the head count.
        head_params: (path from a layer, "q" or "kv"): parameters with a row per query (or key/value) head, sliced
            with their heads: GPT-OSS's attention sinks, Cohere's per-head q/k norm weights, a Gated DeltaNet's
            ``dt_bias``. A path a model lacks is skipped.
        head_projections: (path from a layer, "q" or "kv"): further linear projections whose output rows are
            head_dim rows a head, sliced with their heads like q/k/v: DeBERTa-v2's projections of the relative
            positions. A path a model lacks is skipped.
        heads_attr / kv_heads_attr / head_dim_attr / out_dim_attr: config attributes of the heads' count, their
            key/value heads' (None: one each), a head's width (a config without it: hidden size / heads) and its
            width at the output projection (None: head_dim).
        kv_map: a sliced layer's kept heads may read unevenly many per key/value head (the exported attention
            repeats key/value heads by a map); False where the module's own code cannot (a Gated DeltaNet).
    """

    name: str
    attention_path: str
    output_projection_path: str
    projection_is_conv1d: bool = False
    qkv_layout: str = "separate"
    qkv_paths: tuple[str, ...] = ()
    count_attrs: tuple[str, ...] = ()
    head_params: tuple[tuple[str, str], ...] = ()
    head_projections: tuple[tuple[str, str], ...] = ()
    heads_attr: str = "num_attention_heads"
    kv_heads_attr: str | None = None
    head_dim_attr: str = "head_dim"
    out_dim_attr: str | None = None
    kv_map: bool = True

    def __post_init__(self) -> None:
        if self.qkv_layout not in QKV_LAYOUTS:  # slicing a layout it does not know would write a wrong model
            raise ValueError(f"mixer {self.name!r}: unknown qkv_layout {self.qkv_layout!r}; known: "
                             f"{', '.join(QKV_LAYOUTS)}")

    def paths(self) -> dict:
        """What an export records of it in config.json, so a pruned checkpoint can be rebuilt without headprune."""
        return {"attention": self.attention_path, "output": self.output_projection_path, "qkv": list(self.qkv_paths),
                "qkv_layout": self.qkv_layout, "count_attrs": list(self.count_attrs),
                **({"head_params": [list(p) for p in self.head_params]} if self.head_params else {}),
                **({"head_projections": [list(p) for p in self.head_projections]} if self.head_projections else {})}

    def heads(self, config: PretrainedConfig, hidden_attr: str) -> LayerHeads:
        """A layer's heads as the config's attributes count and size them."""
        heads = int(getattr(config, self.heads_attr))
        kv_heads = getattr(config, self.kv_heads_attr, None) if self.kv_heads_attr else None
        head_dim = int(getattr(config, self.head_dim_attr, None) or int(getattr(config, hidden_attr)) // heads)
        out_dim = int(getattr(config, self.out_dim_attr)) if self.out_dim_attr else head_dim
        return LayerHeads(heads, int(kv_heads) if kv_heads else heads, head_dim, out_dim, self.name, self.kv_map)


# An Adapter's fields that are its attention layers' Mixer's (whose attention always takes a map).
_MIXER_FIELDS = tuple(f.name for f in fields(Mixer) if f.name not in ("name", "kv_map"))


@dataclass(frozen=True)
class Adapter:
    """One architecture family.

    Attributes:
        family: the adapter's name, as records and reports show it (``"llama"``, ``"gpt2"``, ...); the model types it
            serves are the :class:`~headprune.loading.adapters.family.Family` specs that name it.
        layers_path: path from ``model.base_model`` to the list of transformer layers.
        attention_path, output_projection_path, projection_is_conv1d, qkv_layout, qkv_paths, count_attrs,
            head_params, head_projections, heads_attr, kv_heads_attr, head_dim_attr, out_dim_attr: where its
            attention layers keep their heads and what sizes them, as :class:`Mixer`'s fields of the same names.
        hidden_attr: config attribute name of the hidden size.
        is_encoder: bidirectional encoder without an LM head (BERT family).
        mixers: the other kinds of layers whose heads headprune removes, each where it keeps them (Qwen3.5's Gated
            DeltaNet layers, ``"linear_attention"``).
        layer_kinds: ``config -> each layer's kind``: ``"attention"``, a name of ``mixers``, or what a layer without
            heads is (``"mamba"``, ``"conv"``), which headprune leaves untouched. None: every layer attends.
        layer_heads: ``(config, layer, heads) -> heads``: a layer's heads where the config sizes some layers apart
            by attributes of its own (given what its mixer's attributes read, from the layer's own config where the
            config has one: :func:`layer_configs`), or a layer reads another's keys and values (``kv_source``).
        stateful: every layer carries a recurrent state beside its attention (Falcon-H1's Mamba2 mixer): the grid
            is recurrent though each layer's kind is attention (:attr:`~headprune.heads.HeadGrid.stateful`).
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
    # a text model type whose layers keep their heads otherwise -> the adapter that wrapper is read by then (Mistral 3
    # around Mistral 4's latent attention)
    text_adapters: Mapping[str, Adapter] = field(default_factory=dict, compare=False)
    head_params: tuple[tuple[str, str], ...] = ()
    head_projections: tuple[tuple[str, str], ...] = ()
    # a layer returns (hidden states, attention weights) (DeBERTa): a skipped layer's stand-in must return a pair too
    layer_returns_tuple: bool = False
    # (config attribute, why): a family setting headprune cannot prune exactly, refused when the attribute is true
    unsupported_settings: tuple[tuple[str, str], ...] = ()
    # why removing a head's rows cannot give the masked model's outputs (empty: it can); such a family exports dense
    dense_only: str = ""
    head_dim_attr: str = "head_dim"
    out_dim_attr: str | None = None
    mixers: tuple[Mixer, ...] = ()
    layer_kinds: Callable[[PretrainedConfig], Sequence[str]] | None = field(default=None, compare=False)
    layer_heads: Callable[[PretrainedConfig, int, LayerHeads], LayerHeads] | None = field(default=None, compare=False)
    stateful: bool = False
    # config -> each layer: whether a forward pass can start there, fed with its input (the layer cache's checkpoints);
    # None: at every layer. GLM-5's "shared" sparse-attention layers read the keys an earlier layer chose.
    layer_starts: Callable[[PretrainedConfig], Sequence[bool]] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        try:  # the attention layers' mixer, built (and its layout checked) where the adapter is declared
            attention = Mixer(ATTENTION, **{name: getattr(self, name) for name in _MIXER_FIELDS})
        except ValueError as error:
            raise ValueError(f"adapter {self.family!r}: {error}".replace("mixer 'attention': ", "")) from None
        names = [m.name for m in self.mixers]
        if ATTENTION in names or len(set(names)) < len(names):
            raise ValueError(f"adapter {self.family!r}: its mixers' names must be unique and not {ATTENTION!r}")
        object.__setattr__(self, "_mixers", {ATTENTION: attention, **{m.name: m for m in self.mixers}})

    def mixer(self, kind: str) -> Mixer:
        """Where layers of ``kind`` keep their heads.

        Raises:
            ValueError: layers of that kind have no heads headprune removes.
        """
        found = self._mixers.get(kind)
        if found is None:
            raise ValueError(f"{self.family}: {kind} layers have no heads headprune removes")
        return found

    def module_paths(self) -> dict:
        """The paths export records in config.json, so a pruned checkpoint can be rebuilt without headprune: the
        layers', the attention layers' (and each other mixer's under ``mixers``)."""
        other = {"mixers": {m.name: m.paths() for m in self.mixers}} if self.mixers else {}
        return {"layers": self.layers_path, **self.mixer(ATTENTION).paths(), **other}

    def sizes(self, config: PretrainedConfig) -> PretrainedConfig:
        """The config that sizes the heads: ``config`` itself, or its ``text_config``."""
        return getattr(config, self.text_config) if self.text_config else config

    def kinds(self, config: PretrainedConfig) -> list[str]:
        """Each layer's kind (of the config that sizes the heads, :meth:`sizes`).

        Raises:
            UnsupportedModelError: the family names a kind for more or fewer layers than the config has.
        """
        layers = int(config.num_hidden_layers)
        kinds = list(self.layer_kinds(config)) if self.layer_kinds else [ATTENTION] * layers
        if len(kinds) != layers:
            raise UnsupportedModelError(f"config.json: {layers} layers (num_hidden_layers) but {len(kinds)} layer "
                                        "types")
        return kinds

    def check_config(self, config: PretrainedConfig, where: str = "config.json") -> None:
        """Refuse a config no model can be built from, before any weight is allocated: sizes and counts that are
        not positive whole numbers, key/value heads that do not divide the query heads, no head at all.

        Raises:
            UnsupportedModelError: naming the field (``where``: the file, as the message shows it).
        """
        if self.text_config:
            where = f"{where} {self.text_config}"
        config = self.sizes(config)
        _whole(config, where, (self.hidden_attr, "num_hidden_layers"), ("vocab_size", "intermediate_size",
                                                                          "max_position_embeddings"))
        for name, why in self.unsupported_settings:
            if getattr(config, name, None):
                raise UnsupportedModelError(f"{where}: {name} is set: {why}")
        for kind, layer in zip(self.kinds(config), layer_configs(config)):
            if kind in self._mixers:
                self._check_mixer(layer, where, self._mixers[kind])

    def _check_mixer(self, config: PretrainedConfig, where: str, mixer: Mixer) -> None:
        optional = (mixer.head_dim_attr, *(a for a in (mixer.kv_heads_attr, mixer.out_dim_attr) if a))
        _whole(config, where, (mixer.heads_attr,), optional)
        heads = int(getattr(config, mixer.heads_attr))
        kv_heads = getattr(config, mixer.kv_heads_attr, None) if mixer.kv_heads_attr else None
        if kv_heads and heads % kv_heads:
            raise UnsupportedModelError(f"{where}: {mixer.kv_heads_attr} ({kv_heads}) must divide "
                                        f"{mixer.heads_attr} ({heads})")
        if getattr(config, mixer.head_dim_attr, None) is None and int(getattr(config, self.hidden_attr)) % heads:
            raise UnsupportedModelError(f"{where}: {self.hidden_attr} ({getattr(config, self.hidden_attr)}) is not "
                                        f"a multiple of {mixer.heads_attr} ({heads}) and no {mixer.head_dim_attr} "
                                        "is given")

    def grid(self, config: PretrainedConfig) -> HeadGrid:
        """Each layer's heads (kind, counts and widths) from a config."""
        config = self.sizes(config)
        layers = []
        for index, (kind, layer) in enumerate(zip(self.kinds(config), layer_configs(config))):
            mixer = self._mixers.get(kind)
            heads = LayerHeads(0, 0, 0, 0, kind) if mixer is None else mixer.heads(layer, self.hidden_attr)
            layers.append(self.layer_heads(config, index, heads) if self.layer_heads else heads)
        return HeadGrid(tuple(layers), self.stateful)

    def layers_container(self, model: PreTrainedModel) -> nn.ModuleList:
        """The model's own ``ModuleList`` of layers (entries can be swapped in place)."""
        return get_path(model.base_model, self.layers_path)

    def layers(self, model: PreTrainedModel) -> list[nn.Module]:
        return list(self.layers_container(model))

    def layer_mixer(self, model: PreTrainedModel, layer: int) -> Mixer:
        """Where layer ``layer`` of ``model`` keeps its heads.

        Raises:
            ValueError: that layer has none.
        """
        return self.mixer(self.kinds(self.sizes(model.config))[layer])

    def attention(self, model: PreTrainedModel, layer: int) -> nn.Module:
        return get_path(self.layers(model)[layer], self.layer_mixer(model, layer).attention_path)

    def output_projection(self, model: PreTrainedModel, layer: int) -> nn.Module:
        return get_path(self.layers(model)[layer], self.layer_mixer(model, layer).output_projection_path)


def layer_configs(config: PretrainedConfig) -> list[PretrainedConfig]:
    """Each layer's config: where the config sizes layers apart itself (transformers' ``per_layer_config``, which
    Gemma 4 uses for its full-attention layers' head size and key/value heads, and whose per-layer attributes the
    model-wide config refuses to give), the layer's view of it; else the config itself for every layer."""
    if getattr(config, "is_heterogeneous", False):
        return list(config.per_layer_config)
    return [config] * int(config.num_hidden_layers)


def _whole(config: PretrainedConfig, where: str, required: Sequence[str], optional: Sequence[str]) -> None:
    """Refuse a count or size that is not a whole number of at least 1 (an ``optional`` one may be absent)."""
    for name in (*required, *optional):
        value = getattr(config, name, None)
        if value is None and name not in required:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UnsupportedModelError(f"{where}: {name} must be a whole number of at least 1, not {value!r}")
