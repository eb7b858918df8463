"""A find result carries a digest of what it says, which export checks: a result.json edited since find wrote it
(a finalist's heads changed, a guard deleted, a figure changed, the digest itself removed) is refused in one line
that offers its heads by hand, and writes nothing; a reformatted file, or older files without a digest, export as
before."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from headprune.core.hashing import json_digest
from headprune.search.find_result import UNDIGESTED, FindResult
from helpers.cli import assert_refused, invoke

FIND = ["--discovery", "300", "--heldout", "300", "--batch-size", "64"]


@pytest.fixture(scope="module")
def guarded(handmade_files):  # noqa: ANN001, ANN201
    """A run with a guard (exit 1: no set found kept the guard and improved the task): its result exports only with
    allow_unconfirmed, and its card then says so."""
    out = handmade_files / "guarded"
    found = invoke("find", str(handmade_files / "model"), "--task", str(handmade_files / "cue.jsonl"), *FIND,
                   "--guard", f"{handmade_files / 'reversed.jsonl'}:margin=5", "--out", str(out))
    assert found.exit_code == 1, found.output
    return out / "result.json"


def _edited(source: Path, folder: Path, edit) -> tuple[Path, dict]:  # noqa: ANN001
    data = json.loads(source.read_text())
    edit(data)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "result.json").write_text(json.dumps(data, indent=2))
    return folder / "result.json", data


def _export(handmade_files: Path, result: Path, out: Path, *extra: str):  # noqa: ANN202
    return invoke("export", str(handmade_files / "model"), "--heads", str(result), "--out", str(out), *extra)


def test_find_writes_a_readable_result_with_its_digest_last(guarded, handmade_files, tmp_path) -> None:
    text = guarded.read_text()
    data = json.loads(text)
    assert list(data)[-1] == "digest" and re.fullmatch(r"sha256:[0-9a-f]{64}", data["digest"])
    assert data["digest"] == json_digest(data, leave_out=UNDIGESTED) and text.count("\n") > 100  # indented JSON
    assert FindResult.load(guarded).guard_tasks  # read as written
    assert_refused(_export(handmade_files, guarded, tmp_path / "x"), "not confirmed")  # no claim: refused
    done = _export(handmade_files, guarded, tmp_path / "ok", "--allow-unconfirmed")
    assert done.exit_code == 0, done.output
    assert "**Unconfirmed**" in (tmp_path / "ok" / "README.md").read_text()


def _swap_finalist_2(data: dict) -> None:
    data["finalists"][1]["heads"] = ["L0.H3"]


def _drop_guards(data: dict) -> None:
    data["guard_tasks"], data["guarding"] = [], None
    for finalist in data["finalists"]:
        finalist["guards"] = []


def _better_p(data: dict) -> None:
    data["finalists"][0]["heldout"]["p_value"] = 1e-12


def _no_digest(data: dict) -> None:
    _drop_guards(data)
    del data["digest"]


@pytest.mark.parametrize(("edit", "rank", "why"), [
    (_swap_finalist_2, 2, "no longer matches"), (_drop_guards, 1, "no longer matches"),
    (_better_p, 1, "no longer matches"), (_no_digest, 1, "it has no digest")])
def test_an_edited_result_is_refused_offering_its_heads_by_hand(guarded, handmade_files, tmp_path, edit, rank,
                                                                 why) -> None:
    result, data = _edited(guarded, tmp_path / "run", edit)
    offered = ",".join(data["finalists"][rank - 1]["heads"])  # the set as the edited file names it
    refused = _export(handmade_files, result, tmp_path / "out", "--pick", str(rank), "--allow-unconfirmed")
    assert_refused(refused, "was edited after find wrote it")
    assert why in refused.output and f"give it by hand (--heads {offered})" in refused.output
    assert "claims no improvement" in refused.output
    assert not (tmp_path / "out").exists() and [p for p in tmp_path.iterdir() if ".tmp-" in p.name] == []
    by_hand = _export(handmade_files, offered, tmp_path / "by-hand")  # what the message offers works
    assert by_hand.exit_code == 0, by_hand.output
    assert (tmp_path / "by-hand" / "README.md").read_text().count("**No claim**") == 1


def test_a_reformatted_result_or_other_timings_still_export(guarded, handmade_files, tmp_path) -> None:
    """The digest is of the content (keys sorted, no spaces) and leaves the timings out: re-indenting the file,
    sorting its keys or a timing changed by hand is no edit of what find decided."""
    data = json.loads(guarded.read_text())
    data["timings"] = {name: 0.0 for name in data["timings"]}
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "result.json").write_text(json.dumps(data, indent=4, sort_keys=True))
    done = _export(handmade_files, tmp_path / "run", tmp_path / "out", "--pick", "2", "--allow-unconfirmed")
    assert done.exit_code == 0, done.output


def test_results_of_earlier_versions_have_no_digest_and_read_as_written() -> None:
    """What headprune 0.3.0 and before wrote (schemas 1 to 4) carries no digest: read as it is, as before."""
    data = Path(__file__).parent / "data"
    for path in (data / "v1" / "result.json", data / "find-0.2" / "result.json",
                 data / "release-0.2.0" / "run" / "result.json"):
        raw = json.loads(path.read_text())
        assert "digest" not in raw and raw["schema_version"] < 5
        assert FindResult.load(path).finalists
