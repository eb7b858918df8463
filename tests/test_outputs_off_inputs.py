"""No output lands on an input, and the last move checks again.

Every command's ``--out`` that is, holds or lies inside what the command reads (the model folder, a task, held-out or
control file, the find run an export reads) is refused in one line, exit 2, before anything runs, and the input is
byte for byte what it was. Right before the final move (an export's swap, find's outputs moving into their folder)
the destination is checked again under the rule of the start: a folder another process made or changed meanwhile
(the folder lock binds headprune processes only) is left as it is, and the new output stays in its staging folder,
named in the one line. Before these checks, ``eval --out MODEL/model.safetensors`` replaced the weights with two
result lines, ``find MODEL --out MODEL`` wrote among the model's files, and the swap deleted a folder that appeared
while the export ran.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from headprune.core.io import atomic_folder, clean_leftovers
from headprune.errors import KeptOutputError, ResultFileError
from headprune.exporter import read_record, verify_record
from headprune.tasks import write_jsonl_task
from helpers import build_tiny, random_choice_task, save_folder
from helpers.cli import assert_refused, invoke

FIND = ["--discovery", "24", "--heldout", "16", "--nominees", "2", "--max-heads", "2", "--finalists", "1",
        "--batch-size", "8"]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, tokenizer):  # noqa: ANN001, ANN201
    """A model folder (with a report.md of its own, as a model card folder may have), task and control files, and a
    find run."""
    folder = tmp_path_factory.mktemp("inputs")
    save_folder(build_tiny("llama", tokenizer, seed=4).model, tokenizer, folder / "model")
    (folder / "model" / "report.md").write_text("the model's own report")
    (folder / "tasks").mkdir()
    write_jsonl_task(random_choice_task(40, seed=1), folder / "tasks" / "t.jsonl")
    (folder / "controls").mkdir()
    write_jsonl_task(random_choice_task(20, seed=2), folder / "controls" / "control.jsonl")
    done = invoke("find", str(folder / "model"), "--task", str(folder / "tasks" / "t.jsonl"), *FIND, "--out",
                  str(folder / "run"))
    assert done.exit_code in (0, 1), done.output
    return folder


def contents(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` with its bytes (None for a folder)."""
    return {str(p.relative_to(root)): None if p.is_dir() else p.read_bytes() for p in sorted(root.rglob("*"))}


def refused(result, fragment: str) -> None:  # noqa: ANN001
    assert_refused(result, fragment, stream="stderr")


def refused_leaving_intact(inputs: Path, fragment: str, *args: str) -> None:
    """``headprune ARGS`` is refused with ``fragment``, and every file under ``inputs`` keeps its bytes."""
    before = contents(inputs)
    refused(invoke(*args, catch_exceptions=True), fragment)
    assert contents(inputs) == before


@pytest.mark.parametrize(("out", "fragment"), [
    ("model/model.safetensors", "lies inside the model"),
    ("model/results.jsonl", "lies inside the model"),
    ("tasks/t.jsonl", "is the task file"),
])
def test_eval_never_writes_on_its_inputs(inputs, out, fragment) -> None:
    refused_leaving_intact(inputs, fragment, "eval", str(inputs / "model"), "--task", str(inputs / "tasks" / "t.jsonl"),
                           "--limit", "2", "--out", str(inputs / out))


@pytest.mark.parametrize(("out", "extra", "fragment"), [
    ("model", [], "is the model"),
    ("model/run", [], "lies inside the model"),
    ("tasks", [], "holds a task file of the run"),
    ("controls", ["--control", "controls/control.jsonl"], "holds a task file of the run"),
    (".", [], "holds the model"),
])
def test_find_never_writes_on_its_inputs(inputs, monkeypatch, out, extra, fragment) -> None:
    monkeypatch.chdir(inputs)
    refused_leaving_intact(inputs, fragment, "find", "model", "--task", "tasks/t.jsonl", *extra, *FIND, "--out", out)


def test_find_refuses_a_folder_of_other_files(inputs, tmp_path) -> None:
    """A folder that is no find run may hold a report.md or result.json of its own: find's would replace it."""
    out = tmp_path / "notes"
    out.mkdir()
    (out / "report.md").write_text("mine")
    done = invoke("find", str(inputs / "model"), "--task", str(inputs / "tasks" / "t.jsonl"), *FIND, "--out",
                  str(out), catch_exceptions=True)
    refused(done, "holds files find does not write (report.md)")
    assert contents(out) == {"report.md": b"mine"}


