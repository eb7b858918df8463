"""The model of the experiment: a one-layer, attention-only GPT-2 and a word-level tokenizer.

It is a stock ``GPT2LMHeadModel`` (a family headprune supports), so ``eval``, ``find`` and ``export`` run on
it unchanged. Its MLP weights and biases are zero and frozen: the block's MLP adds exactly nothing, which
makes it the multi-head softmax-attention model of the theory (one attention layer between embedding and
unembedding). Learned absolute positions let a head find "the first symbol" or "the last symbol" directly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

from headprune.synthetic.data import FILLERS, QUERY, SYMBOLS

SPECIAL = ("<pad>", "<eos>")


@dataclass(frozen=True)
class Architecture:
    """Size of the attention-only model; ``init_std`` is the (small) standard deviation of every weight."""

    heads: int = 4
    head_dim: int = 8
    positions: int = 16
    init_std: float = 0.02


def build_tokenizer() -> PreTrainedTokenizerFast:
    """Whitespace-separated words; the vocabulary is the special tokens, symbols, fillers and the query."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {token: i for i, token in enumerate((*SPECIAL, *SYMBOLS, *FILLERS, QUERY))}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="<eos>")


def build_model(architecture: Architecture, vocab_size: int, seed: int) -> GPT2LMHeadModel:
    """A freshly initialised attention-only GPT-2 (its MLP zeroed and frozen), seeded.

    GPT-2's initialisation (normal weights, ``c_proj`` scaled down by ``sqrt(2 * layers)``, zero biases, unit
    LayerNorm scales), but the normal draws come from numpy's generator, which gives the same numbers on every
    CPU: torch's ``normal_`` gives slightly different numbers with its scalar and its AVX2 kernels (a third of
    them differ, by up to 1e-4 relatively), and training from small initialisation magnifies any difference.
    """
    config = GPT2Config(vocab_size=vocab_size, n_embd=architecture.heads * architecture.head_dim,
                        n_head=architecture.heads, n_layer=1, n_positions=architecture.positions,
                        initializer_range=architecture.init_std, resid_pdrop=0.0, embd_pdrop=0.0,
                        attn_pdrop=0.0, tie_word_embeddings=False, bos_token_id=1, eos_token_id=1,
                        pad_token_id=0, attn_implementation="eager")
    model = GPT2LMHeadModel(config)
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if parameter.dim() < 2:  # biases and LayerNorm parameters: constants
                continue
            std = architecture.init_std / (math.sqrt(2 * config.n_layer) if name.endswith("c_proj.weight") else 1)
            parameter.copy_(torch.from_numpy(rng.standard_normal(tuple(parameter.shape)) * std))
    for parameter in model.transformer.h[0].mlp.parameters():
        parameter.data.zero_()
        parameter.requires_grad_(False)
    return model
