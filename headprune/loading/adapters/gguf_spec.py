"""What a family's GGUF file is, as its family file declares it: llama.cpp's architecture for it (the converter's
choice, ``convert_hf_to_gguf.py``'s class for the model type), the keys of its own that the graph reads, and what
the graph would compute otherwise (refused). The writer (:mod:`headprune.exporter.gguf`) reads these; nothing here
imports gguf-py until a key is written.

The llama.cpp converter keeps one class per architecture, each overriding only what differs; a :class:`Gguf` is
that class's data: the fields a family leaves at their defaults are llama.cpp's ``llama`` graph's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

# The gate (x the largest value) of files whose GELU is llama.cpp's float16 table: Gemma's, GPT-2's and BERT's.
# llama.cpp's CPU GELU rounds input and output through float16 (ggml_vec_gelu_f32 under GGML_GELU_FP16): on the
# suite's tiny Gemma 2 that alone moves the logits by 2.3e-4 (3.5e-4 of the largest); transformers with the same
# rounding done in torch comes within 3e-7 on one prompt and 1.2e-4 of the largest logit over the test prompts. So
# those files are gated at 1e-3 of the largest logit, not GGUF's 5e-5, and the record says why.
GELU_TABLE = 1e-3
TANH_GELU = ("gelu_pytorch_tanh",)
# llama.cpp's gpt2 and gptneox graphs compute GELU's tanh form (ggml_gelu, through the float16 table); Pythia's configs
# name the exact (erf) GELU, which differs from it by at most 4.7e-4 (a note says so; within the same gate).
GPT_GELU = ("gelu_new", "gelu_pytorch_tanh", "gelu_fast")


class GgufTensors:
    """A family's tensors as llama.cpp's graph reads them where they differ from the model's beyond a name (the
    converter's ``modify_tensors``: reordered, transformed, renamed), and back for a lossy file's check. The default
    changes nothing."""

    def to_llama_cpp(self, name: str, data: Any, config: Any) -> tuple[str, Any]:
        """``(name, data)``: the name gguf-py's tensor map finds the GGUF tensor by, and the float32 data it holds."""
        return name, data

    def from_llama_cpp(self, name: str, data: Any, config: Any) -> Any:
        """The model's tensor ``name`` back from the file's (de-quantised) data, the inverse of :meth:`to_llama_cpp`
        (its shape restored by the caller)."""
        return data


EXPERT_LAYOUTS = ("rows", "columns", "interleaved")  # Gguf.experts: headprune.exporter.gguf.experts splits each


