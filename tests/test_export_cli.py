"""export on the command line: from a find result, its refusals (exit 2, nothing written), a failed verification
(exit 1), and the claim its model card makes."""

from __future__ import annotations

import json

import pytest

from headprune.exporter import RECORD_NAME, read_record
from headprune.exporter.formats.safetensors import Safetensors
from helpers import break_slicing, build_tiny, save_folder
from helpers.cli import invoke


@pytest.fixture(scope="module")
def handmade_run(handmade_files):  # noqa: ANN001, ANN201
    """A find result ``run`` on the hand-made model beside its folder and task file, as a user would have it."""
    folder = handmade_files
    result = invoke("find", str(folder / "model"), "--task", str(folder / "cue.jsonl"),
                    "--discovery", "300", "--heldout", "300", "--batch-size", "64",
                    "--out", str(folder / "run"))
    assert result.exit_code == 0, result.output
    return folder


def test_cli_export_from_a_find_result(handmade_run, tmp_path) -> None:
    result = invoke("export", str(handmade_run / "model"), "--heads", str(handmade_run / "run" / "result.json"),
                    "--out", str(tmp_path / "pruned"), "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["removed_heads"] == ["L0.H0"]
    task = summary["verification"]["task"]
    assert task["n"] == 300 and task["exported"] == task["masked"] > task["intact"]  # the held-out gain, re-measured
    card = (tmp_path / "pruned" / "README.md").read_text()
    assert "confirmed" in card and "model-index" in card and "headprune-sliced" in card
    assert (tmp_path / "pruned" / RECORD_NAME).is_file()


def test_cli_export_says_the_layout_written_when_the_format_chose_another(handmade_run, tmp_path,
                                                                          monkeypatch) -> None:
    # ONNX writes the dense layout where ONNX Runtime GenAI could not run the sliced one: the line must say so.
    monkeypatch.setattr(Safetensors, "layout_for", lambda self, lm, plans: "dense")
    result = invoke("export", str(handmade_run / "model"), "--heads", "L0.H1", "--out", str(tmp_path / "pruned"))
    assert result.exit_code == 0, result.output
    assert "removed L0.H1 (dense, zero)" in result.output
    assert read_record(tmp_path / "pruned").layout == "dense"


@pytest.mark.parametrize(("heads", "extra", "fragment"), [
    ("L0.H0,L0.H1,L0.H2,L0.H3", [], "every head of layer 0"),
    ("L0.H7", [], "out of range"),
    ("L0.H1", ["--ablation", "mean"], "no bias"),
    ("L0.H1", ["--set", "99"], None),
])
def test_cli_export_refusals(handmade_run, tmp_path, heads, extra, fragment) -> None:
    if fragment is None:  # --set with a head list is meaningless but harmless; with a result it is checked
        heads, fragment = str(handmade_run / "run" / "result.json"), "finalists 1.."
    result = invoke("export", str(handmade_run / "model"), "--heads", heads, "--verify-task",
                    str(handmade_run / "cue.jsonl"), "--out", str(tmp_path / "o"), *extra)
    assert result.exit_code == 2, result.output
    assert fragment in result.output and "Traceback" not in result.output
    assert not (tmp_path / "o").exists()


def test_cli_export_refuses_a_result_from_another_model(handmade_run, tmp_path, tokenizer) -> None:
    other = build_tiny("llama", tokenizer)
    save_folder(other.model, tokenizer, tmp_path / "other")
    result = invoke("export", str(tmp_path / "other"), "--heads", str(handmade_run / "run"), "--out",
                    str(tmp_path / "o"))
    assert result.exit_code == 2 and "different model" in result.output


def test_cli_export_verification_failure_exits_1(handmade_run, tmp_path, monkeypatch) -> None:
    break_slicing(monkeypatch, 1.01)
    result = invoke("export", str(handmade_run / "model"), "--heads", "L0.H1", "--verify-task",
                    str(handmade_run / "cue.jsonl"), "--out", str(tmp_path / "o"))
    assert result.exit_code == 1 and "nothing was written" in result.output
    assert not (tmp_path / "o").exists()
    result = invoke("export", str(handmade_run / "model"), "--heads", "L0.H1", "--verify-task",
                    str(handmade_run / "cue.jsonl"), "--tolerance", "5", "--out", str(tmp_path / "o"))
    assert result.exit_code == 2 and "--tolerance must be between 0 and 0.1" in result.output


def _card_claim(folder) -> str:  # noqa: ANN001
    """The model card's first line after its YAML front matter."""
    body = (folder / "README.md").read_text().split("---\n", 2)[2]
    return body.lstrip("\n").splitlines()[0]


def test_cli_export_of_an_unconfirmed_set_needs_allow_unconfirmed(handmade_run, tmp_path) -> None:
    from dataclasses import replace

    from headprune.search.find_result import FindResult

    model, run = str(handmade_run / "model"), handmade_run / "run"
    confirmed = FindResult.load(run / "result.json")
    assert confirmed.confirmed and len(confirmed.finalists) >= 2
    # Not confirmed however it was claimed: its own test at p=0.5 and, where steps claimed it, every step too.
    steps = tuple(replace(step, p_value=0.5) for step in confirmed.verdict.steps)
    unconfirmed = replace(confirmed, finalists=(replace(confirmed.finalists[0], heldout=replace(
        confirmed.verdict, p_value=0.5, steps=steps)), *confirmed.finalists[1:]))
    assert not unconfirmed.confirmed
    unconfirmed.save(tmp_path / "unconfirmed.json")
    for heads, extra, why in ((str(run), ["--set", "2"], "finalist 2 is exploratory"),
                              (str(tmp_path / "unconfirmed.json"), [], "the primary set is not confirmed")):
        refused = invoke("export", model, "--heads", heads, *extra, "--out", str(tmp_path / "o"))
        assert refused.exit_code == 2 and not (tmp_path / "o").exists()
        assert refused.output.count("\n") == 1 and why in refused.output and "--allow-unconfirmed" in refused.output
    written = invoke("export", model, "--heads", str(run), "--set", "2", "--allow-unconfirmed", "--out",
                     str(tmp_path / "x"))
    assert written.exit_code == 0, written.output
    assert _card_claim(tmp_path / "x").startswith("**Unconfirmed (exploratory)**: finalist 2")
    written = invoke("export", model, "--heads", str(tmp_path / "unconfirmed.json"), "--allow-unconfirmed",
                     "--out", str(tmp_path / "u"))
    assert written.exit_code == 0 and _card_claim(tmp_path / "u").startswith("**Unconfirmed**")
    assert "confirmed**." not in (tmp_path / "u" / "README.md").read_text().replace("not confirmed**.", "")
    # The primary set of a confirmed run needs no flag; heads given by hand make no claim and need none.
    assert invoke("export", model, "--heads", str(run), "--out", str(tmp_path / "c")).exit_code == 0
    assert _card_claim(tmp_path / "c").startswith("**Confirmed**")
    assert invoke("export", model, "--heads", "L0.H1", "--verify-task", str(handmade_run / "cue.jsonl"),
                  "--out", str(tmp_path / "h")).exit_code == 0
    assert _card_claim(tmp_path / "h").startswith("**No claim**")
