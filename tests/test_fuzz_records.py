"""Fuzzed records and containers, no traceback (``tests/test_fuzz.py``'s rule, for the inputs of its fourth pass):
a find result edited anywhere never exports under find's figures, a GGUF input's head counts of any value load or
are refused in one line, and the credential scan read block by block finds what a scan of the whole file finds."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from headprune.core import credentials
from headprune.core.hashing import json_digest
from headprune.search.find_result import UNDIGESTED
from headprune.tasks import write_jsonl_task
from helpers import build_tiny, random_choice_task, save_folder
from helpers.cli import invoke

FEW = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
MANY = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
FIND = ["--discovery", "20", "--heldout", "20", "--nominees", "2", "--max-heads", "2", "--finalists", "2"]
SECRET = b"hf_" + b"Z" * 34

leaf = st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(allow_nan=False) | st.text(max_size=12)


@pytest.fixture(scope="module")
def files(tmp_path_factory, tokenizer):  # noqa: ANN001, ANN201
    """A tiny Llama, a task, a find run on them and a dense GGUF export of the model."""
    folder = tmp_path_factory.mktemp("fuzz-records")
    save_folder(build_tiny("llama", tokenizer, seed=1).model, tokenizer, folder / "model")
    write_jsonl_task(random_choice_task(40, seed=1), folder / "task.jsonl")
    found = invoke("find", str(folder / "model"), "--task", str(folder / "task.jsonl"), *FIND, "--out",
                   str(folder / "run"))
    assert found.exit_code in (0, 1), found.output
    done = invoke("export", str(folder / "model"), "--heads", "L0.H0", "--layout", "dense", "--format", "gguf",
                  "--out", str(folder / "gguf"))
    assert done.exit_code == 0, done.output
    return folder


def _paths(data: object, where: tuple = ()) -> list[tuple]:
    """Every place in parsed JSON (a key of an object, an index of a list), outermost first."""
    found = [where] if where else []
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
    for key, value in items:
        found += _paths(value, (*where, key))
    return found


def _edit(data: dict, place: tuple, value: object, delete: bool) -> None:
    parent = data
    for key in place[:-1]:
        parent = parent[key]
    if delete and isinstance(parent, dict):
        del parent[place[-1]]
    else:
        parent[place[-1]] = value


@FEW
@given(pick=st.integers(0, 10**9), value=leaf, delete=st.booleans())
def test_an_edit_anywhere_in_a_result_never_exports_under_finds_figures(files, tmp_path_factory, pick, value,
                                                                        delete) -> None:
    data = json.loads((files / "run" / "result.json").read_text())
    places = _paths(data)
    place = places[pick % len(places)]
    _edit(data, place, value, delete)
    folder = tmp_path_factory.mktemp("r")
    (folder / "run").mkdir()
    (folder / "run" / "result.json").write_text(json.dumps(data, indent=2))
    out = folder / "out"
    done = invoke("export", str(files / "model"), "--heads", str(folder / "run"), "--allow-unconfirmed", "--out",
                  str(out), catch_exceptions=True)
    assert done.exit_code in (0, 2), (place, done.exit_code, done.output[-2000:])
    assert "Traceback" not in done.output
    try:
        unchanged = place[0] == "timings" or data.get("digest") == json_digest(data, leave_out=UNDIGESTED)
    except ValueError:  # an infinity or NaN written in, which JSON's digest cannot take: not what find wrote
        unchanged = False
    if done.exit_code == 0:
        assert unchanged, f"an edit at {place} exported"
        return
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("headprune: error: "), done.stderr[-2000:]
    assert not out.exists()
    if not unchanged:
        assert "was edited after find wrote it" in lines[0] or "not a headprune result" in lines[0], lines[0]


HEAD_KEYS = ("llama.attention.head_count", "llama.attention.head_count_kv", "llama.embedding_length",
             "llama.attention.key_length")


@pytest.mark.slow  # each generated file that passes the checks is converted and run
@FEW
@given(key=st.sampled_from(HEAD_KEYS), value=st.one_of(st.integers(0, 9), st.integers(0, 2**32 - 1)))
def test_a_gguf_inputs_head_counts_of_any_value_load_or_are_one_line(files, tmp_path_factory, monkeypatch, key,
                                                                     value) -> None:
    import gguf

    folder = tmp_path_factory.mktemp("g")
    shutil.copy(files / "gguf" / "model.gguf", folder / "m.gguf")
    field = gguf.GGUFReader(folder / "m.gguf", "r+").fields[key]
    field.parts[field.data[0]][0] = value
    with monkeypatch.context() as env:
        env.setenv("HEADPRUNE_CACHE", str(folder / "cache"))  # conversions of this file only
        done = invoke("eval", str(folder / "m.gguf"), "--task", str(files / "task.jsonl"), "--limit", "2",
                      catch_exceptions=True)
    assert done.exit_code in (0, 2), (key, value, done.exit_code, done.output[-2000:])
    assert "Traceback" not in done.output and "internal error" not in done.output
    if done.exit_code == 2:
        errors = [line for line in done.stderr.splitlines() if line.startswith("headprune: error: ")]
        assert errors == done.stderr.splitlines()[-1:], done.stderr[-2000:]


@MANY
@given(body=st.binary(max_size=400), tokens=st.lists(st.integers(0, 400), max_size=3), block=st.integers(1, 80),
       tail=st.sampled_from([b"", b"Z", b"_", b"hf_"]))
def test_the_scan_in_blocks_finds_what_a_scan_of_the_whole_file_finds(tmp_path_factory, monkeypatch, body, tokens,
                                                                      block, tail) -> None:
    data = bytearray(body)
    for at in tokens:
        data[at:at] = SECRET + tail
    path = tmp_path_factory.mktemp("b") / "w.bin"
    path.write_bytes(bytes(data))
    with monkeypatch.context() as patch:
        patch.setattr(credentials, "BLOCK_BYTES", block)
        found = list(credentials.token_offsets(path))
    pattern = re.compile(rb"hf_[A-Za-z0-9]{20,}")
    starts = [i for i in range(len(data)) if pattern.match(data, i)]  # every place a token starts
    whole = [match.start() for match in pattern.finditer(bytes(data))]
    assert found[:1] == whole[:1] and set(found) <= set(starts), (found, starts)  # the first, and only tokens
    if whole == starts:  # no token starts inside another (where the two scans may split a run of them otherwise)
        assert found == whole, (found, whole)
