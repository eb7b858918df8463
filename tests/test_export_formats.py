"""An export format owns its whole surface: the options only it takes, what ``headprune export`` prints of it,
its card's lines and how to load it all come from its class (``headprune.exporter.formats``), so the CLI and the
card name no format, and a format registered anywhere shows in both."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from helpers.cli import invoke

from headprune.cli.export_cmd import export_command, export_summary
from headprune.core.choices import EXPORT_FORMATS
from headprune.errors import ExportSettingsError
from headprune.exporter import read_record
from headprune.exporter.card import card_metadata, render_card
from headprune.exporter.formats import REGISTRY, ExportFormat, FormatOption, format_options
from headprune.exporter.formats.base import register

ROOT = Path(__file__).resolve().parent.parent
V1 = ROOT / "tests" / "data" / "v1"


@dataclass(frozen=True)
class NpzInfo:
    level: int
    arrays: tuple[str, ...]


class Npz(ExportFormat):
    """A format as a new module would declare it (never written: only what is read from its record)."""

    name = "npz"
    title = "NumPy archive"
    library_name = "numpy"
    takes = (FormatOption("npz_level", ("0", "9"), "0", "With --format npz: the compression level."),)
    details_type = NpzInfo

    @classmethod
    def summary_lines(cls, record):  # noqa: ANN001, ANN206
        return [f"npz: {len(cls.details(record).arrays)} arrays at level {cls.details(record).level}"]

    @classmethod
    def load_hint(cls, record, out):  # noqa: ANN001, ANN206
        return f'numpy.load("{out}/model.npz")'

    @classmethod
    def card_lines(cls, record):  # noqa: ANN001, ANN206
        return [f"- Archive level {cls.details(record).level}."]

    @classmethod
    def card_usage(cls, record):  # noqa: ANN001, ANN206
        return ["```python", 'numpy.load("model.npz")', "```"]


@pytest.fixture
def npz(monkeypatch: pytest.MonkeyPatch) -> type[ExportFormat]:
    """``Npz`` registered for one test (the registry is restored after it)."""
    monkeypatch.setattr(REGISTRY, "_entries", dict(REGISTRY._entries))
    return register(Npz)


def test_a_new_format_s_card_and_cli_lines_come_from_its_class(npz) -> None:  # noqa: ANN001
    record = replace(read_record(V1), format="npz", format_details={"level": 9, "arrays": ["a", "b"]})
    assert npz.details(record) == NpzInfo(9, ("a", "b"))
    card = render_card(record)
    assert "- Archive level 9." in card and card.endswith(
        '## How to load\n\n```python\nnumpy.load("model.npz")\n```\n\nPer-layer layouts: L0: grouped\n')
    assert "from_pretrained" not in card  # nothing of another format's
    assert card_metadata(record)["library_name"] == "numpy"
    lines = export_summary(record, "OUT")
    assert lines[2:] == ["npz: 2 arrays at level 9", 'wrote OUT  (load with numpy.load("OUT/model.npz"))']


def strings_in_code(path: Path) -> list[str]:
    """The string constants of a module's code (docstrings, its prose, left out)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)) and node.body
                  and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return [node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings]


def test_the_cli_the_card_and_the_pipeline_name_no_format() -> None:
    """No branch on a format's name and no format's words in their code: each format's module says them."""
    words = (*EXPORT_FORMATS, "llama", "llama.cpp", "onnxruntime", "GGUF", "ONNX", "model.gguf", "model.onnx")
    for path in ("headprune/cli/export_cmd.py", "headprune/exporter/card.py", "headprune/exporter/pipeline.py"):
        named = {word for text in strings_in_code(ROOT / path) for word in words
                 if re.search(rf"(?<![\w.]){re.escape(word)}(?![\w])", text)}
        assert not named, f"{path} names {sorted(named)}"
    assert "gguf" in strings_in_code(ROOT / "headprune/exporter/formats/gguf.py")  # the check sees a name


def test_each_format_option_is_a_cli_flag_offered_only_with_its_format(tmp_path: Path) -> None:
    params = {p.name: p for p in export_command.params}
    declared = format_options()
    assert [(owner, option.name) for owner, option in declared] == [("gguf", "gguf_type")]
    for owner, option in declared:
        flag = params[option.name]
        assert flag.opts == ["--" + option.name.replace("_", "-")] and tuple(flag.type.choices) == option.choices
        assert flag.default == option.default
        other = next(name for name in EXPORT_FORMATS if name != owner)
        result = invoke("export", "absent-model", "--heads", "L0.H0", "--format", other, flag.opts[0],
                        option.choices[-1], "--out", str(tmp_path / "o"))
        assert result.exit_code == 2 and "Traceback" not in result.output
        assert [line for line in result.output.splitlines() if line.strip()] == [
            f"headprune: error: {flag.opts[0]} applies only with --format {owner}; it would be ignored here"]


def test_the_python_api_routes_gguf_type_into_the_format_options_and_refuses_it_elsewhere(tmp_path: Path) -> None:
    """Checked before any model is looked for ("absent" would be a different error)."""
    from headprune import export

    with pytest.raises(ExportSettingsError, match="^gguf_type applies only with format gguf; it would be ignored"):
        export("absent", "L0.H0", format="safetensors", gguf_type="q8_0", out=tmp_path / "o")
    with pytest.raises(ExportSettingsError, match="^gguf_type applies only with format gguf"):
        export("absent", "L0.H0", format="onnx", format_options={"gguf_type": "f16"}, out=tmp_path / "o")
    with pytest.raises(ExportSettingsError, match="^gguf_type must be one of f32, f16, bf16, q8_0, q4_k_m, q5_k_m, q6_k, not 'q4'"):
        export("absent", "L0.H0", format="gguf", format_options={"gguf_type": "q4"}, out=tmp_path / "o")
    with pytest.raises(ExportSettingsError, match=r"^gguf_type is given twice \('f16', and 'q8_0'"):
        export("absent", "L0.H0", format="gguf", gguf_type="f16", format_options={"gguf_type": "q8_0"},
               out=tmp_path / "o")
    with pytest.raises(ExportSettingsError, match="^level applies only with no export format"):
        export("absent", "L0.H0", format="gguf", format_options={"level": "9"}, out=tmp_path / "o")


def test_each_format_counts_its_own_weight_files(tmp_path: Path) -> None:
    """The record's bytes are the export's weight files by its format's suffixes (an export read back as a
    source counts the same files)."""
    from headprune.exporter.export_record import EXPORT_WEIGHT_SUFFIXES, weight_bytes

    for name in EXPORT_FORMATS:
        suffixes = REGISTRY[name].weight_suffixes
        assert suffixes and set(suffixes) <= set(EXPORT_WEIGHT_SUFFIXES), name
    (tmp_path / "model.gguf").write_bytes(b"1" * 5)
    (tmp_path / "model.safetensors").write_bytes(b"1" * 7)
    (tmp_path / "tokenizer.json").write_bytes(b"1" * 11)
    assert weight_bytes(tmp_path, REGISTRY["gguf"].weight_suffixes) == 5 and weight_bytes(tmp_path) == 12
