"""The user-facing choice lists (``headprune.core.choices``) are what the library accepts: where a list is a
registry's keys, the two hold the same names, so a format, a task kind or a dtype added to one and not the other fails
here; and the CLI offers exactly these lists. Likewise find's settings: one object, whose defaults the CLI's options
read, checked the same whether given as the object or as keywords."""

from __future__ import annotations

import subprocess
import sys

import click
import pytest
import torch

from headprune.cli.main import cli
from headprune.core import choices, devices
from headprune.exporter.formats import FORMATS
from headprune.errors import SearchSettingsError
from headprune.exporter.formats.base import REGISTRY
from headprune.search.settings import (DEFAULT_CANDIDATES, DEFAULT_DISCOVERY, DEFAULT_HELDOUT, SETTING_NAMES,
                                       FindSettings, settings_for)


def test_export_formats_are_the_registry() -> None:
    assert set(choices.EXPORT_FORMATS) == set(REGISTRY)
    assert FORMATS == choices.EXPORT_FORMATS  # messages list them in the choices' order


def test_task_kinds_are_the_registered_specs_and_each_has_a_scorer() -> None:
    from headprune.scoring import _SCORERS  # the scorer registry (as tests/test_tasks_listing.py reads it)
    from headprune.tasks.kinds import KINDS, shown_order

    assert set(choices.TASK_KINDS) == set(KINDS) == {scorer.kind for scorer in _SCORERS.values()}
    assert [spec.name for spec in shown_order()] == list(choices.TASK_KINDS)  # listed in the choices' order


def test_dtypes_and_device_maps_are_what_loading_accepts() -> None:
    assert list(devices.DTYPES) == list(choices.DTYPES)
    cpu = torch.device("cpu")
    assert [devices.resolve_dtype(name, cpu) for name in choices.DTYPES] == [torch.float32, torch.bfloat16,
                                                                            torch.float16]
    assert [devices.check_device_map(name) for name in choices.DEVICE_MAPS] == list(choices.DEVICE_MAPS)


@pytest.mark.parametrize(("command", "option", "expected"), [
    ("find", "rank_by", choices.RANK_KEYS), ("find", "screen", choices.SCREENS),
    ("find", "objective", choices.OBJECTIVES), ("find", "prefer", choices.PREFER),
    ("find", "compress_search", choices.SEARCHES), ("find", "ablation", choices.ABLATIONS),
    ("find", "dtype", choices.LOAD_DTYPES), ("find", "device_map", choices.DEVICE_MAPS),
    ("eval", "ablation", choices.ABLATIONS), ("export", "fmt", choices.EXPORT_FORMATS),
    ("export", "layout", choices.EXPORT_LAYOUTS), ("export", "dtype", choices.DTYPES),
    ("export", "gguf_type", choices.GGUF_TYPES),
])
def test_cli_offers_the_choices(command: str, option: str, expected: tuple[str, ...]) -> None:
    param = next(p for p in cli.commands[command].params if p.name == option)
    assert isinstance(param.type, click.Choice)
    assert tuple(param.type.choices) == expected


def test_choices_import_no_torch() -> None:
    """The CLI reads the lists (and find's settings defaults) to build --help: they must not load torch."""
    code = ("import sys, headprune.core.choices, headprune.search.settings, headprune.cli.main; "
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_find_options_default_to_the_settings() -> None:
    """Each search setting is one `find` option, whose default is the setting's own (written once)."""
    params = {p.name: p for p in cli.commands["find"].params}
    defaults = FindSettings()
    assert set(SETTING_NAMES) <= set(params)
    assert {name: params[name].default for name in SETTING_NAMES} == {
        name: getattr(defaults, name) for name in SETTING_NAMES}
    assert (params["discovery"].default, params["heldout"].default) == (DEFAULT_DISCOVERY, DEFAULT_HELDOUT)


def test_settings_for_completes_once() -> None:
    given = [FindSettings(), FindSettings(screen="halving"), FindSettings(objective="compress", compress_search="beam")]
    done = [settings_for(s) for s in given]
    assert done[0] == given[0]
    assert done[1].candidates == DEFAULT_CANDIDATES
    assert (done[2].max_drop, done[2].prefer, done[2].patience, done[2].beam_width) == (0.5, "heads", 3, 4)
    assert [settings_for(s) for s in done] == done  # what find records is taken back unchanged


@pytest.mark.parametrize("how", ["object", "keywords"])
def test_find_refuses_the_same_settings_either_way(how: str) -> None:
    """The object and the keywords meet the same checks, before any model is loaded ("absent" is none)."""
    from headprune import find

    given = {"screen": "exact", "candidates": 5}
    with pytest.raises(SearchSettingsError) as caught:
        find("absent", "absent", **({"settings": FindSettings(**given)} if how == "object" else given))
    assert set(caught.value.settings) == {"candidates", "screen"}


def test_find_refuses_an_unknown_keyword() -> None:
    from headprune import find

    with pytest.raises(TypeError, match="nominess"):
        find("absent", "absent", nominess=3)
