"""What a GGUF export saves where it is deployed: its file's bytes and llama.cpp's key/value cache at a 4k context,
against the original model written in the same type (every head, the stock architecture).

The key/value cache is what bounds context length and batch size on the machines users deploy to, and it shrinks
only where whole key/value heads go (a layer's query heads share them in groups). llama.cpp allocates it per layer:
keys ``n_head_kv(layer) x key_length`` wide, values ``n_head_kv(layer) x value_length`` wide, ``n_ctx`` cells each,
in f16 by default (``llama_kv_cache``'s constructor, ``src/llama-kv-cache.cpp``). Flash attention, which llama.cpp's
default ``auto`` turns on where the device runs it (the CPU does), stores values that way; without it values are
stored transposed, every layer as wide as the widest (``n_embd_v_gqa_max``), which the card gives beside.
``tests/test_gguf_size.py`` reads both from llama.cpp's own log of the cache it made.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

CONTEXT = 4096  # tokens: the context the cache is given for
CACHE_TYPE, CACHE_BYTES = "f16", 2  # llama.cpp's default key and value cache type


def kv_cache_bytes(head_count_kv: Sequence[int], head_dim: int | Sequence[int], *, context: int = CONTEXT,
                   item: int = CACHE_BYTES, flash_attn: bool = True, values: bool = True) -> int:
    """Bytes of llama.cpp's key/value cache for layers with ``head_count_kv`` key/value heads of ``head_dim`` (one
    size, or one a layer: Gemma 4's); a layer with none caches nothing (a recurrent layer, or one that reads another
    layer's keys and values). ``values`` false: keys alone, as llama.cpp caches multi-head latent attention's
    latent."""
    sizes = [head_dim] * len(head_count_kv) if isinstance(head_dim, int) else head_dim
    widths = [n * size for n, size in zip(head_count_kv, sizes, strict=True) if n]
    keys = sum(widths)
    if not values:
        return keys * context * item
    cached = keys if flash_attn else len(widths) * max(widths, default=0)
    return (keys + cached) * context * item


def cache_bytes(width: int, *, context: int = CONTEXT, item: int = CACHE_BYTES) -> int:
    """Bytes of a key/value cache of ``width`` numbers a token (keys and values of every layer,
    ``HeadGrid.cache_width``) at ``context`` tokens, ``item`` bytes a number."""
    return width * context * item


@dataclass(frozen=True)
class DeploySize:
    """A GGUF export's file and key/value cache against the original's (the record's ``format_details.size``)."""

    file_bytes: int
    original_file_bytes: int  # the original written in the same type
    context: int
    cache_type: str
    kv_bytes: int  # llama.cpp's default: flash attention on
    original_kv_bytes: int
    kv_bytes_no_flash: int  # flash attention off: values padded to the widest layer


def deploy_size(file_bytes: int, original_file_bytes: int, head_count_kv: Sequence[int],
                original_head_count_kv: Sequence[int], head_dim: int | Sequence[int], *,
                values: bool = True) -> DeploySize:
    return DeploySize(file_bytes, original_file_bytes, CONTEXT, CACHE_TYPE,
                      kv_cache_bytes(head_count_kv, head_dim, values=values),
                      kv_cache_bytes(original_head_count_kv, head_dim, values=values),
                      kv_cache_bytes(head_count_kv, head_dim, flash_attn=False, values=values))


def against(value: int, original: int) -> str:
    return f"{value:,} bytes against the original's {original:,} ({value / original:.3f}x)" if original else \
        f"{value:,} bytes"


def summary_line(size: DeploySize, gguf_type: str) -> str:
    """What the CLI prints (plain text)."""
    return (f"size in llama.cpp ({gguf_type}): file {against(size.file_bytes, size.original_file_bytes)}; key/value "
            f"cache at a {size.context:,}-token context ({size.cache_type}) "
            f"{against(size.kv_bytes, size.original_kv_bytes)}")


def card_line(size: DeploySize, gguf_type: str) -> str:
    """The card's line (a markdown list item)."""
    padded = "" if size.kv_bytes_no_flash == size.kv_bytes else (
        f"; with flash attention off, llama.cpp pads every layer's values to the widest layer's: "
        f"{size.kv_bytes_no_flash:,} bytes")
    return (f"- Size where it runs (llama.cpp, `{gguf_type}`): the file is "
            f"{against(size.file_bytes, size.original_file_bytes)} (the original written in the same type); its "
            f"key/value cache at a {size.context:,}-token context "
            f"({size.cache_type}, llama.cpp's default, flash attention on) is "
            f"{against(size.kv_bytes, size.original_kv_bytes)}{padded}.")
