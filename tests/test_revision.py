"""--revision: a Hub id read at one commit; find records it, export of the result reads it, and a branch that moved
since is refused. Against the local server that speaks the Hub's API (tests/helpers/hub_server.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from headprune.errors import ModelNotFoundError
from headprune.loading.model_download import commit_of
from headprune.loading.models import load_model
from helpers import save_folder
from helpers.cli import invoke
from helpers.handmade import build_model, cue_task
from helpers.hub_server import branch_sha


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _use_cache(monkeypatch, folder: Path) -> None:  # noqa: ANN001
    # huggingface_hub reads its cache folder from the environment once, at import.
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(folder))


@pytest.fixture(scope="module")
def cue_files(tmp_path_factory):  # noqa: ANN201
    """The hand-made model whose head L0.H0 hurts cue_task (find confirms removing it), as a Hub repo's files, and
    the same model with that head's harm doubled (other weights: another model)."""
    folder = tmp_path_factory.mktemp("cue")
    lm = build_model()
    save_folder(lm.model, lm.tokenizer, folder)
    other = tmp_path_factory.mktemp("cue-other")
    lm2 = build_model(harm=0.4)
    save_folder(lm2.model, lm2.tokenizer, other)
    return _files(folder), _files(other)


def test_a_branch_tag_or_commit_is_read_at_its_commit(hub, cue_files) -> None:
    files, other = cue_files
    hub.state.add_repo("alice/cue", files)
    hub.state.repos["alice/cue"]["branches"]["v2"] = other
    main, v2 = branch_sha(files), branch_sha(other)
    assert commit_of(load_model("alice/cue", device="cpu").folder) == main
    second = load_model("alice/cue", device="cpu", revision="v2")
    weight = second.model.model.layers[0].self_attn.o_proj.weight[0, 0].detach()
    assert commit_of(second.folder) == v2 and abs(float(weight) + 0.4) < 1e-6
    assert commit_of(load_model("alice/cue", device="cpu", revision=main).folder) == main


def test_a_missing_revision_or_a_revision_of_a_local_model_is_one_line_exit_2(hub, cue_files, tmp_path) -> None:
    hub.state.add_repo("alice/cue", cue_files[0])
    task = tmp_path / "t.jsonl"
    task.write_text(json.dumps({"prompt": "a", "choices": [" b", " c"], "answer": 0}) + "\n")
    for model, revision, fragment in (("alice/cue", "f" * 40, "the Hub has no revision 'fffff"),
                                      ("alice/cue", "nobranch", "the Hub has no revision 'nobranch'"),
                                      (str(tmp_path), "main", "revision applies to a Hub id")):
        result = invoke("eval", model, "--task", str(task), "--revision", revision)
        assert result.exit_code == 2, result.output
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert len(lines) == 1 and fragment in lines[0] and "Traceback" not in result.output


def test_find_records_the_commit_and_export_reads_it_or_refuses_a_moved_branch(hub, cue_files, tmp_path,
                                                                               monkeypatch) -> None:
    from headprune.exporter import export
    from headprune.search.find import find

    files, other = cue_files
    hub.state.add_repo("alice/cue", files)
    commit = branch_sha(files)
    result = find("alice/cue", cue_task(), discovery=300, heldout=300, screen="attribution", candidates=2,
                  nominees=2, max_heads=1, finalists=1, device="cpu", dtype="float32")
    assert result.model.revision == commit and result.confirmed
    run = tmp_path / "run"
    run.mkdir()
    result.save(run / "result.json")
    assert json.loads((run / "result.json").read_text())["model"]["revision"] == commit

    # The branch moves (new weights), and the export runs where the cache has never seen the model.
    hub.state.repos["alice/cue"]["branches"]["main"] = other
    _use_cache(monkeypatch, tmp_path / "another-cache")
    refused = invoke("export", "alice/cue", "--heads", str(run), "--out", str(tmp_path / "o"))
    assert refused.exit_code == 2, refused.output
    lines = [line for line in refused.output.splitlines() if line.strip()]
    assert len(lines) == 1 and f"main now reads commit {branch_sha(other)[:12]}, not the commit {commit[:12]}" \
        in lines[0] and f"--revision {commit}" in lines[0]
    assert not (tmp_path / "o").exists()
    record = export("alice/cue", run, verify_task=cue_task(), verify_limit=40, revision=commit, out=tmp_path / "o")
    assert record.source.revision == commit and f"of `alice/cue` (commit `{commit}`)" in (
        tmp_path / "o" / "README.md").read_text()
    # --revision main reads the moved branch: other weights than find measured, refused as another model.
    moved = invoke("export", "alice/cue", "--heads", str(run), "--revision", "main", "--out", str(tmp_path / "o2"))
    assert moved.exit_code == 2 and "made for a different model" in moved.output

    # Offline, with the commit cached: export reads it without the Hub; the cache also knows main moved (the
    # attempt above read it), so without --revision it is refused offline too.
    from headprune.errors import ExportSettingsError

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    before = len(hub.state.requests)
    with pytest.raises(ExportSettingsError, match="main now reads commit"):
        export("alice/cue", run, verify_task=cue_task(), verify_limit=40, out=tmp_path / "o3")
    offline = export("alice/cue", run, verify_task=cue_task(), verify_limit=40, revision=commit, out=tmp_path / "o3")
    assert offline.source.revision == commit and len(hub.state.requests) == before


def test_a_result_of_0_2_0_on_a_repo_moved_since_says_it_records_no_commit(hub, cue_files, tmp_path) -> None:
    """0.2.0 recorded no commit (tests/data/release-0.2.0: its find on these weights), so export reads main; where
    main has moved since, the refusal says what changed and what to give."""
    files, other = cue_files
    hub.state.add_repo("alice/cue", files)
    hub.state.repos["alice/cue"]["branches"]["main"] = other
    result = Path(__file__).parent / "data" / "release-0.2.0" / "run" / "result.json"
    assert "revision" not in json.loads(result.read_text())["model"]
    refused = invoke("export", "alice/cue", "--heads", str(result), "--out", str(tmp_path / "o"))
    assert refused.exit_code == 2, refused.output  # after the download's progress line, one line says why
    (line,) = [line for line in refused.output.splitlines() if line.startswith("headprune: error: ")]
    assert "made for a different model" in line and "records no commit (headprune before 0.3.0 did not)" in line
    assert "give --revision with the commit it read" in line and "Traceback" not in refused.output
    assert not (tmp_path / "o").exists()


def test_offline_and_the_revision_not_cached_says_so(monkeypatch, tmp_path) -> None:
    _use_cache(monkeypatch, tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotFoundError, match="alice/nowhere at v1: not in the local Hugging Face cache"):
        load_model("alice/nowhere", device="cpu", revision="v1")
