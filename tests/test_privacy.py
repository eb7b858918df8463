"""Privacy and permissions, through the real command line: what an export holds (and push uploads) names the model
and task without a local path; no message shows the credentials of a URL; outputs get the user's permissions; any
valid JSONL is read; a result's task paths resolve from anywhere; and bad export and eval arguments are refused
before any work."""

from __future__ import annotations

import json
import os

import pytest

from headprune.exporter import read_record
from headprune.tasks import load_task, write_jsonl_task
from helpers import build_tiny, random_choice_task, save_folder
from helpers.cli import invoke
from helpers.hub_server import VALID_TOKEN, HubServer

FIND = ["--discovery", "24", "--heldout", "16", "--nominees", "2", "--max-heads", "2", "--finalists", "1",
        "--batch-size", "8"]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, tokenizer):  # noqa: ANN001, ANN201
    """A model folder and task file under a private-looking path; a find run and an export of its set made with
    both given by absolute paths, under umask 027 (not the usual 022, so that neither a hand-written 0644 nor
    tempfile's 0600/0700 would pass)."""
    folder = tmp_path_factory.mktemp("home") / "alice" / "secret-project"
    save_folder(build_tiny("llama", tokenizer, seed=4).model, tokenizer, folder / "model")
    write_jsonl_task(random_choice_task(40, seed=3), folder / "t.jsonl")
    previous = os.umask(0o027)
    try:
        found = invoke("find", str(folder / "model"), "--task", str(folder / "t.jsonl"), *FIND, "--out",
                       str(folder / "run"))
        exported = invoke("export", str(folder / "model"), "--heads", str(folder / "run"), "--allow-unconfirmed",
                          "--out", str(folder / "pruned"))
    finally:
        os.umask(previous)
    assert found.exit_code in (0, 1) and exported.exit_code == 0, found.output + exported.output
    return folder


def test_an_export_and_its_upload_name_the_model_and_task_without_a_local_path(inputs, tmp_path, monkeypatch) -> None:
    out = inputs / "pruned"
    record = read_record(out)
    assert record.source.name == "model" and record.origin.task == "t.jsonl"
    assert record.verification.task.task.startswith("t.jsonl")
    private = [str(inputs), "secret-project"]
    for path in out.rglob("*"):
        text = path.read_bytes().decode("utf-8", "replace")
        assert not [p for p in private if p in text], f"{path.name} names a local path"
    with HubServer() as hub:  # what push sends: every byte of every file, and the card's metadata
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
        pushed = invoke("push", str(out), "--repo-id", "alice/pruned", "--token", VALID_TOKEN)
        assert pushed.exit_code == 0, pushed.output
        (commit,) = hub.state.commits
        sent = b"".join(commit["files"].values()).decode("utf-8", "replace") + json.dumps(hub.state.card_metadata)
    assert "README.md" in commit["files"] and not [p for p in private if p in sent]


@pytest.mark.parametrize(("spec", "shown"), [
    ("/home/alice/models/llama-3", "llama-3"), ("./model", "model"), ("~/data/t.jsonl", "t.jsonl"),
    ("HuggingFaceTB/SmolLM2-135M", "HuggingFaceTB/SmolLM2-135M"), ("arithmetic:digits=3", "arithmetic:digits=3"),
    ("lm-eval:/home/alice/tasks/a.yaml,hellaswag:num_fewshot=2", "lm-eval:a.yaml,hellaswag:num_fewshot=2"),
])
def test_cards_name_models_and_tasks_by_hub_id_or_file_name(spec, shown) -> None:
    from headprune.exporter.export_record import public_name

    assert public_name(spec) == shown


def test_no_message_shows_the_credentials_of_a_url(inputs, tmp_path, monkeypatch) -> None:
    with HubServer() as hub:
        hub.state.drop.add("/api/repos/create")  # the connection is cut: "cannot reach the Hub at ..."
        host = hub.url.split("://", 1)[1]
        monkeypatch.setenv("HF_ENDPOINT", f"http://alice:s3cret-pass@{host}")
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
        result = invoke("push", str(inputs / "pruned"), "--repo-id", "alice/m", "--token", VALID_TOKEN)
    assert result.exit_code == 2 and "cannot reach the Hub at http://***@" in result.output, result.output
    assert "s3cret" not in result.output and "alice:" not in result.output


