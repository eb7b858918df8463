"""scripts/bench/render.py: docs/benchmarks.md's tables are what their JSON records render to, and a table that
no longer agrees with its record is found and written again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scripts.bench import render

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks.md"


@pytest.mark.parametrize(("doc", "least"), [(DOC, 2), (ROOT / "docs" / "find.md", 2), (ROOT / "README.md", 1)])
def test_every_table_in_the_docs_is_its_record_rendered(doc: Path, least: int) -> None:
    tables = render.marked_tables(doc.read_text(encoding="utf-8"))
    assert len(tables) >= least
    for record, table in tables:
        assert (ROOT / record.partition("#")[0]).is_file(), record
        assert table == render.render(ROOT / record), f"{record}: run python -m scripts.bench.render --update {doc}"


def test_check_finds_a_changed_figure_and_update_writes_it_again(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    text = DOC.read_text(encoding="utf-8")
    assert "| x7.4 |" in text
    doc.write_text(text.replace("| x7.4 |", "| x7.5 |", 1), encoding="utf-8")
    assert render.main(["--check", str(doc)]) == 1
    assert render.main(["--update", str(doc)]) == 0
    assert doc.read_text(encoding="utf-8") == text and render.main(["--check", str(doc)]) == 0


def test_a_record_without_its_own_renderer_gets_a_column_per_key(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    record = {"bench": "sandbox", "results": [{"isolation": "namespaces", "programs_per_s": 41.25},
                                              {"isolation": "audit|hook", "programs_per_s": 90.0, "chosen": True}]}
    (tmp_path / "sandbox.json").write_text(json.dumps(record))
    assert render.main([str(tmp_path / "sandbox.json")]) == 0
    assert capsys.readouterr().out.splitlines()[:4] == [
        "| isolation | programs_per_s | chosen |", "|---|---|---|", "| namespaces | 41.25 |  |",
        "| audit\\|hook | 90 | True |"]
