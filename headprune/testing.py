"""Tiny tokenizers, model configs, models and tasks built in code, for tests and benchmarks (as
``transformers.testing_utils`` serves transformers' own): nothing is downloaded, and the same seed builds the same
weights.

``import headprune`` does not import this module, and it imports torch, tokenizers and transformers only inside the
functions that need them, so a test helper that imports it stays light.
"""

from __future__ import annotations

import random
from typing import Any

from headprune.tasks import Example, Task

CORPUS = (
    "the film is a delight from start to finish",
    "a dull and lifeless movie with nothing to say",
    "12 + 7 = 19", "34 - 5 = 29", "8 * 3 = 24", "positive negative neutral yes no",
    "Review: Sentiment: Question: Answer: the a of and to in is it that",
)

CAUSAL_FAMILIES = ("llama", "qwen2", "gemma2", "gpt2", "gpt_neox")
ALL_FAMILIES = (*CAUSAL_FAMILIES, "bert")

# Llama-style shapes of real checkpoints (all their layers; ``llama_config`` can cut them).
LLAMA_SHAPES = {
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=512),
    "1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
               num_key_value_heads=8, vocab_size=128256),  # Llama-3.2-1B
    "1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                 num_key_value_heads=2, vocab_size=151936),  # Qwen2.5-1.5B: 1.54B parameters with tied embeddings
    "3b": dict(hidden_size=3072, intermediate_size=8192, num_hidden_layers=28, num_attention_heads=24,
               num_key_value_heads=8, vocab_size=128256),  # Llama-3.2-3B: 3.21B parameters with tied embeddings
    "qwen2.5-3b": dict(hidden_size=2048, intermediate_size=11008, num_hidden_layers=36, num_attention_heads=16,
                       num_key_value_heads=2, vocab_size=151936),  # Qwen2.5-3B's shape (576 heads; no q/k/v bias)
    "8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
               num_key_value_heads=8, vocab_size=128256),  # Llama-3.1-8B
}
SPECIAL_IDS = dict(pad_token_id=0, eos_token_id=1, bos_token_id=1)  # "<pad>" and "<eos>" of the tokenizers here


def bpe_tokenizer(corpus: tuple[str, ...] | list[str] = CORPUS, vocab_size: int = 320) -> Any:
    """A byte-level BPE tokenizer trained in memory on ``corpus`` (ids 0 and 1 are ``<pad>`` and ``<eos>``)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<pad>", "<eos>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    core.train_from_iterator(list(corpus) * 20, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="<eos>")


def word_tokenizer(vocab: list[str]) -> Any:
    """A whitespace-split word-level tokenizer over ``vocab`` (its first two words are the pad and end tokens)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.WordLevel(vocab={token: i for i, token in enumerate(vocab)}, unk_token=vocab[0]))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token=vocab[0], eos_token=vocab[1])


def wordpiece_tokenizer(corpus: tuple[str, ...] | list[str] = CORPUS, vocab_size: int = 300, *,
                        lowercase: bool = True) -> Any:
    """BERT's kind of tokenizer, trained in memory on ``corpus``: WordPiece with BERT's normalizer (``lowercase``, as
    uncased checkpoints) and ``[CLS] ... [SEP]`` around every text (ids 0 to 4: ``[PAD] [UNK] [CLS] [SEP] [MASK]``)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    core.normalizer = normalizers.BertNormalizer(lowercase=lowercase)
    core.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    core.train_from_iterator(list(corpus) * 20, trainers.WordPieceTrainer(vocab_size=vocab_size,
                                                                           special_tokens=special))
    core.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                                                        special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
                                   sep_token="[SEP]", mask_token="[MASK]")


def tiny_config(family: str, vocab_size: int, layers: int = 2, **overrides: Any) -> Any:
    """A ``layers``-layer, 4-head config of ``family`` (one of :data:`ALL_FAMILIES`); random weights come from the
    model's own init."""
    from transformers import BertConfig, Gemma2Config, GPT2Config, GPTNeoXConfig, LlamaConfig, Qwen2Config

    common = dict(vocab_size=vocab_size, **SPECIAL_IDS)
    sizes = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=layers, num_attention_heads=4,
                 max_position_embeddings=256)
    if family == "llama":
        return LlamaConfig(**sizes, num_key_value_heads=2, **common, **overrides)
    if family == "qwen2":
        return Qwen2Config(**sizes, num_key_value_heads=1, **common, **overrides)
    if family == "gemma2":
        return Gemma2Config(**sizes, num_key_value_heads=2, head_dim=16, **common, **overrides)
    if family == "gpt2":
        return GPT2Config(n_embd=32, n_layer=layers, n_head=4, n_positions=256, **common, **overrides)
    if family == "gpt_neox":
        return GPTNeoXConfig(**sizes, **common, **overrides)
    if family == "bert":
        return BertConfig(**sizes, vocab_size=vocab_size, pad_token_id=0, **overrides)
    raise ValueError(f"unknown family {family!r}: one of {', '.join(ALL_FAMILIES)}")


