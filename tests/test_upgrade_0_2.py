"""Upgrading from 0.2.0: what 0.2.0 wrote is read by this release, and a 0.2.0 find result exports as 0.2.0 did.

``tests/data/release-0.2.0`` holds what headprune 0.2.0's own code (commit 7792adf, checked out apart; its
``make.py`` says how) wrote on the hand-made model with one harmful head and its cue task: a find run's
``run/result.json`` (schema 2: heads admitted on the check half, ``--extend 0`` by default) and the sliced export of
its primary set, ``pruned/`` (record schema 3, 0.2.0's remote modeling file, the weights), kept as written.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from headprune.exporter.card import render_card
from headprune.exporter.export_record import RECORD_NAME, SCHEMA_VERSION, read_record
from headprune.heads import parse_heads
from headprune.loading.models import load
from headprune.report.markdown import render_markdown, verdict_line
from headprune.search.find_result import SCHEMA_VERSION as RESULT_SCHEMA, FindResult
from headprune.surgery.ablation import ablated
from headprune.tasks import write_jsonl_task
from helpers import save_folder
from helpers.cli import assert_refused, invoke
from helpers.handmade import build_model, cue_task

RELEASE = Path(__file__).resolve().parent / "data" / "release-0.2.0"


@pytest.fixture(scope="module")
def user_folder(tmp_path_factory):  # noqa: ANN001, ANN201
    """The 0.2.0 user's folder on another machine: the hand-made model, its cue task and the find run as 0.2.0
    wrote it, byte for byte. The result names the task by the absolute path it had where 0.2.0 ran
    (``/tmp/g020b/cue.jsonl``), which is not here."""
    folder = tmp_path_factory.mktemp("user-0.2")
    lm = build_model()
    save_folder(lm.model, lm.tokenizer, folder / "model")
    write_jsonl_task(cue_task(), folder / "cue.jsonl")
    (folder / "run").mkdir()
    shutil.copy(RELEASE / "run" / "result.json", folder / "run" / "result.json")
    assert not Path(json.loads((folder / "run" / "result.json").read_text())["task"]["spec"]).exists()
    return folder


def _masked_logits(tokens: torch.Tensor, heads: list[str]) -> torch.Tensor:
    lm = build_model()
    with torch.no_grad(), ablated(lm, parse_heads(heads)):
        return lm.model(tokens).logits


def test_a_result_of_0_2_0_reads_as_written() -> None:
    raw = json.loads((RELEASE / "run" / "result.json").read_text())
    result = FindResult.load(RELEASE / "run" / "result.json")
    assert raw["schema_version"] == 2 and result.schema_version == RESULT_SCHEMA
    assert result.settings.extend == raw["settings"]["extend"] == 0  # 0.2.0's default; 0.3.0's is 1
    assert result.selection is None and result.parsimony is not None  # heads admitted on the check half
    assert [str(h) for h in result.primary] == raw["finalists"][0]["heads"] == ["L0.H0"]
    assert result.confirmed and result.verdict.share == 1 and result.verdict.gate is None  # tested at full alpha
    assert result.verdict.p_value == raw["finalists"][0]["heldout"]["p_value"]
    assert verdict_line(result).startswith("primary set L0.H0: CONFIRMED improvement")
    assert "L0.H0" in render_markdown(result)


def test_an_export_of_0_2_0_reads_and_loads_as_the_masked_original() -> None:
    raw = json.loads((RELEASE / "pruned" / RECORD_NAME).read_text())
    record = read_record(RELEASE / "pruned")
    assert raw["schema_version"] == 3 and record.schema_version == SCHEMA_VERSION
    assert list(record.removed_heads) == raw["removed_heads"] == ["L0.H0"] and record.layout == "sliced"
    assert record.origin.verdict.confirmed and "confirmed" in render_card(record)
    tokens = torch.tensor([[4, 700, 9, 1003]])
    masked = _masked_logits(tokens, raw["removed_heads"])
    exported = load(RELEASE / "pruned")  # headprune 0.3.0 rebuilds 0.2.0's sliced checkpoint
    assert sum(p.numel() for p in exported.model.parameters()) == raw["parameters"]["after"]  # H0 is gone
    with torch.no_grad():
        assert torch.equal(exported.model(tokens).logits, masked)
    # Without headprune's loader: stock transformers through the modeling file 0.2.0 wrote beside the weights.
    from transformers import AutoModelForCausalLM

    stock = AutoModelForCausalLM.from_pretrained(RELEASE / "pruned", trust_remote_code=True).eval()
    with torch.no_grad():
        assert torch.equal(stock(tokens).logits, masked)


def test_0_3_exports_a_result_of_0_2_0_as_0_2_0_did(user_folder, tmp_path) -> None:
    """The task file is not where 0.2.0's result says: export says to give it, and given with --verify-task it stands
    in for the recorded path (its examples are find's, by hash): find's held-out set is rebuilt from it."""
    heads = ["--heads", str(user_folder / "run" / "result.json")]
    assert_refused(invoke("export", str(user_folder / "model"), *heads, "--out", str(tmp_path / "x")),
                   "find's task /tmp/g020b/cue.jsonl is not here (a result made on another machine?): give --verify-task")
    result = invoke("export", str(user_folder / "model"), *heads, "--verify-task", str(user_folder / "cue.jsonl"),
                    "--out", str(tmp_path / "pruned"), "--json")
    assert result.exit_code == 0, result.output
    summary, before = json.loads(result.stdout), json.loads((RELEASE / "pruned" / RECORD_NAME).read_text())
    assert summary["removed_heads"] == before["removed_heads"] and summary["layout"] == before["layout"]
    task, task_before = summary["verification"]["task"], before["verification"]["task"]
    assert {k: task[k] for k in ("n", "intact", "masked", "exported")} == {
        k: task_before[k] for k in ("n", "intact", "masked", "exported")}  # the held-out gain 0.2.0 measured
    assert summary["parameters"] == before["parameters"]
    ours = load_file(tmp_path / "pruned" / "model.safetensors")
    theirs = load_file(RELEASE / "pruned" / "model.safetensors")
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)


def test_another_verify_task_is_verified_on_as_given_when_finds_is_not_here(user_folder, tmp_path) -> None:
    """A --verify-task that is not find's task (other examples) does not stand in for it: the export is verified on
    it as given, as for any result."""
    from helpers.handmade import reversed_task

    write_jsonl_task(reversed_task().first(64), tmp_path / "other.jsonl")
    result = invoke("export", str(user_folder / "model"), "--heads", str(user_folder / "run" / "result.json"),
                    "--verify-task", str(tmp_path / "other.jsonl"), "--out", str(tmp_path / "pruned"), "--json")
    assert result.exit_code == 0, result.output
    task = json.loads(result.stdout)["verification"]["task"]
    assert task["task"] == "other.jsonl" and task["n"] == 64 and task["masked"] == task["exported"]