@pytest.mark.parametrize(("out", "extra", "fragment"), [
    ("run/pruned", [], "lies inside the find run it exports"),
    ("controls", ["--verify-task", "controls/control.jsonl"], "holds the verification task"),
    ("tasks", [], "holds a task of the find run it exports"),
])
def test_export_never_writes_on_what_it_reads(inputs, monkeypatch, out, extra, fragment) -> None:
    monkeypatch.chdir(inputs)
    refused_leaving_intact(inputs, fragment, "export", "model", "--heads", "run/result.json", "--allow-unconfirmed",
                           *extra, "--out", out)


def _appear_during(monkeypatch, action) -> None:  # noqa: ANN001
    """Run ``action`` while the output is being written (when its model card or report is rendered), as another
    process would act between the checks of the start and the final move."""
    import headprune.exporter.card as card
    import headprune.report.markdown as markdown

    for module, name in ((card, "render_card"), (markdown, "render_markdown")):
        real = getattr(module, name)

        def rendered(*args, _real=real, **kwargs):  # noqa: ANN002, ANN003, ANN202
            action()
            return _real(*args, **kwargs)

        monkeypatch.setattr(module, name, rendered)


def _kept(result) -> Path:  # noqa: ANN001
    """The staging folder the one line names (after the run's progress lines)."""
    assert result.exit_code == 2, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("headprune: error: ")]
    assert errors == result.stderr.splitlines()[-1:], result.stderr  # one line, the last
    assert "nothing there was replaced or removed, and it is kept in " in errors[0], errors
    return Path(errors[0].rsplit("it is kept in ", 1)[1])


def test_a_folder_made_during_the_export_is_left_and_the_export_kept(inputs, tmp_path, monkeypatch) -> None:
    out = tmp_path / "pruned"

    def user() -> None:  # mkdir -p out && cp notes out/
        out.mkdir(exist_ok=True)
        (out / "notes.txt").write_text("the user's notes")

    _appear_during(monkeypatch, user)
    done = invoke("export", str(inputs / "model"), "--heads", "L0.H1", "--out", str(out), catch_exceptions=True)
    staging = _kept(done)
    assert "exists and is not a headprune export" in done.stderr
    assert contents(out) == {"notes.txt": b"the user's notes"}
    assert verify_record(staging).removed_heads == ("L0.H1",)  # the verified export, whole
    clean_leftovers(out)  # the next run on the folder: the kept folder is not announced as headprune's any more
    assert staging.is_dir()


def test_a_file_added_to_a_previous_export_during_an_overwrite_is_kept(inputs, tmp_path, monkeypatch) -> None:
    out = tmp_path / "pruned"
    assert invoke("export", str(inputs / "model"), "--heads", "L0.H1", "--out", str(out)).exit_code == 0
    before = contents(out)
    _appear_during(monkeypatch, lambda: (out / "notes.txt").write_text("added meanwhile"))
    done = invoke("export", str(inputs / "model"), "--heads", "L1.H0", "--out", str(out), "--overwrite",
                  catch_exceptions=True)
    staging = _kept(done)
    assert "holds files its export did not write (notes.txt)" in done.stderr
    assert contents(out) == {**before, "notes.txt": b"added meanwhile"}  # the previous export and the notes
    assert read_record(staging).removed_heads == ("L1.H0",)


def test_an_export_that_appeared_during_the_export_is_not_replaced_without_overwrite(inputs, tmp_path,
                                                                                    monkeypatch) -> None:
    """Another export copied to --out meanwhile is headprune's own kind of folder, but replacing it needs
    --overwrite, as at the start (an export-settings refusal, not only a file error, keeps the new export too)."""
    other, out = tmp_path / "other", tmp_path / "pruned"
    assert invoke("export", str(inputs / "model"), "--heads", "L0.H1", "--out", str(other)).exit_code == 0
    _appear_during(monkeypatch, lambda: shutil.copytree(other, out))
    done = invoke("export", str(inputs / "model"), "--heads", "L1.H0", "--out", str(out), catch_exceptions=True)
    staging = _kept(done)
    assert "holds a previous export; give --overwrite to replace it" in done.stderr
    assert contents(out) == contents(other) and read_record(staging).removed_heads == ("L1.H0",)