def tiny_model(family: str, vocab_size: int, seed: int = 0, layers: int = 2) -> Any:
    """A tiny random-init model of ``family`` (a causal LM; ``bert``: the bare encoder), eager attention."""
    import torch
    from transformers import AutoModel, AutoModelForCausalLM

    torch.manual_seed(seed)
    auto = AutoModel if family == "bert" else AutoModelForCausalLM
    return auto.from_config(tiny_config(family, vocab_size, layers), attn_implementation="eager")


def family_models() -> dict[str, tuple[str, str, dict]]:
    """The coverage matrix of tests/test_families.py: one tiny random model per supported model type, built from
    transformers' own config class (hidden 64, 2 layers, 4 query heads over 2 key/value heads where the family groups
    them), as each family file declares it (``Family.tiny``). model_type -> (config class, model class, config
    overrides)."""
    from headprune.loading.adapters import FAMILIES

    return {t: (f.tiny.config_class, f.tiny.model_class, dict(f.tiny.overrides)) for t, f in sorted(FAMILIES.items())}


def family_config(model_type: str, vocab_size: int, **changes: Any) -> Any:
    """The config of :func:`family_model`'s model of ``model_type`` (no weights)."""
    import transformers

    config_class, _, overrides = family_models()[model_type]
    overrides = {**overrides, **changes}
    vocab = dict.fromkeys(overrides.pop("vocab_sized", ()), vocab_size)  # (Gemma 4's per-layer embeddings' own)
    sizes = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 max_position_embeddings=256, vocab_size=vocab_size, **vocab, **SPECIAL_IDS)
    if "text_config" in overrides:  # a vision-language model: the sizes are its text model's; its image tokens are
        # the tiny vocabulary's last ids
        image_ids = overrides.pop("image_ids")
        overrides = dict(overrides, text_config={**sizes, **overrides["text_config"]},
                         **{name: vocab_size - 1 - i for i, name in enumerate(image_ids)})
        sizes = {}
    return getattr(transformers, config_class)(**{**sizes, **overrides}, attn_implementation="eager")


def family_model(model_type: str, vocab_size: int, seed: int = 0, *, model_class: str | None = None,
                 **changes: Any) -> Any:
    """The tiny random model of ``model_type`` (a key of :func:`family_models`), eager attention, in eval mode;
    ``model_class``: another class of the family than the matrix's (``DebertaV2ForSequenceClassification``);
    ``changes``: config values of a variant (for a vision-language model, the outer config's: a ``text_config`` given
    replaces the entry's, over the same sizes)."""
    import torch
    import transformers

    config = family_config(model_type, vocab_size, **changes)
    torch.manual_seed(seed)
    return getattr(transformers, model_class or family_models()[model_type][1])(config).eval()


def llama_config(shape: str, layers: int | None = None, **overrides: Any) -> Any:
    """A ``LlamaConfig`` of one of :data:`LLAMA_SHAPES`, with ``layers`` layers when given."""
    from transformers import LlamaConfig

    sizes = dict(LLAMA_SHAPES[shape], **({"num_hidden_layers": layers} if layers else {}))
    return LlamaConfig(**sizes, **{**SPECIAL_IDS, **overrides})