@dataclass(frozen=True)
class Gguf:
    """How one model type is written to GGUF.

    Attributes:
        arch: llama.cpp's architecture (gguf-py's ``MODEL_ARCH_NAMES``).
        permuted: llama.cpp rotates adjacent pairs in this graph (``LLAMA_ROPE_TYPE_NORM``): q/k rows are permuted
            as the converter's ``LlamaModel.permute`` does.
        pairs: the checkpoint's RoPE rotates adjacent pairs already (ERNIE 4.5): its q/k rows are never permuted,
            in a sliced file (deci, which rotates pairs) either.
        dense_only: why a sliced file cannot be written (None: it is written as llama.cpp's ``deci``, or in ``arch``
            where ``per_layer``).
        per_layer: llama.cpp's graph for ``arch`` sizes each layer by its own head counts (``n_head(il)``,
            ``n_head_kv(il)``: Gemma 4's), so a sliced file is written in it, with per-layer arrays.
        kv_marks_recurrent: the graph tells a layer without attention (a Mamba2 or convolution layer) by its 0
            key/value heads: the counts are written a layer each, such a layer given the attention layers' query
            head count.
        arch_of: ``config -> the architecture``, where the config picks among the converter's (a Nemotron-H with
            experts is llama.cpp's ``nemotron_h_moe``); None: ``arch``.
        keys: ``(gguf.GGUFWriter, config) -> None``, the keys of its own the graph reads.
        refuse: ``config -> reason or None``, what llama.cpp's graph would compute otherwise.
        k_quants: llama.cpp's choice of K-quant tensor types is reproduced (``exporter.gguf.quant``) for its tensors.
        activation: the MLP's, as the config names it (those llama.cpp's graph computes).
        norm_offset: added to every norm gain (Gemma's RMSNorm scales by (1 + w), llama.cpp's by w).
        tolerance: the runtime gate's, where llama.cpp's kernels round (:data:`GELU_TABLE`).
        experts: how transformers holds a layer's fused experts (:mod:`headprune.exporter.gguf.experts`): ``rows``
            (Mixtral's ``gate_up_proj``: experts x (gate rows, up rows) x hidden), ``columns`` (Llama 4's, for
            x @ W: experts x hidden x (gate columns, up columns)) or ``interleaved`` (GPT-OSS's, x @ W, gate and up
            columns alternating).
        sliding_window: the config's sliding window is written, and llama.cpp's graph applies it.
        gated: a gated MLP without biases; else up and down projections with biases (GPT-2, NeoX).
        rotary: RoPE keys are written (GPT-2 has learned positions: ``position_embd``).
        ffn_length: ``config -> the MLP's width``, where not ``intermediate_size`` (0: none written; a list: one a
            layer, as Nemotron-H's graph tells its MLP layers by theirs).
        own_output: the graph reads ``output.weight`` even where the embeddings are tied: written then.
        encoder: a bare encoder: llama.cpp's graph gives its last hidden states (embeddings), not logits.
        position_offset: ``config -> position rows the file leaves out`` (RoBERTa's).
        dropped: tensors (prefixes) llama.cpp's graph does not read, left out as the converter does.
        tensors: tensors stored otherwise than the model holds them (:class:`GgufTensors`).
        layer_scalars: (a layer's parameter, a GGUF key): scalars of every layer that llama.cpp reads from its
            metadata as one array a key, not as tensors (Apertus's xIELU: ``mlp.act_fn.alpha_p``, ``xielu.alpha_p``).
        renamed: (transformers' module path, the checkpoint's): where transformers loads a tensor under another name
            than the checkpoint's, which llama.cpp's converter and gguf-py's names read (ERNIE 4.5 MoE's router
            statistics, which transformers 5 moved into the router).
        rope_freqs: the graph reads Llama 3.1-style RoPE factors (``rope_freqs``), as its llama graph does.
        latent: ``config -> (key length, value length, rotary dimensions)`` where llama.cpp's graph caches one latent
            key/value head a layer, not the heads' keys and values (multi-head latent attention, as the converter's
            ``DeepseekV2Model`` writes it: ``head_count_kv`` 1, the key the latent and the rotary key, the value the
            latent, no values cached apart).
        split: ``(name, float32 data, config) -> {GGUF tensor name: data}`` for a model tensor the converter stores as
            several (MLA's ``kv_b_proj`` as ``attn_k_b`` and ``attn_v_b``), else None; ``join``: ``(name, a file's
            de-quantised tensors, config) -> data`` its inverse (None: not such a tensor), for a lossy file's check.
        writes_with: the ``GGUFWriter`` methods its ``keys`` call beyond a plain Llama file's: a gguf-py without
            them does not know the architecture as this family writes it (refused in one line).
        holds: a tensor and a metadata key its file holds that a plain Llama file does not: the suite runs every
            family's file in llama.cpp against the masked original and checks both are there
            (tests/test_gguf_families.py; Llama, Mistral, Qwen2 and Qwen3 are tested in test_gguf.py, the bare
            encoders in test_gguf_encoders.py).
        variant: config values of the family's tiny model (``Family.tiny``) for that test, where llama.cpp's graph
            computes only some of what the config can set.
        refused: config values of the tiny model that llama.cpp's graph would compute otherwise, and words of the
            refusal (``refuse``'s) that its export must give in one line; the suite checks it.
    """

    arch: str
    permuted: bool = False
    pairs: bool = False
    dense_only: str | None = None
    per_layer: bool = False
    kv_marks_recurrent: bool = False
    arch_of: Callable[[Any], str] | None = None
    keys: Callable[[Any, Any], None] | None = None
    refuse: Callable[[Any], str | None] | None = None
    k_quants: bool = False
    activation: tuple[str, ...] = ("silu",)
    norm_offset: float = 0.0
    tolerance: float | None = None
    experts: str = "rows"
    sliding_window: bool = False
    gated: bool = True
    rotary: bool = True
    ffn_length: Callable[[Any], int | list[int]] | None = None
    own_output: bool = False
    encoder: bool = False
    position_offset: Callable[[Any], int] | None = None
    dropped: tuple[str, ...] = ()
    tensors: GgufTensors = field(default_factory=GgufTensors)
    layer_scalars: tuple[tuple[str, str], ...] = ()
    renamed: tuple[tuple[str, str], ...] = ()
    rope_freqs: bool = False
    latent: Callable[[Any], tuple[int, int, int]] | None = None
    split: Callable[[str, Any, Any], dict[str, Any] | None] | None = None
    join: Callable[[str, Mapping[str, Any], Any], Any] | None = None
    holds: tuple[str, str] | tuple[()] = ()
    writes_with: tuple[str, ...] = ()
    variant: Mapping[str, Any] = field(default_factory=dict)
    refused: tuple[Mapping[str, Any], str] | tuple[()] = ()

    def __post_init__(self) -> None:
        if self.experts not in EXPERT_LAYOUTS:  # another would be split as one of these, into wrong tensors
            raise ValueError(f"Gguf {self.arch!r}: unknown experts layout {self.experts!r}; known: "
                             f"{', '.join(EXPERT_LAYOUTS)}")

    def arch_for(self, config: Any) -> str:
        """llama.cpp's architecture for ``config``."""
        return self.arch_of(config) if self.arch_of else self.arch


def one_count(arch: str, lacks: str = "", name: str = "") -> str:
    """Why a family's GGUF is dense only: llama.cpp sizes every layer by layer 0's head counts except in its deci
    graph, and deci is a plain Llama layer, without what the family needs (``lacks``)."""
    why = f"llama.cpp's {arch} graph takes one head count for every layer"
    return why + (f" and its graph for per-layer head counts (deci) has no {lacks}, which {name} needs" if lacks else "")


def expert_keys(writer: Any, config: Any) -> None:
    """Mixture-of-experts keys (the converter's ``set_gguf_parameters``): how many experts, how many each token
    uses, and an expert's own hidden size where the config names one apart from the dense MLP's."""
    writer.add_expert_count(int(getattr(config, "num_local_experts", None) or config.num_experts))
    writer.add_expert_used_count(int(config.num_experts_per_tok))
    if getattr(config, "moe_intermediate_size", None):
        writer.add_expert_feed_forward_length(int(config.moe_intermediate_size))


def layer_norm_keys(writer: Any, config: Any) -> None:
    """The epsilon of a LayerNorm family (OLMo's norms have no gain and a fixed 1e-5; Cohere and GPT-2 name their
    own)."""
    eps = getattr(config, "layer_norm_eps", None) or getattr(config, "layer_norm_epsilon", None)
    writer.add_layer_norm_eps(float(eps or 1e-5))


__all__ = ["EXPERT_LAYOUTS", "GELU_TABLE", "GPT_GELU", "Gguf", "GgufTensors", "TANH_GELU", "expert_keys",
           "layer_norm_keys", "one_count"]
