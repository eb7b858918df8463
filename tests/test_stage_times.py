"""Stage times: kept per stage in result.json, printed at the end of find and tabled in report.md."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers.handmade import build_model, cue_task

from headprune.cli.main import cli
from headprune.report.markdown import render_markdown
from headprune.report.text import stage_times, stage_times_line
from headprune.search.find_result import FindResult
from headprune.tasks import write_jsonl_task

V1 = Path(__file__).parent / "data" / "v1" / "result.json"


def test_an_old_result_renders_its_timings_as_a_table_not_a_dict() -> None:
    result = FindResult.load(V1)  # setup 0.063, baseline 0.144, prescreen 0.0, screen 0.173, joint 0.044, ...
    rows = stage_times(result)
    assert [stage for stage, _ in rows] == ["setup", "baseline", "screen", "joint", "heldout", "other", "total"]
    assert dict(rows)["other"] == pytest.approx(0.566 - (0.063 + 0.144 + 0.173 + 0.044 + 0.141))
    report = render_markdown(result)
    assert "Timings (s): {" not in report
    table = report[report.index("## Stage times"):].splitlines()
    assert table[2:4] == ["| stage | seconds | share |", "|---|---|---|"]
    assert "| baseline and determinism check | 0.1 | 25.4% |" in table
    assert "| **total** | 0.6 | 100.0% |" in table
    assert stage_times_line(result).startswith("stage times: setup 0.1 s, baseline 0.1 s, screen 0.2 s")


def test_a_result_without_timings_has_no_table() -> None:
    data = json.loads(V1.read_text())
    data.pop("timings")
    result = FindResult.from_dict(data)
    assert stage_times(result) == [] and "## Stage times" not in render_markdown(result)
    assert stage_times_line(result) == "stage times: not recorded"


def test_find_prints_its_stage_times_and_they_do_not_overlap(tmp_path) -> None:
    lm = build_model()
    lm.model.save_pretrained(tmp_path / "model")
    lm.tokenizer.save_pretrained(tmp_path / "model")
    write_jsonl_task(cue_task(), tmp_path / "cue.jsonl")
    out = tmp_path / "run"
    result = CliRunner().invoke(cli, [
        "find", str(tmp_path / "model"), "--task", str(tmp_path / "cue.jsonl"), "--discovery", "100", "--heldout",
        "100", "--nominees", "3", "--max-heads", "2", "--finalists", "2", "--screen", "attribution", "--candidates",
        "3", "--batch-size", "64", "--out", str(out)], catch_exceptions=False)
    assert result.exit_code in (0, 1), result.output
    line = next(line for line in result.stderr.splitlines() if line.startswith("stage times: "))
    for stage in ("setup", "baseline", "prescreen", "screen", "joint", "membership", "heldout", "total"):
        assert f" {stage} " in line
    timings = json.loads((out / "result.json").read_text())["timings"]
    stages = {k: v for k, v in timings.items() if k != "total"}
    assert set(stages) == {"setup", "baseline", "prescreen", "screen", "joint", "membership", "heldout"}
    assert sum(stages.values()) <= timings["total"] + 0.005  # each second counted once (rounding aside)
    assert "| pre-screen |" in (out / "report.md").read_text()
