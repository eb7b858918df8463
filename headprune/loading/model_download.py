"""Hub ids in: the local cache first, then a download of only the files a model load reads.

A Hub repository often holds much more than ``from_pretrained`` uses: Llama repositories keep the original
checkpoint (``original/*.pth``) beside the safetensors, Mistral keeps a ``consolidated.safetensors`` copy,
others add GGUF, ONNX or ``.bin`` copies: twice the download or more. ``snapshot_download`` of the whole
repository fetches all of it. headprune lists the repository and fetches, from its top level only:

- ``config.json`` and ``generation_config.json``;
- the tokenizer's files and the chat template (:data:`TOKENIZER_FILES`, :data:`TOKENIZER_PATTERNS`);
- the weights transformers loads: ``model.safetensors``, or ``model.safetensors.index.json`` and the shards it
  names; only where the repository has no safetensors weights, ``pytorch_model.bin`` or its index and shards;
- ``*.py`` only with ``trust_remote_code`` (the code a remote class runs).

A ``revision`` (branch, tag or commit; default: the repository's main branch) is resolved to its commit first and
everything is read at that commit, so one load never mixes two commits; the commit read is the snapshot folder's
name in the cache (:func:`commit_of`), which find records and export checks (:func:`current_commit`).

The endpoint is ``HF_ENDPOINT`` read at call time, as for ``push``.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from headprune.errors import ModelNotFoundError

log = logging.getLogger("headprune")

CONFIG_FILES = ("config.json", "generation_config.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                   "vocab.json", "vocab.txt", "merges.txt", "tokenizer.model", "spiece.model",
                   "sentencepiece.bpe.model", "chat_template.jinja", "chat_template.json")
TOKENIZER_PATTERNS = ("tokenizer*.json", "*.tiktoken", "chat_template*.jinja")
# (single file, index of shards) in the order transformers prefers them.
WEIGHT_LAYOUTS = (("model.safetensors", "model.safetensors.index.json"),
                  ("pytorch_model.bin", "pytorch_model.bin.index.json"))


def _endpoint() -> str | None:
    return os.environ.get("HF_ENDPOINT") or None


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes")


def _transport_errors() -> tuple[type[BaseException], ...]:
    """The HTTP client's connection and timeout errors (huggingface_hub 1.x uses httpx, 2.x httpx2); a listing
    call raises them as they are, where snapshot_download would turn them into a cache miss."""
    import importlib

    errors = []
    for client in ("httpx2", "httpx", "requests"):
        try:
            module = importlib.import_module(client)
        except ImportError:
            continue
        errors.append(getattr(module, "TransportError", None) or getattr(module, "ConnectionError"))
    return tuple(errors)


@contextmanager
def _quiet_retries() -> Iterator[None]:
    """huggingface_hub's retries of a request that failed, without their two warnings each (eleven lines before
    an unreachable Hub is reported): the one line headprune prints at the end says what happened."""
    hub = logging.getLogger("huggingface_hub")
    level = hub.level
    hub.setLevel(logging.ERROR)
    try:
        yield
    finally:
        hub.setLevel(level)


def small_files(listing: Iterable[str], *, trust_remote_code: bool) -> list[str]:
    """The top-level files of a repository listing that a model load reads, except the weight shards (which
    an index names): config, tokenizer, chat template, the weights' single file or index, ``*.py`` when trusted.

    Raises:
        ModelNotFoundError: the repository has no config.json, or no weights transformers can load.
    """
    top = sorted(name for name in listing if "/" not in name)
    if "config.json" not in top:
        raise ModelNotFoundError("the repository has no config.json at its top level: not a transformers model")
    chosen = [name for name in top if name in CONFIG_FILES or name in TOKENIZER_FILES
              or any(fnmatch.fnmatchcase(name, pattern) for pattern in TOKENIZER_PATTERNS)
              or (trust_remote_code and name.endswith(".py"))]
    for single, index in WEIGHT_LAYOUTS:  # the first layout present wins: no .bin beside safetensors
        present = [name for name in (index, single) if name in top]
        if present:
            return sorted({*chosen, present[0]})
    raise ModelNotFoundError("the repository has neither model.safetensors (or its index) nor pytorch_model.bin "
                             f"(top-level files: {', '.join(top[:12])}{' ...' if len(top) > 12 else ''})")


def shards_of(index_file: Path) -> list[str]:
    """The weight shards a ``*.index.json`` names.

    Raises:
        ModelNotFoundError: the index is not a readable weight map.
    """
    try:
        weight_map = json.loads(index_file.read_text(encoding="utf-8"))["weight_map"]
        return sorted(set(weight_map.values()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise ModelNotFoundError(f"{index_file.name}: not a weight index ({type(error).__name__})") from error


def _complete(folder: Path) -> bool:
    """Whether a cached snapshot holds a config and every weight file a load needs."""
    if not (folder / "config.json").is_file():
        return False
    for single, index in WEIGHT_LAYOUTS:
        if (folder / index).is_file():
            try:
                return all((folder / shard).is_file() for shard in shards_of(folder / index))
            except ModelNotFoundError:
                return False
        if (folder / single).is_file():
            return True
    return False


def cache_folder(repo_id: str) -> Path:
    """The Hugging Face cache's folder of the model ``repo_id`` (``HUB_CACHE/models--OWNER--NAME``: its snapshots and
    the blobs they link to), whether it exists yet or not."""
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE) / ("models--" + repo_id.replace("/", "--"))


def _cached(repo_id: str, revision: str | None = None) -> Path | None:
    """The cached snapshot of ``repo_id`` at ``revision`` (a branch or tag as the cache last saw it, or a commit;
    default main) when it is complete for a load, else ``None``."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:  # asking for config.json only: the cache may rightly lack the files headprune never downloads
        folder = Path(snapshot_download(repo_id, revision=revision, local_files_only=True,
                                        allow_patterns=["config.json"]))
    except (LocalEntryNotFoundError, OSError, ValueError):
        return None
    return folder if _complete(folder) else None


