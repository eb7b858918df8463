"""Bare encoders in GGUF (BERT, RoBERTa), as llama.cpp's converter writes them (``BertModel``, ``RobertaModel``):
llama.cpp's ``bert`` graph gives their embeddings, each token's last hidden state, which headprune's encoder scorer
mean-pools over real tokens; the file says so (``bert.pooling_type`` mean), so llama.cpp's own embedding tools pool
it as headprune scored it.

What the graph computes (``src/models/bert.cpp``): token, position and token-type embeddings (row 0: "sentence A",
what transformers adds without ``token_type_ids``), their LayerNorm, then per layer the attention with its biases
and the post-norms, and an MLP with GELU. Where it differs from transformers it is refused or noted:

- GELU: llama.cpp's is the tanh approximation through a float16 table (``ggml_vec_gelu_f32``), transformers'
  BERT the exact one; on the suite's tiny models the embeddings differ by 2.7e-5 (7.5e-6 of the largest), the same
  with transformers' tanh GELU: the table's rounding, not the approximation, is what shows there. The file is gated
  as Gemma's logits are (``gguf_families.GELU_TABLE``, 1e-3 of the largest value) and the record says why.
- RoBERTa's positions start after its padding id: the converter drops those rows of ``position_embd`` (and counts
  the context without them), so llama.cpp's position 0 is transformers' ``pad_token_id + 1``.
- The pooler (``pooler.dense``: BERT's next-sentence head on the first token) is not read by the graph and is
  left out, as the converter leaves it; relative position embeddings and other activations are refused.
"""

from __future__ import annotations

from typing import Any

ENCODER_NOTE = ("llama.cpp's BERT graph computes GELU by its tanh approximation through a float16 table, so the "
                "embeddings are checked against the masked original's within {tolerance:g} of the largest value; the "
                "file holds the bare encoder (pooling mean: each text's embedding is the mean of its tokens' last "
                "hidden states, as headprune scores it), without the pooler, which llama.cpp's graph does not read")
GELUS = ("gelu", "gelu_new", "gelu_pytorch_tanh")  # exact, and the tanh approximation llama.cpp computes


def bert_keys(writer: Any, config: Any) -> None:
    """The converter's ``BertModel.set_gguf_parameters``: LayerNorm's epsilon, bidirectional attention, the
    pooling (mean, headprune's), and the token types the embedding holds (llama.cpp checks the tensor by it)."""
    import gguf

    writer.add_layer_norm_eps(float(config.layer_norm_eps))
    writer.add_causal_attention(False)
    writer.add_pooling_type(gguf.PoolingType.MEAN)
    writer.add_token_type_count(int(config.type_vocab_size))


def bert_refusal(config: Any) -> str | None:
    """What llama.cpp's bert graph would compute otherwise (None: nothing)."""
    positions = getattr(config, "position_embedding_type", None) or "absolute"
    if positions != "absolute":
        return f"its position embeddings are {positions}, and llama.cpp's bert graph adds absolute ones"
    activation = getattr(config, "hidden_act", "gelu")
    if activation not in GELUS:
        return f"its MLP's activation is {activation}, and llama.cpp's bert graph computes GELU"
    if getattr(config, "is_decoder", False) or getattr(config, "add_cross_attention", False):
        return "it is configured as a decoder, and llama.cpp's bert graph is bidirectional"
    if not getattr(config, "type_vocab_size", 0):
        return "it has no token type embedding, which llama.cpp's bert graph reads"
    return None


def roberta_offset(config: Any) -> int:
    """RoBERTa's first position row: transformers numbers positions from ``pad_token_id + 1``."""
    return int(config.pad_token_id) + 1
