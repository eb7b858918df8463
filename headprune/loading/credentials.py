"""A model loaded without the credentials its files may hold (``headprune.core.credentials``): the tokenizer is
built from a view of its folder whose configs leave them out, and the model's config and generation config lose
them once loaded, so nothing headprune writes (an export's configs, its ``tokenizer.json``) carries them. The user is
told in one line which files held which keys; the values are never shown.
"""

from __future__ import annotations

import json
import logging
import tempfile
from pathlib import Path
from typing import Any

from headprune.core.credentials import credentials_in_file, is_credential, without_credentials

log = logging.getLogger("headprune")

# The files a load reads its settings from (the tokenizer's, the model's), which a credential could be copied from.
CONFIG_FILES = ("config.json", "generation_config.json", "tokenizer_config.json", "special_tokens_map.json",
                "added_tokens.json", "preprocessor_config.json", "processor_config.json")


def credentials_found(folder: Path, spec: str) -> dict[str, list[str]]:
    """The credentials in ``folder``'s config files, by file; said in one line when there are any."""
    found = {name: keys for name in CONFIG_FILES if (keys := credentials_in_file(Path(folder) / name))}
    if found:
        where = "; ".join(f"{name}: {', '.join(keys)}" for name, keys in found.items())
        log.warning("%s: its files hold credentials (%s); they are stripped: nothing headprune writes carries "
                    "them", spec, where)
    return found


def load_tokenizer(folder: Path, found: dict[str, list[str]], **options: Any) -> Any:
    """``AutoTokenizer.from_pretrained(folder)``, from a view of the folder without ``found``'s credentials when
    there are any (the other files are links to the folder's own)."""
    from transformers import AutoTokenizer

    if not found:
        return AutoTokenizer.from_pretrained(folder, **options)
    with tempfile.TemporaryDirectory(prefix="headprune-tokenizer-") as view:
        for path in Path(folder).iterdir():
            if path.name in found:
                data = json.loads(path.read_text(encoding="utf-8"))
                (Path(view) / path.name).write_text(json.dumps(without_credentials(data)), encoding="utf-8")
            else:
                (Path(view) / path.name).symlink_to(path.resolve())
        tokenizer = AutoTokenizer.from_pretrained(view, **options)
    tokenizer.name_or_path = str(folder)  # not the view, which is gone
    return tokenizer


def strip_loaded(model: Any) -> None:
    """Remove credentials from a loaded model's config (and its sub-configs) and generation config."""
    for config in (model.config, getattr(model, "generation_config", None)):
        _strip_attributes(config)


def _strip_attributes(config: Any) -> None:
    if config is None:
        return
    for key, value in list(vars(config).items()):
        if is_credential(key, value):
            delattr(config, key)
        elif isinstance(value, (dict, list)) and without_credentials(value) != value:
            setattr(config, key, without_credentials(value))
        elif hasattr(value, "to_dict") and hasattr(value, "__dict__") and value is not config:
            _strip_attributes(value)  # a sub-config (text_config, vision_config)


__all__ = ["CONFIG_FILES", "credentials_found", "load_tokenizer", "strip_loaded"]
