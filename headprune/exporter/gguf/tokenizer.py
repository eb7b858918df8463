"""The tokenizer of a GGUF export, as llama.cpp reads it.

Copied from the source GGUF file when the model came from one (the default model does: the file is found
through :mod:`headprune.loading.gguf_source`), else built from the Hugging Face tokenizer the way llama.cpp's converter
builds it: byte-level BPE as ``gpt2`` with the pre-tokenizer identified by hashing a test string's tokens;
SentencePiece-style BPE with byte fallback as ``llama``; BERT's WordPiece as ``bert`` (the converter's
``BertModel.set_vocab``: word-initial pieces marked with a leading "\u2581", continuations without their "##");
special token ids and the chat template through ``gguf.SpecialVocab``. A tokenizer llama.cpp cannot represent exactly
is refused.
"""

from __future__ import annotations

import json
from hashlib import sha256
from pathlib import Path
from typing import Any

from headprune.errors import UnsupportedModelError
from headprune.loading.gguf_header import read_gguf
from headprune.loading.gguf_source import source_gguf

_PRETOKENIZERS = Path(__file__).with_name("pretokenizers.json")


def tokenizer_writer(lm: Any, vocab_size: int, scratch: Path) -> tuple[Any, str, bool]:
    """A function that adds the tokenizer to a ``GGUFWriter``, a description, and whether a chat template
    goes with it (``scratch``: the export's temporary folder, where the tokenizer is saved to be read back).

    Raises:
        UnsupportedModelError: a tokenizer llama.cpp's vocabularies cannot represent exactly.
    """
    source = source_gguf(lm.folder, str(lm.name))
    if source is not None:
        fields, _, _ = read_gguf(source, tensors=False)
        fields = {k: v for k, v in fields.items() if k.startswith("tokenizer.")}
        tokens = fields.get("tokenizer.ggml.tokens")
        if tokens is not None and len(tokens[1]) == vocab_size:
            def copy(writer: Any) -> None:
                for key, (kind, value, sub) in fields.items():
                    writer.add_key_value(key, value, kind, sub_type=sub)
            model = fields["tokenizer.ggml.model"][1]
            return copy, f"{model}, copied from {source.name}", "tokenizer.chat_template" in fields
    return _hf_tokenizer_writer(lm.tokenizer, vocab_size, scratch)


def _hf_tokenizer_writer(tokenizer: Any, vocab_size: int, scratch: Path) -> tuple[Any, str, bool]:
    import gguf

    folder = Path(scratch) / "tokenizer"  # removed with the export's scratch folder
    tokenizer.save_pretrained(folder)
    spec_path = folder / "tokenizer.json"
    if not spec_path.is_file():
        raise UnsupportedModelError("GGUF export needs a fast tokenizer (tokenizer.json) to write the vocabulary")
    spec = json.loads(spec_path.read_text(encoding="utf-8"))
    model = spec.get("model", {})
    special = _special_vocab(folder, load_merges=True, n_vocab=vocab_size)
    if model.get("type") == "BPE" and not model.get("byte_fallback"):
        tokens, types = _bpe_tokens(tokenizer, vocab_size)
        pre = pretokenizer(tokenizer, spec)

        def write(writer: Any) -> None:
            writer.add_tokenizer_model("gpt2")
            writer.add_tokenizer_pre(pre)
            writer.add_token_list(tokens)
            writer.add_token_types(types)
            special.add_to_gguf(writer, quiet=True)
        return write, f"gpt2 (byte-level BPE, pre-tokenizer {pre})", special.chat_template is not None
    if model.get("type") == "BPE" and model.get("byte_fallback"):
        vocab = gguf.LlamaHfVocab(folder)
        entries = list(vocab.all_tokens())
        if len(entries) != vocab_size:
            raise UnsupportedModelError(f"GGUF export: the tokenizer has {len(entries)} tokens, the model "
                                        f"{vocab_size} embeddings")
        special = _special_vocab(folder, n_vocab=vocab_size)

        def write(writer: Any) -> None:
            writer.add_tokenizer_model("llama")
            writer.add_tokenizer_pre("default")
            writer.add_token_list([t for t, _, _ in entries])
            writer.add_token_scores([s for _, s, _ in entries])
            writer.add_token_types([k for _, _, k in entries])
            special.add_to_gguf(writer, quiet=True)
        return write, "llama (SentencePiece-style BPE with byte fallback)", special.chat_template is not None
    if model.get("type") == "WordPiece":
        return _wordpiece(tokenizer, spec, vocab_size, _special_vocab(folder, n_vocab=vocab_size))
    raise UnsupportedModelError(f"GGUF export: a {model.get('type')} tokenizer is not written by headprune")


def _special_vocab(folder: Path, **options: Any) -> Any:
    """gguf-py's ``SpecialVocab`` of a saved tokenizer, its chat template read from ``chat_template.jinja`` (or
    ``chat_template.json``) where the installed gguf-py reads only ``tokenizer_config.json`` (0.14, the floor, does): transformers
    5 saves the template there, and a GGUF without it would lose it silently."""
    import gguf

    special = gguf.SpecialVocab(folder, **options)
    if special.chat_template is None:
        jinja, as_json = folder / "chat_template.jinja", folder / "chat_template.json"
        if jinja.is_file():
            special.chat_template = jinja.read_text(encoding="utf-8")
        elif as_json.is_file():
            special.chat_template = json.loads(as_json.read_text(encoding="utf-8")).get("chat_template")
    return special


