"""Every export option is checked before the model is touched: a bad option for each format exits 2 naming
the option, even when the model would not load (its config.json is broken here, so loading it first would
give a different error)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from headprune.cli.main import cli
from headprune.errors import ExportSettingsError, SearchSettingsError, SettingsError
from headprune.exporter import export

BAD_OPTIONS = [  # (format, CLI arguments, the option the one line must name)
    ("safetensors", ["--max-shard-size", "lots"], "--max-shard-size"),
    ("safetensors", ["--tolerance", "0.5"], "--tolerance"),
    ("onnx", ["--dtype", "float16"], "--dtype"),
    ("onnx", ["--max-shard-size", "5GB"], "--max-shard-size"),
    ("gguf", ["--dtype", "bfloat16"], "--dtype"),
]


@pytest.fixture
def unloadable(tmp_path):  # noqa: ANN001, ANN201
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{ this is not json")
    return folder


@pytest.mark.parametrize(("fmt", "args", "flag"), BAD_OPTIONS)
def test_a_bad_option_exits_2_before_the_model_is_loaded(unloadable, tmp_path, fmt, args, flag) -> None:
    result = CliRunner().invoke(cli, ["export", str(unloadable), "--heads", "L0.H1", "--format", fmt, *args,
                                      "--out", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and flag in lines[0] and "config" not in lines[0], lines
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("fmt", "options", "named"), [
    ("gguf", {"gguf_type": "q4_k"}, "gguf_type"),
    ("safetensors", {"ablation": "mean"}, "verify_task"),  # heads given by hand: the means need a task
    ("safetensors", {"layout": "folded"}, "layout"),
])
def test_the_library_refuses_bad_options_before_loading_too(unloadable, tmp_path, fmt, options, named) -> None:
    with pytest.raises(ExportSettingsError, match=named) as caught:
        export(str(unloadable), "L0.H1", format=fmt, out=tmp_path / "out", **options)
    assert named in caught.value.settings
    # An export option is no search setting; both are settings the CLI answers with exit 2.
    assert isinstance(caught.value, SettingsError) and not isinstance(caught.value, SearchSettingsError)