def test_a_file_added_between_the_check_and_the_swap_is_swapped_back(tmp_path, monkeypatch) -> None:
    """The check passes, then a file appears before the swap: the folder taken out of place is checked again, and
    put back."""
    import headprune.core.paths as paths

    target = tmp_path / "out"
    target.mkdir()
    (target / "mine.txt").write_text("old")
    swap, swaps = paths.exchange, []

    def late_writer(first, second) -> bool:  # noqa: ANN001
        if not swaps:  # before the swap (not before the swap back)
            (target / "late.txt").write_text("appeared after the check")
        swaps.append(second)
        return swap(first, second)

    monkeypatch.setattr(paths, "exchange", late_writer)
    only_mine = lambda folder: None if {p.name for p in folder.iterdir()} == {"mine.txt"} else (  # noqa: E731
        _ for _ in ()).throw(ResultFileError(f"{folder} changed"))
    with pytest.raises(KeptOutputError, match="it is kept in") as caught:
        with atomic_folder(target, replace=True, check=only_mine) as staging:
            (staging / "new.txt").write_text("new")
    assert contents(target) == {"late.txt": b"appeared after the check", "mine.txt": b"old"}
    kept = Path(str(caught.value).rsplit("it is kept in ", 1)[1])
    assert contents(kept) == {"new.txt": b"new"} and len(swaps) == 2


def test_a_report_that_appeared_during_find_is_left_and_the_outputs_kept(inputs, tmp_path, monkeypatch) -> None:
    out = tmp_path / "run"
    _appear_during(monkeypatch, lambda: (out / "report.md").write_text("a report of the user's"))
    done = invoke("find", str(inputs / "model"), "--task", str(inputs / "tasks" / "t.jsonl"), *FIND, "--out",
                  str(out), catch_exceptions=True)
    staging = _kept(done)
    assert "report.md, which find did not write and which appeared while it ran" in done.stderr
    assert (out / "report.md").read_text() == "a report of the user's" and not (out / "result.json").exists()
    assert json.loads((staging / "result.json").read_text())["finalists"]


def test_a_new_run_in_a_fresh_folder_still_writes_everything(inputs, tmp_path) -> None:
    """The checks leave the ordinary run alone: outputs written, and again with --overwrite."""
    out = tmp_path / "run"
    for extra in ([], ["--overwrite"]):
        done = invoke("find", str(inputs / "model"), "--task", str(inputs / "tasks" / "t.jsonl"), *FIND, "--out",
                      str(out), *extra, catch_exceptions=True)
        assert done.exit_code in (0, 1), done.output
        # front.png: find's default guard, general, runs on the tiny model (the texts that fit its positions)
        assert {"journal.jsonl", "result.json", "report.md", "screen.png", "front.png"} == {
            p.name for p in out.iterdir()}
    shutil.rmtree(out)


# Links, `..` after a link, and the Hugging Face cache: the same rule by device and inode, whatever the spelling.

def _as_cache_snapshot(model: Path, root: Path) -> tuple[Path, Path]:
    """A copy of ``model`` laid out as the Hugging Face cache lays out a snapshot: every file a symbolic link
    ``snapshots/COMMIT/NAME -> ../../blobs/SHA``. Returns the snapshot and the weights' blob."""
    import hashlib

    snapshot = root / "models--alice--tiny" / "snapshots" / ("c" * 40)
    snapshot.mkdir(parents=True)
    (root / "models--alice--tiny" / "blobs").mkdir()
    for path in model.iterdir():
        blob = root / "models--alice--tiny" / "blobs" / hashlib.sha256(path.read_bytes()).hexdigest()
        shutil.copyfile(path, blob)
        (snapshot / path.name).symlink_to(Path("..") / ".." / "blobs" / blob.name)
    return snapshot, (snapshot / "model.safetensors").resolve()


@pytest.mark.parametrize(("out", "fragment"), [
    ("snapshot/model.safetensors", "lies inside the model"),
    ("blob", "is the model's model.safetensors"),
    ("elsewhere/link-to-weights", "is the model's model.safetensors"),
])
def test_eval_never_writes_through_a_snapshots_links(inputs, tmp_path, out, fragment) -> None:
    """The weights of a cache snapshot are a link to a blob outside the snapshot folder: neither the link, the blob,
    a folder holding the blob, nor another link to it is a place for results."""
    snapshot, blob = _as_cache_snapshot(inputs / "model", tmp_path / "hub")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "link-to-weights").symlink_to(blob)
    places = {"snapshot/model.safetensors": snapshot / "model.safetensors", "blob": blob, "blobs": blob.parent,
              "elsewhere/link-to-weights": tmp_path / "elsewhere" / "link-to-weights"}
    before = contents(tmp_path)
    refused(invoke("eval", str(snapshot), "--task", str(inputs / "tasks" / "t.jsonl"), "--limit", "2", "--out",
                   str(places[out]), catch_exceptions=True), fragment)
    assert contents(tmp_path) == before and (snapshot / "model.safetensors").is_symlink()


