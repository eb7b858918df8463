"""Bare encoders in GGUF (BERT, RoBERTa, ModernBERT), as llama.cpp's converter writes them (``BertModel``,
``RobertaModel``, ``ModernBertModel``): llama.cpp's ``bert`` and ``modern-bert`` graphs give their embeddings, each
token's last hidden state, which headprune's encoder scorer mean-pools over real tokens; the file says so
(``pooling_type`` mean), so llama.cpp's own embedding tools pool it as headprune scored it.

What the graph computes (``src/models/bert.cpp``): token, position and token-type embeddings (row 0: "sentence A",
what transformers adds without ``token_type_ids``), their LayerNorm, then per layer the attention with its biases
and the post-norms, and an MLP with GELU. Where it differs from transformers it is refused or noted:

- GELU: llama.cpp's is the tanh approximation through a float16 table (``ggml_vec_gelu_f32``), transformers'
  BERT the exact one; on the suite's tiny models the embeddings differ by 2.7e-5 (7.5e-6 of the largest), and with
  the MLP's inputs 30 times larger (GELU's curved range) by 6.2e-4 (2.0e-4 of the largest; 6.5e-4 against
  transformers' tanh GELU: the table's rounding is most of it). The file is gated as Gemma's logits are
  (``gguf_spec.GELU_TABLE``, 1e-3 of the largest value) and the record says why.
- RoBERTa's positions start after its padding id: the converter drops those rows of ``position_embd`` (and counts
  the context without them), so llama.cpp's position 0 is transformers' ``pad_token_id + 1``.
- The pooler (``pooler.dense``: BERT's next-sentence head on the first token) is not read by the graph and is
  left out, as the converter leaves it; relative position embeddings and other activations are refused.

Each encoder's keys and refusals are its family file's (``loading/adapters/bert.py``, ``modernbert.py``); this
module checks an export against them.

ModernBERT's graph computes what transformers does to 1.4e-6 even with the MLP's inputs 30 times larger (its GEGLU
is the exact GELU; against transformers' tanh GELU it differs by 3.7e-4, so only ``gelu`` is written): GGUF's usual
tolerance. Its local layers' window is written as the converter writes it (``sliding_window``: the whole
``local_attention``, which llama.cpp halves on each side as transformers does; measured: any other value moves the
embeddings by 1e-2), with the local/global pattern per layer and the local RoPE base.
"""

from __future__ import annotations

from typing import Any

from headprune.errors import UnsupportedModelError
from headprune.exporter.gguf.quant import K_QUANTS

ENCODER_NOTE = ("the file holds the bare encoder (pooling mean: each text's embedding is the mean of its tokens' last "
                "hidden states, as headprune scores it), without a pooler or a masked-LM head, which llama.cpp's "
                "graph does not read")
GELU_TABLE_NOTE = ("llama.cpp's BERT graph computes GELU by its tanh approximation through a float16 table, so the "
                   "embeddings are checked against the masked original's within {tolerance:g} of the largest value")


def check_encoder(lm: Any, family: Any, layout: str, gguf_type: str, other_formats: str) -> str:
    """The architecture of a bare encoder's file (``family``: its family file's ``Gguf``). llama.cpp's graphs give
    embeddings: the converter writes no head of a masked-LM model, and a classifier's only for llama.cpp's reranking
    pooling, which headprune does not check.

    Raises:
        UnsupportedModelError: another head, a K-quant, a configuration the graph computes otherwise, a sliced file.
    """
    config = lm.model.config
    model_type = config.model_type
    if lm.task_head != "base":
        raise UnsupportedModelError(
            f"{lm.name} ({model_type}, {lm.task_head} head) cannot be exported as GGUF: llama.cpp's {family.arch} "
            f"graph gives the encoder's embeddings (its last hidden states), not a {lm.task_head} head; GGUF takes "
            f"the bare encoder ({model_type} loaded as its base model, what headprune scores by embedding "
            f"similarity), and this model can be exported as {other_formats}")
    if gguf_type in K_QUANTS:
        raise UnsupportedModelError(f"{lm.name}: --gguf-type {gguf_type} is not written for {model_type}: give f32, "
                                    "f16, bf16 or q8_0")
    odd = family.refuse(config) if family.refuse else None
    if odd:
        raise UnsupportedModelError(f"{lm.name}: GGUF export of this {model_type} model is not written: {odd}; this "
                                    f"model can be exported as {other_formats}")
    if layout == "sliced":
        raise UnsupportedModelError(f"{lm.name}: a sliced GGUF cannot be written: {family.dense_only}; give "
                                    f"--layout dense (every head kept in shape, removed ones zeroed), or export "
                                    f"sliced as {other_formats}")
    return family.arch
