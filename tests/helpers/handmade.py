"""A tiny Llama built by hand with one deliberately harmful head, and its tasks.

Residual stream of 16 dims, one layer of 4 heads (head_dim 4), MLP switched off. Each prompt is a single
token ``x{c}_{k}`` whose embedding is ``s * c * e0 + n_k * e1``: ``c = +-1`` is the cue that decides the
answer, ``n_k`` a per-token nuisance value. The unembedding reads ``(e0 + w * e1)`` for `` A`` and the
negative for `` B``, so the model answers by the sign of ``c * s + w * n_k``: right unless the nuisance is
large and of the other sign. Head L0.H0 copies the (normalised) cue and writes it back *negated*: it pushes
every example towards the wrong answer, more so where the nuisance is small. Removing it can only rescue
examples, never damage them. Heads H1..H3 write nothing (zero output projection).

``cue_task`` labels by the cue (the head hurts it); ``reversed_task`` labels the opposite way, so the
harmful head helps it: the control on which find must show the cost.
"""

from __future__ import annotations

import random

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from headprune.models import wrap_model
from headprune.tasks import Example, Task

TOKENS_PER_CUE = 500
CUE_SCALE, NUISANCE_SD, READ_NUISANCE, HARM = 1.0, 2.0, 0.3, 0.2


def _vocab() -> list[str]:
    return ["<pad>", "<eos>", "A", "B"] + [f"x{c}_{k}" for c in ("p", "n") for k in range(TOKENS_PER_CUE)]


def build_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {token: i for i, token in enumerate(_vocab())}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="<eos>")


def build_model(seed: int = 0):  # noqa: ANN201
    """The hand-made model as a LoadedModel (a real LlamaForCausalLM with set weights)."""
    tokenizer = build_tokenizer()
    vocab = _vocab()
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=16, intermediate_size=8, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=4, head_dim=4, tie_word_embeddings=False,
                         pad_token_id=0, eos_token_id=1, bos_token_id=1, max_position_embeddings=32)
    model = LlamaForCausalLM(config)
    generator = torch.Generator().manual_seed(seed)
    nuisance = torch.randn(TOKENS_PER_CUE, generator=generator) * NUISANCE_SD
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.zero_()
        for norm in (model.model.layers[0].input_layernorm, model.model.layers[0].post_attention_layernorm,
                     model.model.norm):
            norm.weight.fill_(1.0)
        embed = model.model.embed_tokens.weight  # (V, 16)
        for k in range(TOKENS_PER_CUE):
            for c, name in ((1.0, "p"), (-1.0, "n")):
                row = vocab.index(f"x{name}_{k}")
                embed[row, 0] = CUE_SCALE * c
                embed[row, 1] = nuisance[k]
        head = model.model.layers[0].self_attn
        head.v_proj.weight[0, 0] = 1.0  # head 0, value dim 0 <- normalised cue
        head.o_proj.weight[0, 0] = -HARM  # written back negated into the cue direction
        readout = torch.zeros(16)
        readout[0], readout[1] = 1.0, READ_NUISANCE
        model.lm_head.weight[vocab.index("A")] = readout
        model.lm_head.weight[vocab.index("B")] = -readout
    return wrap_model(model, tokenizer, name="handmade-harmful-head")


def _examples(label_of, seed: int | None = None) -> tuple[Example, ...]:  # noqa: ANN001
    rng = random.Random(seed)
    examples = []
    for k in range(TOKENS_PER_CUE):
        for c, name in ((1, "p"), (-1, "n")):
            answer = label_of(c) if seed is None else rng.randrange(2)
            examples.append(Example(f"x{name}_{k}", prompt=f"x{name}_{k}", choices=(" A", " B"), answer=answer))
    return tuple(examples)


def cue_task() -> Task:
    return Task("cue", "choice", _examples(lambda c: 0 if c > 0 else 1))


def reversed_task() -> Task:
    return Task("reversed-cue", "choice", _examples(lambda c: 1 if c > 0 else 0))


def random_label_task(seed: int) -> Task:
    return Task(f"random-labels-{seed}", "choice", _examples(None, seed=seed))