def test_find_never_writes_into_the_folder_of_a_snapshots_blobs(inputs, tmp_path) -> None:
    snapshot, blob = _as_cache_snapshot(inputs / "model", tmp_path / "hub")
    before = contents(tmp_path)
    refused(invoke("find", str(snapshot), "--task", str(inputs / "tasks" / "t.jsonl"), *FIND, "--out",
                   str(blob.parent), catch_exceptions=True), "blobs holds the model's ")
    assert contents(tmp_path) == before


@pytest.mark.parametrize(("out", "fragment"), [
    ("link/../model/model.safetensors", "lies inside the model"),
    ("link/../model/config.json", "lies inside the model"),
    ("link/../tasks/t.jsonl", "is the task file"),
    ("model-link/../tasks/t.jsonl", "is the task file"),
])
def test_eval_follows_a_link_before_its_dotdot(inputs, tmp_path, monkeypatch, out, fragment) -> None:
    """``link/..`` is the folder above the link's target, as the kernel takes it (``os.path.abspath`` would drop
    the pair before following the link, and find nothing)."""
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "link").symlink_to(inputs / "controls")  # link/.. is inputs
    (tmp_path / "b" / "model-link").symlink_to(inputs / "model")  # model-link/.. is inputs
    monkeypatch.chdir(tmp_path / "b")
    refused_leaving_intact(inputs, fragment, "eval", str(inputs / "model"), "--task", str(inputs / "tasks" / "t.jsonl"),
                           "--limit", "2", "--out", out)


def test_a_hard_link_to_the_task_file_is_the_task_file(inputs, tmp_path) -> None:
    (tmp_path / "same.jsonl").hardlink_to(inputs / "tasks" / "t.jsonl")
    refused_leaving_intact(inputs, "is the task file", "eval", str(inputs / "model"), "--task",
                           str(inputs / "tasks" / "t.jsonl"), "--limit", "2", "--out", str(tmp_path / "same.jsonl"))


def test_export_overwrite_never_replaces_its_source_through_a_link(inputs, tmp_path, monkeypatch) -> None:
    source = tmp_path / "a" / "exp"
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "original").mkdir()  # a folder beside the export
    assert invoke("export", str(inputs / "model"), "--heads", "L0.H1", "--layout", "dense", "--out",
                  str(source)).exit_code == 0
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "link").symlink_to(Path("..") / "a" / "original")
    monkeypatch.chdir(tmp_path / "b")
    before = contents(tmp_path / "a")
    refused(invoke("export", "../a/exp", "--heads", "L1.H0", "--layout", "dense", "--overwrite", "--out",
                   "link/../exp", catch_exceptions=True), "is the source model")
    assert contents(tmp_path / "a") == before



@pytest.mark.parametrize("command", ["find", "eval", "export"])
def test_a_hub_id_is_checked_against_its_folder_in_the_cache(inputs, hub, command) -> None:
    """A Hub id is no path, but what it loads is the cache's snapshot (files linking to blobs): an output inside the
    id's cache folder is refused, before a download makes it and once it is there."""
    from helpers.hub_server import branch_sha

    files = {p.name: p.read_bytes() for p in (inputs / "model").iterdir()}
    hub.state.add_repo("alice/tiny", files)
    snapshot = Path(os.environ["HF_HOME"]) / "hub" / "models--alice--tiny" / "snapshots" / branch_sha(files)
    args = {"find": ["--task", str(inputs / "tasks" / "t.jsonl"), *FIND, "--out", str(snapshot / "run")],
            "eval": ["--task", str(inputs / "tasks" / "t.jsonl"), "--limit", "2", "--out", str(snapshot / "r.jsonl")],
            "export": ["--heads", "L0.H1", "--out", str(snapshot / "pruned")]}[command]
    fragment = "lies inside the model (" if command != "export" else "lies inside the source model ("
    refused(invoke(command, "alice/tiny", *args, catch_exceptions=True), fragment)
    assert not snapshot.parent.parent.exists()  # refused before anything was downloaded or locked
    invoke("eval", "alice/tiny", "--task", str(inputs / "tasks" / "t.jsonl"), "--limit", "2")  # now it is cached
    cached = contents(snapshot.parent.parent)
    refused(invoke(command, "alice/tiny", *args, catch_exceptions=True), fragment)
    assert contents(snapshot.parent.parent) == cached
    assert {p.name: p.read_bytes() for p in snapshot.iterdir()} == {
        name: data for name, data in files.items() if (snapshot / name).exists()}