def check_wordpiece(spec: dict) -> None:
    """Refuse a WordPiece tokenizer (``spec``: its ``tokenizer.json``) llama.cpp's would split otherwise; another
    kind passes (checked when it is written).

    Raises:
        UnsupportedModelError
    """
    if (spec.get("model") or {}).get("type") != "WordPiece":
        return
    norm = spec.get("normalizer") or {}
    if norm.get("type") != "BertNormalizer" or not norm.get("lowercase") or norm.get("strip_accents") is False:
        raise UnsupportedModelError("GGUF export: llama.cpp's WordPiece tokenizer lowercases every text and strips "
                                    "its accents, which this tokenizer does not (a cased model's words would be split "
                                    "otherwise); this model can be exported as safetensors, onnx")
    if spec["model"].get("continuing_subword_prefix", "##") != "##":
        raise UnsupportedModelError("GGUF export: llama.cpp's WordPiece tokenizer takes continuations marked '##' "
                                    "only; this model can be exported as safetensors, onnx")


def _wordpiece(tokenizer: Any, spec: dict, vocab_size: int, special: Any) -> tuple[Any, str, bool]:
    """BERT's WordPiece as llama.cpp's ``bert`` vocabulary, which lowercases every text and strips its accents
    (measured: a cased tokenizer's "The Film" becomes other tokens there), so only such a tokenizer is written.

    Raises:
        UnsupportedModelError: a tokenizer that keeps case or accents, or another continuation prefix.
    """
    import gguf

    check_wordpiece(spec)
    vocab = tokenizer.get_vocab()
    if len(vocab) != vocab_size or max(vocab.values()) != vocab_size - 1:
        raise UnsupportedModelError(f"GGUF export: the tokenizer has {len(vocab)} tokens, the model {vocab_size} "
                                    "embeddings")
    reverse = {i: t for t, i in vocab.items()}
    controls = set(tokenizer.all_special_ids)
    types = [int(gguf.TokenType.CONTROL if i in controls else gguf.TokenType.NORMAL) for i in range(vocab_size)]
    tokens = [reverse[i] if i in controls else reverse[i][2:] if reverse[i].startswith("##") else
              "\u2581" + reverse[i] for i in range(vocab_size)]  # (a word's first piece, a continuation)

    def write(writer: Any) -> None:
        writer.add_tokenizer_model("bert")
        writer.add_tokenizer_pre("default")
        writer.add_token_list(tokens)
        writer.add_token_types(types)
        special.add_to_gguf(writer, quiet=True)
    return write, "bert (WordPiece, lowercased)", False


def _bpe_tokens(tokenizer: Any, vocab_size: int) -> tuple[list[str], list[int]]:
    """Token texts and types by id, as the converter's ``get_vocab_base`` makes them."""
    import gguf

    vocab = tokenizer.get_vocab()
    if max(vocab.values()) >= vocab_size:
        raise UnsupportedModelError(f"GGUF export: token id {max(vocab.values())} is beyond the model's "
                                    f"{vocab_size} embeddings")
    reverse = {i: t for t, i in vocab.items()}
    added = tokenizer.get_added_vocab()
    decoder = tokenizer.added_tokens_decoder
    tokens, types = [], []
    for i in range(vocab_size):
        if i not in reverse:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
            continue
        token = reverse[i]
        if token in added:
            if not decoder[i].normalized:
                token = tokenizer.decode(tokenizer.encode(token, add_special_tokens=False))
            if decoder[i].special or (token.startswith("<|") and token.endswith("|>")):
                types.append(gguf.TokenType.CONTROL)
            else:
                token = token.replace("\u2581", " ")
                types.append(gguf.TokenType.USER_DEFINED)
        else:
            types.append(gguf.TokenType.NORMAL)
        tokens.append(token)
    return tokens, [int(t) for t in types]


def pretokenizer(tokenizer: Any, spec: dict) -> str:
    """llama.cpp's name for the tokenizer's pre-tokenizer: the converter's hash of a test string's tokens,
    or ``gpt-2`` for a plain byte-level pre-tokenizer (GPT-2's own regex).

    Raises:
        UnsupportedModelError: an unknown pre-tokenizer (llama.cpp would split words differently).
    """
    table = json.loads(_PRETOKENIZERS.read_text(encoding="utf-8"))
    digest = sha256(str(tokenizer.encode(table["chktxt"])).encode()).hexdigest()
    if digest in table["hashes"]:
        return table["hashes"][digest]
    pre = spec.get("pre_tokenizer") or {}
    if pre.get("type") == "ByteLevel" and pre.get("use_regex", True):
        return "gpt-2"
    raise UnsupportedModelError("GGUF export: llama.cpp does not know this tokenizer's pre-tokenizer (hash "
                                f"{digest[:16]}...); its words would be split differently")
