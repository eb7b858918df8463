"""Records: typed results and export records round-trip through JSON, and files of version 1 still read.

``tests/data/v1`` holds a ``result.json`` and a ``headprune_export.json`` written by headprune before typed
records (commit 525b210, the hand-made model with a harmful head), kept as they were written. ``tests/data/v2``
holds the record of a q8_0 GGUF export written by headprune at commit 385e413 (schema version 2, whose runtime
checks named the file's type ``gguf_type``). ``tests/data/v3`` holds that record as headprune wrote it at commit
532ca12 (schema version 3, GGUF's details in the field ``gguf``), with the card (``card.md``) and the lines
``headprune export`` printed (``summary.txt``, the folder as ``OUT``) that 532ca12 made of it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from headprune.core.record_json import from_json, to_json
from headprune.exporter.card import card_metadata, render_card
from headprune.exporter.export_record import RECORD_NAME, SCHEMA_VERSION, ExportRecord, read_record
from headprune.exporter.formats.gguf import Gguf
from headprune.report.markdown import render_markdown, verdict_line
from headprune.search.find_result import FindResult

V1 = Path(__file__).resolve().parent / "data" / "v1"
V2 = V1.parent / "v2"
V3 = V1.parent / "v3"


def test_a_result_of_0_2_reads_and_renders() -> None:
    """result.json written by headprune 0.2.0 (tests/data/find-0.2, made with that commit's find on the hand-made
    model): its heads were admitted on the check half (``parsimony``), it has no selection, and its verdict reads
    as it was written."""
    path = V1.parent / "find-0.2" / "result.json"
    raw = json.loads(path.read_text())
    result = FindResult.load(path)
    assert raw["schema_version"] == 2 and result.selection is None and result.parsimony.dropped == 6
    assert result.verdict.share == 1 and result.verdict.gate is None
    assert result.confirmed == raw["finalists"][0]["heldout"]["confirmed"] is True
    assert result.verdict.interval == tuple(raw["finalists"][0]["heldout"]["interval"])
    assert "## Each head of the primary set" in render_markdown(result)
    assert verdict_line(result).startswith("primary set L0.H0: CONFIRMED improvement")


def test_version_1_result_reads_into_typed_records() -> None:
    raw = json.loads((V1 / "result.json").read_text())
    result = FindResult.load(V1 / "result.json")
    assert raw["schema_version"] == 1 and result.schema_version == 6
    assert list(result.finalists[0].heads) == raw["verdict"]["heads"] == ["L0.H0"]
    assert result.verdict.p_value == raw["verdict"]["p_value"] and result.confirmed == raw["verdict"]["confirmed"]
    # The stored bootstrap interval is gone; the interval shown is recomputed from the counts and agrees with p.
    low, high = result.verdict.interval
    assert (low > 0) == result.confirmed and low <= result.verdict.difference <= high
    assert [row.paired.gain for row in result.screen] == [row["gain"] for row in raw["screen"]]
    assert result.finalists[1].heldout.role == "exploratory" and not result.finalists[1].heldout.confirmed
    (control,) = result.finalists[0].controls
    assert control.difference == raw["finalists"][0]["control"]["difference"]
    assert result.settings.nominees == raw["settings"]["nominees"]
    assert "L0.H0" in render_markdown(result) and verdict_line(result).startswith("primary set L0.H0")


def test_version_1_export_record_reads(tmp_path) -> None:
    raw = json.loads((V1 / RECORD_NAME).read_text())
    folder = tmp_path / "export"
    folder.mkdir()
    shutil.copy(V1 / RECORD_NAME, folder / RECORD_NAME)
    record = read_record(folder)
    assert raw["headprune_export"] == 1 and record.removed_heads == tuple(raw["removed_heads"])
    assert record.verification.logits.max_abs_diff == raw["verification"]["max_abs_logit_diff"]
    assert record.origin.verdict.confirmed == raw["find_verdict"]["confirmed"] and record.auto_class
    assert card_metadata(record)["model-index"] and "headprune" in render_card(record)


def test_version_2_export_record_reads_with_the_runtime_checks_file_type(tmp_path) -> None:
    raw = json.loads((V2 / RECORD_NAME).read_text())
    folder = tmp_path / "export"
    folder.mkdir()
    shutil.copy(V2 / RECORD_NAME, folder / RECORD_NAME)
    record = read_record(folder)
    assert raw["schema_version"] == 2 and record.schema_version == SCHEMA_VERSION == 6
    typed, info = raw["gguf"]["typed_runtime"], Gguf.details(record)
    assert typed["gguf_type"] == "q8_0" and info.typed_runtime.file_type == "q8_0"  # not the default f32
    assert info.runtime.file_type == raw["gguf"]["runtime"]["gguf_type"] == "f32"
    assert info.typed_runtime.identical == typed["identical"] and info.gguf_type == "q8_0"
    again = json.loads(json.dumps(to_json(record)))
    assert "gguf_type" not in again["format_details"]["typed_runtime"] and from_json(ExportRecord, again) == record
    assert "q8_0 file" in render_card(record)


def test_version_3_export_record_upgrades_to_the_same_values_card_and_summary(tmp_path) -> None:
    """A record of schema 3 (GGUF's details in ``gguf``) reads with every value where schema 4 keeps it
    (``format_details``), and the card and ``headprune export``'s lines made of it are those 532ca12 made."""
    from headprune.cli.export_cmd import export_summary

    raw = json.loads((V3 / RECORD_NAME).read_text())
    folder = tmp_path / "export"
    folder.mkdir()
    shutil.copy(V3 / RECORD_NAME, folder / RECORD_NAME)
    record = read_record(folder)
    assert raw["schema_version"] == 3 and raw["format"] == "gguf" and record.schema_version == 6
    # The quantized check and an encoder's pooling (added later) read as absent.
    assert record.format_details == raw["gguf"]
    assert to_json(Gguf.details(record)) == {**raw["gguf"], "quantized": None, "size": None, "pooling": ""}
    assert Gguf.details(record).gguf_type == "q8_0"  # the GGUF type is still recorded ...
    written = to_json(record)
    # Fields added since (the source's commit, the layout's note, a quantized checkpoint's) read as absent.
    assert written["source"].pop("revision") is None and written.pop("layout_note") == ""
    assert written.pop("quantization") is None and written.pop("dropped") == []  # (a quantized checkpoint's)
    assert "gguf" not in written and {k: v for k, v in written.items() if k not in ("format_details",
                                                                                    "schema_version")} == {
        k: v for k, v in raw.items() if k not in ("gguf", "schema_version")}  # every other value as it was
    assert render_card(record) == (V3 / "card.md").read_text()  # ... and shown, word for word as before
    assert export_summary(record, "OUT") == (V3 / "summary.txt").read_text().splitlines()


def test_records_round_trip_through_json() -> None:
    result = FindResult.load(V1 / "result.json")
    again = FindResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert again == result
    record = read_record(V1)
    assert from_json(ExportRecord, json.loads(json.dumps(to_json(record)))) == record


def test_a_result_of_version_3_reads_with_its_gate() -> None:
    """A version 3 file (before the kept set's parts) whose primary set was cut down from the proposal carries the
    proposal's own test as a gate: it is read as written, the gate still decides, and nothing is marked selected."""
    data = FindResult.load(V1.parent / "find-0.2" / "result.json").to_dict()
    data["schema_version"] = 3
    verdict = data["finalists"][0]["heldout"]
    assert FindResult.from_dict(data).confirmed  # without a gate, as 0.2 wrote it
    verdict["gate"] = {"heads": ["L0.H0", "L0.H2"], "rescued": 9, "damaged": 8, "p_value": 1.0}
    result = FindResult.from_dict(data)
    assert result.schema_version == 6 and result.verdict.gate.heads == ("L0.H0", "L0.H2")
    assert not result.confirmed and not result.verdict.selected