@pytest.mark.parametrize("command", ["find", "eval"])
def test_the_folder_a_gguf_file_is_converted_into_is_an_input_once_loaded(inputs, tmp_path, monkeypatch,
                                                                          command) -> None:
    """A ``.gguf`` file is read through the folder it is converted into (in headprune's cache): that folder is
    known only once the model is loaded, and an output inside it is refused then, before anything is written."""
    from helpers.extras import needs

    from headprune.loading.models import resolve_model

    needs("gguf", "xllamacpp", extra="gguf")
    if not _reads_gguf_without_bos():
        pytest.skip("this transformers (the floor, 5.17) reads a GGUF tokenizer's eos through bos_token_id and cannot "
                    "load a file without a BOS token, as the test tokenizer's export is")
    monkeypatch.setenv("HEADPRUNE_CACHE", str(tmp_path / "cache"))
    assert invoke("export", str(inputs / "model"), "--heads", "L0.H1", "--format", "gguf", "--layout", "dense", "--out",
                  str(tmp_path / "g")).exit_code == 0
    gguf = tmp_path / "g" / "model.gguf"
    converted = resolve_model(str(gguf))
    args = {"find": [*FIND, "--out", str(converted / "run")],
            "eval": ["--limit", "2", "--out", str(converted / "results.jsonl")]}[command]
    before = contents(converted)
    done = invoke(command, str(gguf), "--task", str(inputs / "tasks" / "t.jsonl"), *args, catch_exceptions=True)
    errors = [line for line in done.stderr.splitlines() if line.startswith("headprune: error: ")]
    assert done.exit_code == 2 and errors == done.stderr.splitlines()[-1:], done.output
    assert f"lies inside the model ({converted})" in errors[0]
    assert {k: v for k, v in contents(converted).items() if not k.startswith(".run.")} == before


def _reads_gguf_without_bos() -> bool:
    """Whether the installed transformers converts a GGUF tokenizer that has no BOS token (5.17's converter reads the
    eos token through ``bos_token_id`` and fails there; later releases read ``eos_token_id``)."""
    import inspect

    from transformers.integrations import ggml

    converter = getattr(ggml, "GGUFLlamaConverter", None)  # later releases rewrote it
    return converter is None or "proto.tokens[proto.bos_token_id] if getattr(proto, \"eos_token_id\"" not in (
        inspect.getsource(converter.tokenizer))


def _user_namespaces() -> bool:
    import subprocess

    return shutil.which("unshare") is not None and subprocess.run(["unshare", "-rm", "true"],
                                                                  capture_output=True).returncode == 0


@pytest.mark.skipif(not _user_namespaces(), reason="this machine offers no user namespace to bind-mount in")
def test_a_bind_mount_of_the_model_folder_is_the_model_folder(inputs, tmp_path) -> None:
    """The same folder mounted at a second path (no link anywhere to follow): the same device and inode."""
    import subprocess
    import sys

    (tmp_path / "mounted").mkdir()
    before = contents(inputs)
    script = (f"mount --bind {inputs / 'model'} {tmp_path / 'mounted'} && {sys.executable} -m headprune eval "
              f"{inputs / 'model'} --task {inputs / 'tasks' / 't.jsonl'} --limit 2 --out "
              f"{tmp_path / 'mounted' / 'results.jsonl'}")
    done = subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 2, done.stderr
    out = tmp_path / "mounted" / "results.jsonl"
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"headprune: error: {out} lies inside the model ({inputs / 'model'})"), done.stderr
    assert contents(inputs) == before


def test_a_model_folder_holding_links_nobody_may_read_is_one_line() -> None:
    # The root folder holds /proc/1/cwd, a link whose target the kernel will not give (found by tests/test_fuzz.py):
    # the overlap check walks the links of an input folder, and one it cannot read is no place to write.
    assert_refused(invoke("eval", "/", "--task", "sentiment:n=10", "--out", "/tmp/headprune-never-written.jsonl"),
                   "lies inside the model (/)")