def commit_of(folder: Path) -> str | None:
    """The Hub commit a model folder holds: a snapshot of the Hugging Face cache is named by its commit
    (``.../models--OWNER--NAME/snapshots/COMMIT``); ``None`` for any other folder."""
    folder = Path(folder)
    name = folder.name
    if folder.parent.name == "snapshots" and len(name) == 40 and all(c in "0123456789abcdef" for c in name):
        return name
    return None


def current_commit(repo_id: str, revision: str | None = None) -> str | None:
    """The commit a load of ``repo_id`` at ``revision`` would read now: the cached snapshot's (a load reads the cache
    first), else the Hub's; ``None`` when neither can tell (offline and not cached, or the Hub unreachable).

    Raises:
        ModelNotFoundError: the Hub has no such revision.
    """
    cached = _cached(repo_id, revision)
    if cached is not None:
        return commit_of(cached)
    if _offline():
        return None
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError, RevisionNotFoundError

    try:
        with _quiet_retries():
            return HfApi(endpoint=_endpoint()).model_info(repo_id, revision=revision or "main").sha
    except RevisionNotFoundError:
        raise ModelNotFoundError(f"{repo_id}: the Hub has no revision {revision!r} (a branch, tag or commit)") from None
    except (HfHubHTTPError, OSError, *_transport_errors()):
        return None


def from_hub(repo_id: str, *, trust_remote_code: bool = False, revision: str | None = None) -> Path:
    """A local folder for ``repo_id`` at ``revision`` (a branch, tag or commit; default main): the cached
    snapshot, or a download of only what a load reads, all at the one commit the revision names.

    Raises:
        ModelNotFoundError: not cached, and offline, unreachable, not a model repository, no such revision, or no
            loadable weights.
    """
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:  # before any cache or network access: a malformed name is the user's, not the Hub's, problem
        validate_repo_id(repo_id)
    except HFValidationError:
        shown_id = repo_id if repo_id.isprintable() else repr(repo_id)  # a line break in a name is no second line
        raise ModelNotFoundError(f"{shown_id}: not a local folder or file, and not a Hub repository id (NAME or "
                                 "OWNER/NAME of letters, digits, '-', '_' and '.', at most 96 characters)") from None
    at = "" if revision is None else f" at {revision}"
    folder = _cached(repo_id, revision)
    if folder is not None:
        return folder
    if _offline():
        raise ModelNotFoundError(f"{repo_id}{at}: not in the local Hugging Face cache and HF_HUB_OFFLINE is set")
    from huggingface_hub import HfApi, snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, RevisionNotFoundError

    try:
        with _quiet_retries():
            api = HfApi(endpoint=_endpoint())
            commit = api.model_info(repo_id, revision=revision or "main").sha  # every file from this one commit
            listing = api.list_repo_files(repo_id, revision=commit)
        wanted = small_files(listing, trust_remote_code=trust_remote_code)
        log.info("%s: downloading %d of the repository's %d files (what a load reads) at commit %s", repo_id,
                 len(wanted), len(listing), commit)
        # By the revision's name, so that the cache records where the branch or tag pointed (a later load of it
        # then needs no Hub), and checked to be the commit listed.
        folder = Path(snapshot_download(repo_id, revision=revision or "main", allow_patterns=wanted,
                                        endpoint=_endpoint()))
        if commit_of(folder) not in (None, commit):
            raise ModelNotFoundError(f"{revision or 'main'} moved to another commit while it was read; run again")
        indexes = [index for _, index in WEIGHT_LAYOUTS if index in wanted]
        if indexes:
            shards = shards_of(folder / indexes[0])
            missing = [shard for shard in shards if shard not in listing]
            if missing:
                raise ModelNotFoundError(f"{indexes[0]} names shards the repository does not have "
                                         f"({', '.join(missing[:3])})")
            folder = Path(snapshot_download(repo_id, revision=commit, allow_patterns=[*wanted, *shards],
                                            endpoint=_endpoint()))
    except ModelNotFoundError as error:
        raise ModelNotFoundError(f"{repo_id}{at}: {error}") from None
    except RevisionNotFoundError:
        raise ModelNotFoundError(f"{repo_id}: the Hub has no revision {revision!r} (a branch, tag or commit)") from None
    except (HfHubHTTPError, LocalEntryNotFoundError, OSError, *_transport_errors()) as error:
        raise ModelNotFoundError(
            f"{repo_id}: not in the local Hugging Face cache and the Hub cannot be reached "
            f"({type(error).__name__}); download it on a connected machine or pass a local folder"
        ) from error
    return folder


__all__ = ["cache_folder", "commit_of", "current_commit", "from_hub", "shards_of", "small_files"]