def random_llama(config: Any, dtype: Any, device: Any = "cpu", seed: int = 0, std: float = 0.02) -> Any:
    """A ``LlamaForCausalLM`` of ``config`` drawn directly on ``device`` in ``dtype`` (never materialised in float32
    first: an 8B shape fits where its float32 copy would not): weights normal with ``std``, RMSNorm gains 1 as a
    trained model starts, the rotary embedding computed."""
    import torch
    import transformers

    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config)
    model = model.to_empty(device=device).to(dtype)
    generator = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, std, generator=generator)
        for module in model.modules():
            if hasattr(module, "variance_epsilon"):
                module.weight.fill_(1.0)
    # The rotary embedding's inverse frequencies are computed, not drawn: build that module for real.
    model.model.rotary_emb = type(model.model.rotary_emb)(config).to(device)
    return model.eval()


def random_choice_task(n: int, seed: int = 0) -> Task:
    """Short random prompts with random labels over two one-token choices (no signal to find)."""
    rng = random.Random(seed)
    words = "the film is a dull delight movie with nothing to say it and so on".split()
    return Task("random-choice", "choice", tuple(
        Example(f"r{i}", prompt=" ".join(rng.choice(words) for _ in range(rng.randint(2, 6))),
                choices=(" positive", " negative"), answer=rng.randrange(2)) for i in range(n)))


# The cue model (tests/helpers/handmade.py, scripts/error_rates.py): each prompt is one token ``x{c}_{k}`` whose
# embedding carries a cue c = +-1 (dimension 0) and a nuisance value (dimension 1); the unembedding reads the cue
# plus READ_NUISANCE times the nuisance for " A" and the negative for " B".
CUE_SCALE, NUISANCE_SD, READ_NUISANCE = 1.0, 2.0, 0.3


def cue_vocab(tokens_per_cue: int) -> list[str]:
    return ["<pad>", "<eos>", "A", "B"] + [f"x{c}_{k}" for c in ("p", "n") for k in range(tokens_per_cue)]


def cue_llama(heads: int, tokens_per_cue: int, generator: Any, kv_heads: int | None = None) -> tuple[Any, Any]:
    """The cue model's one-layer Llama (16-dimensional residual, ``heads`` heads of 4 dimensions sharing ``kv_heads``
    key/value heads (default: one each), MLP off) and its tokenizer: every attention weight zero (the caller sets
    what its heads copy and write), the nuisance values drawn from ``generator`` (first, so the caller's later draws
    stay the same)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    vocab = cue_vocab(tokens_per_cue)
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=16, intermediate_size=8, num_hidden_layers=1,
                         num_attention_heads=heads, num_key_value_heads=kv_heads or heads, head_dim=4, tie_word_embeddings=False,
                         max_position_embeddings=32, **SPECIAL_IDS)
    model = LlamaForCausalLM(config)
    nuisance = torch.randn(tokens_per_cue, generator=generator) * NUISANCE_SD
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.zero_()
        layer = model.model.layers[0]
        for norm in (layer.input_layernorm, layer.post_attention_layernorm, model.model.norm):
            norm.weight.fill_(1.0)
        embed = model.model.embed_tokens.weight  # (V, 16)
        for k in range(tokens_per_cue):
            for c, name in ((1.0, "p"), (-1.0, "n")):
                embed[vocab.index(f"x{name}_{k}"), 0] = CUE_SCALE * c
                embed[vocab.index(f"x{name}_{k}"), 1] = nuisance[k]
        readout = torch.zeros(16)
        readout[0], readout[1] = 1.0, READ_NUISANCE
        model.lm_head.weight[vocab.index("A")] = readout
        model.lm_head.weight[vocab.index("B")] = -readout
    return model, word_tokenizer(vocab)


__all__ = ["ALL_FAMILIES", "CAUSAL_FAMILIES", "CORPUS", "CUE_SCALE", "LLAMA_SHAPES", "NUISANCE_SD", "READ_NUISANCE",
           "bpe_tokenizer", "cue_llama", "cue_vocab", "family_config", "family_model", "family_models", "llama_config",
           "random_choice_task", "random_llama",
           "tiny_config", "tiny_model", "word_tokenizer"]