def test_outputs_get_the_permissions_the_umask_gives(inputs) -> None:
    """Made under umask 027: folders 0750, files 0640, the record, the journal and the weights included."""
    for folder in (inputs / "pruned", inputs / "run"):
        assert folder.stat().st_mode & 0o777 == 0o750, folder
        for path in folder.rglob("*"):
            expected = 0o750 if path.is_dir() else 0o640
            assert path.stat().st_mode & 0o777 == expected, f"{path.name}: {oct(path.stat().st_mode & 0o777)}"
    assert {"model.safetensors", "headprune_export.json"} <= {p.name for p in (inputs / "pruned").iterdir()}
    assert {"result.json", "journal.jsonl"} <= {p.name for p in (inputs / "run").iterdir()}


def test_any_valid_jsonl_is_read(tmp_path) -> None:
    """Characters Python's splitlines breaks lines at but JSON allows raw inside a string, and CRLF line ends."""
    strange = ["line\u2028separator", "paragraph\u2029separator", "next\x85line", "del\x7f and nbsp\xa0"]
    rows = [json.dumps({"id": f"r{i}", "prompt": text, "choices": [" a", " b"], "answer": i % 2}, ensure_ascii=False)
            for i, text in enumerate(strange)]
    path = tmp_path / "strange.jsonl"
    path.write_bytes(("\r\n".join(rows) + "\r\n").encode("utf-8"))
    task = load_task(str(path))
    assert [example.prompt for example in task.examples] == strange


def test_a_results_task_paths_resolve_from_any_working_folder(inputs, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(inputs)
    done = invoke("find", "model", "--task", "t.jsonl", *FIND, "--out", "relative-run")
    assert done.exit_code in (0, 1), done.output
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    exported = invoke("export", str(inputs / "model"), "--heads", str(inputs / "relative-run" / "result.json"),
                      "--allow-unconfirmed", "--out", "pruned", "--json")
    assert exported.exit_code == 0, exported.output
    task = json.loads(exported.stdout)["verification"]["task"]
    assert task["n"] == 16  # find's held-out set, rebuilt from the task file it named relative to another folder


def test_empty_heads_are_an_error_not_the_current_folders_result(inputs, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(inputs / "run")  # a result.json right here, which "--heads ''" once read
    result = invoke("export", str(inputs / "model"), "--heads", "", "--out", str(tmp_path / "pruned"))
    assert result.exit_code == 2 and "no heads given" in result.output
    assert not (tmp_path / "pruned").exists()


@pytest.mark.parametrize("bad", ["under-a-file", "the-task"])
def test_a_bad_eval_out_is_refused_before_the_evaluation(inputs, tmp_path, monkeypatch, bad) -> None:
    from headprune.evaluation import Evaluator

    def never(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("the evaluation ran")

    monkeypatch.setattr(Evaluator, "run", never)
    (tmp_path / "a-file").write_text("")
    out = {"under-a-file": tmp_path / "a-file" / "results.jsonl", "the-task": inputs / "t.jsonl"}[bad]
    before = (inputs / "t.jsonl").read_bytes()
    result = invoke("eval", str(inputs / "model"), "--task", str(inputs / "t.jsonl"), "--out", str(out))
    assert result.exit_code == 2, result.output
    assert result.output.count("\n") == 1 and "the evaluation ran" not in result.output
    assert (inputs / "t.jsonl").read_bytes() == before


# Credentials a source's files hold (older transformers wrote the download token into tokenizer_config.json).
SECRETS = {"token": "hf_" + "A" * 34, "use_auth_token": "hf_" + "B" * 34, "note": "hf_" + "C" * 34}


@pytest.fixture
def leaky_model(inputs, tmp_path):  # noqa: ANN001, ANN201
    """A copy of the model whose tokenizer_config.json holds ``token`` and ``use_auth_token``, and whose config.json
    holds ``token`` and a token-looking value under another key."""
    import shutil

    folder = tmp_path / "leaky"
    shutil.copytree(inputs / "model", folder)
    tokens = {"token": SECRETS["token"], "use_auth_token": SECRETS["use_auth_token"]}
    for name, extra in (("tokenizer_config.json", tokens),
                        ("config.json", {"token": SECRETS["token"], "note": SECRETS["note"]})):
        data = json.loads((folder / name).read_text())
        (folder / name).write_text(json.dumps({**data, **extra}))
    return folder


def _holds_a_secret(folder) -> list[str]:  # noqa: ANN001
    return [str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()
            and any(secret.encode() in p.read_bytes() for secret in SECRETS.values())]


@pytest.mark.parametrize("layout", ["sliced", "dense"])
def test_an_export_never_carries_the_sources_credentials(leaky_model, tmp_path, layout) -> None:
    done = invoke("export", str(leaky_model), "--heads", "L0.H1", "--layout", layout, "--out", str(tmp_path / "out"))
    assert done.exit_code == 0, done.output
    said = [line for line in done.stderr.splitlines() if "credentials" in line]
    assert len(said) == 1 and "tokenizer_config.json: token, use_auth_token" in said[0], done.stderr
    assert "config.json: token, note" in said[0] and not [s for s in SECRETS.values() if s in done.output]
    assert _holds_a_secret(tmp_path / "out") == []
    from transformers import AutoTokenizer

    original, exported = (AutoTokenizer.from_pretrained(f) for f in (str(leaky_model), str(tmp_path / "out")))
    assert len(exported) == len(original) - 1  # the source's token, an added token when loaded as it is, is gone
    assert exported("the film is a delight").input_ids == original("the film is a delight").input_ids


def test_push_refuses_a_folder_that_holds_a_credential(inputs, tmp_path, monkeypatch) -> None:
    """An export written before credentials were stripped (its record lists the file as it is): push names the file
    and the key in one line, exit 2, shows no secret and sends nothing."""
    import shutil

    from headprune.exporter.export_record import file_hashes

    out = tmp_path / "old-export"
    shutil.copytree(inputs / "pruned", out)
    config = json.loads((out / "tokenizer_config.json").read_text())
    (out / "tokenizer_config.json").write_text(json.dumps({**config, "use_auth_token": SECRETS["use_auth_token"]}))
    record = read_record(out)
    from dataclasses import replace

    replace(record, files=file_hashes(out)).save(out)
    with HubServer() as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
        for extra in (["--dry-run"], ["--token", VALID_TOKEN]):
            pushed = invoke("push", str(out), "--repo-id", "alice/pruned", *extra)
            assert pushed.exit_code == 2 and pushed.output.count("\n") == 1, pushed.output
            assert "tokenizer_config.json holds a credential (use_auth_token)" in pushed.output
            assert SECRETS["use_auth_token"] not in pushed.output
        assert hub.state.commits == []


def test_a_credential_left_in_the_sources_vocabulary_stops_the_export(inputs, tmp_path) -> None:
    """A token that an earlier save made into an added token of tokenizer.json cannot be stripped from the config:
    the export refuses it, exit 2, and writes nothing."""
    import shutil

    from transformers import AutoTokenizer

    folder = tmp_path / "vocab"
    shutil.copytree(inputs / "model", folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.add_tokens([SECRETS["note"]])
    tokenizer.save_pretrained(folder)
    done = invoke("export", str(folder), "--heads", "L0.H1", "--out", str(tmp_path / "out"), catch_exceptions=True)
    assert done.exit_code == 2 and done.stderr.splitlines()[-1].startswith("headprune: error: "), done.output
    assert "tokenizer.json would carry a credential (added_tokens[" in done.stderr
    assert SECRETS["note"] not in done.output and not (tmp_path / "out").exists()
