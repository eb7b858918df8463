"""Fuzzed input, no traceback: generated task files, head specifications, model paths and result files are
either accepted or refused with one line on stderr and exit code 2, and nothing is written.

Classes of hostile input each have a property: JSON nested beyond the parser's depth, numbers too large to
convert, lone surrogates, FIFOs and devices where a file is expected, config.json fields of any value, journals
corrupted in any way before ``--resume``, and any value of the numbers headprune reads from the environment.
Each property runs a fixed number of generated inputs (``max_examples``); exit code 3 (an internal error)
or any other exception fails the test with the input that caused it. ``tests/test_bad_input.py`` lists named
cases of each class.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers.cli import invoke
from headprune.errors import HeadpruneError
from headprune.heads import parse_heads
from headprune.tasks import load_task
from helpers import build_tiny, save_folder

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
FEW = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

json_value = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12)
task_keys = st.sampled_from(["prompt", "choices", "answer", "target", "text", "label", "tests", "entry_point",
                             "id", "text_pair", "kind"])
task_row = st.dictionaries(task_keys, json_value, max_size=5)
task_file = st.one_of(
    st.binary(max_size=300),  # anything, invalid UTF-8 included
    st.text(alphabet=st.characters(max_codepoint=0x2FFF), max_size=300),  # control characters included
    st.lists(task_row, min_size=0, max_size=6).map(lambda rows: "\n".join(json.dumps(r) for r in rows)),
    st.lists(json_value, max_size=4).map(lambda rows: "\n".join(json.dumps(r) for r in rows)),
    st.integers(1, 3).map(lambda n: '{"prompt": "' + "x" * (200_000 * n) + '", "choices": ["a"], "answer": 0}'),
)


def _write(path: Path, content: str | bytes) -> Path:
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8", errors="surrogatepass")
    return path


def _refused_cleanly(done, out: Path | None = None) -> None:  # noqa: ANN001
    """Accepted (0/1) or refused with exit 2 and one line on stderr, the error; never an internal error or
    traceback."""
    assert done.exit_code in (0, 1, 2), (done.exit_code, done.output[-2000:])
    assert "Traceback" not in done.output
    if done.exit_code == 2:
        lines = done.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("headprune: error: "), done.stderr[-2000:]
        if out is not None:
            assert not out.exists(), "a refused command wrote nothing"


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory, tokenizer):  # noqa: ANN001, ANN201
    folder = tmp_path_factory.mktemp("fuzz-model")
    save_folder(build_tiny("llama", tokenizer, seed=1).model, tokenizer, folder)
    return folder


@FUZZ
@given(content=task_file)
def test_task_files_load_or_raise_a_headprune_error(tmp_path_factory, content) -> None:  # noqa: ANN001
    path = _write(tmp_path_factory.mktemp("t") / "task.jsonl", content)
    try:
        task = load_task(str(path))
    except HeadpruneError:
        return
    assert len(task) > 0


@pytest.mark.slow  # each generated input runs the command line
@FEW
@given(content=task_file)
def test_find_on_a_fuzzed_task_file_writes_nothing_when_refused(tmp_path_factory, tiny_dir,  # noqa: ANN001
                                                                content) -> None:
    folder = tmp_path_factory.mktemp("f")
    path = _write(folder / "task.jsonl", content)
    out = folder / "out"
    done = invoke("find", str(tiny_dir), "--task", str(path), "--discovery", "2", "--heldout", "2",
                  "--nominees", "2", "--max-heads", "2", "--finalists", "1", "--out", str(out), catch_exceptions=True)
    _refused_cleanly(done, out)


def test_a_folder_given_as_a_task_file_is_exit_2(tmp_path) -> None:
    done = invoke("eval", "smollm2-135m", "--task", str(tmp_path), catch_exceptions=True)
    assert done.exit_code == 2 and "Traceback" not in done.output


head_spec = st.one_of(
    st.text(max_size=30),
    st.lists(st.tuples(st.integers(-3, 40), st.integers(-3, 40)), min_size=1, max_size=4).map(
        lambda pairs: ",".join(f"L{layer}.H{head}" for layer, head in pairs)),
    st.from_regex(r"[LlHh.,0-9 \-]{0,20}", fullmatch=True),
)


@FUZZ
@given(spec=head_spec)
def test_head_specifications_parse_or_raise_a_headprune_error(spec) -> None:  # noqa: ANN001
    try:
        parse_heads(spec)
    except HeadpruneError:
        pass


@pytest.mark.slow  # each generated input runs the command line
@FEW
@given(spec=head_spec)
def test_eval_with_fuzzed_heads_is_accepted_or_exit_2(tiny_dir, spec) -> None:  # noqa: ANN001
    done = invoke("eval", str(tiny_dir), "--task", "sentiment", "--limit", "2", "--heads", spec, catch_exceptions=True)
    _refused_cleanly(done)


model_path = st.one_of(
    st.text(alphabet=st.characters(blacklist_characters="\x00", max_codepoint=0x2FF), min_size=1, max_size=40),
    st.sampled_from(["", ".", "/", "/dev/null", "~", "a/b/c", "org/name", "x.gguf", "-", "--help"]),
)


@pytest.mark.slow  # each generated input runs the command line
@FEW
@given(spec=model_path)
def test_fuzzed_model_names_are_exit_2(tmp_path_factory, spec) -> None:  # noqa: ANN001
    out = tmp_path_factory.mktemp("m") / "out"
    done = invoke("eval", spec, "--task", "sentiment", "--limit", "2", "--out", str(out / "r.jsonl"),
                  catch_exceptions=True)
    if spec in ("smollm2-135m",):
        return
    _refused_cleanly(done, out)


@pytest.mark.slow  # each generated input runs the command line
@FEW
@given(content=st.binary(max_size=200), name=st.sampled_from(["config.json", "model.safetensors", "x.gguf"]))
def test_fuzzed_model_files_are_exit_2(tmp_path_factory, content, name) -> None:  # noqa: ANN001
    folder = tmp_path_factory.mktemp("bad-model")
    if name != "config.json":
        (folder / "config.json").write_text(json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"],
                                                        "hidden_size": 32, "num_hidden_layers": 1,
                                                        "num_attention_heads": 4, "vocab_size": 50}))
    target = _write(folder / name, content)
    spec = str(target if name.endswith(".gguf") else folder)
    done = invoke("eval", spec, "--task", "sentiment", "--limit", "2", catch_exceptions=True)
    assert done.exit_code == 2, done.output[-2000:]
    assert "Traceback" not in done.output


result_file = st.one_of(
    st.binary(max_size=200),
    json_value.map(json.dumps),
    st.dictionaries(st.sampled_from(["schema_version", "finalists", "model", "task", "settings", "primary"]),
                    json_value, max_size=6).map(json.dumps),
)


@pytest.mark.slow  # each generated input runs the command line
@FEW
@given(content=result_file)
def test_export_from_a_fuzzed_result_file_is_exit_2_and_writes_nothing(tmp_path_factory, tiny_dir,  # noqa: ANN001
                                                                       content) -> None:
    folder = tmp_path_factory.mktemp("r")
    path = _write(folder / "result.json", content)
    out = folder / "pruned"
    done = invoke("export", str(tiny_dir), "--heads", str(path), "--out", str(out), catch_exceptions=True)
    assert done.exit_code == 2, done.output[-2000:]
    _refused_cleanly(done, out)


# ------------------------------------------------------------------ hostile classes


@contextmanager
def _deadline(seconds: int = 120):  # noqa: ANN202
    """Fail, instead of hanging, when a command blocks (a FIFO read, unbounded work)."""
    def stuck(signum: int, frame: object) -> None:
        raise TimeoutError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, stuck)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _one_line(done, out: Path | None = None, *, warnings: bool = False) -> None:  # noqa: ANN001
    """Exit 2 with exactly one line on stderr, the error, and nothing written (``warnings``: after any number of
    warnings about something else, such as the class headprune chose for a config that names none)."""
    assert done.exit_code == 2, (done.exit_code, done.output[-2000:])
    lines = [line for line in done.stderr.splitlines() if not (warnings and line.startswith("headprune: warning: "))]
    assert len(lines) == 1 and lines[0].startswith("headprune: error: "), done.stderr[-2000:]
    if out is not None:
        assert not out.exists()


nested_line = st.tuples(st.integers(1, 60_000), st.sampled_from(["[", '{"a": ', '{"prompt": ['])).map(
    lambda spec: spec[1] * spec[0] + ("]" if spec[1] == "[" else "}" if spec[1] == '{"a": ' else "]}") * spec[0])
huge_number = st.one_of(st.integers(4_301, 20_000).map(lambda n: "9" * n),
                        st.integers(4_301, 20_000).map(lambda n: "-" + "1" * n + ".5"),
                        st.sampled_from(["1e999", "-1e999", "1e-999", "123456789" * 500]))
number_field = st.sampled_from(["answer", "label", "prompt", "target"])  # an id may be any number
surrogate = st.integers(0xD800, 0xDFFF).map(lambda c: f"\\u{c:04x}")
surrogate_field = st.sampled_from(["prompt", "choice", "target", "key"])


def _with_number(field: str, number: str) -> str:
    row = {"prompt": '"a"', "choices": '[" x", " y"]', "answer": "0"}
    if field in ("label", "target"):
        row = {"text": '"a"', "label": "0"} if field == "label" else {"prompt": '"a"', "target": '"1"'}
    row[field] = number
    return "{" + ", ".join(f'"{key}": {value}' for key, value in row.items()) + "}"


def _with_surrogate(field: str, escape: str) -> str:
    prompt, choice, target, key = (f'"a{escape}b"' if field == name else default for name, default in (
        ("prompt", '"a"'), ("choice", '" x"'), ("target", '"1"'), ("key", '"id"')))
    if field == "target":
        return f'{{"prompt": {prompt}, "target": {target}}}'
    return f'{{"prompt": {prompt}, "choices": [{choice}, " y"], "answer": 0, {key}: "z"}}'


hostile_line = st.one_of(nested_line, st.tuples(number_field, huge_number).map(lambda t: _with_number(*t)),
                         st.tuples(surrogate_field, surrogate).map(lambda t: _with_surrogate(*t)))


@FUZZ
@given(line=hostile_line, good_rows=st.integers(0, 3))
def test_hostile_task_lines_raise_a_task_error(tmp_path_factory, line, good_rows) -> None:  # noqa: ANN001
    """Nested JSON, huge numbers and lone surrogates are refused by line, before any model sees them."""
    from headprune.errors import TaskError

    good = '{"prompt": "a", "choices": [" x", " y"], "answer": 0}\n' * good_rows
    path = _write(tmp_path_factory.mktemp("h") / "task.jsonl", good + line + "\n")
    with pytest.raises(TaskError, match=f"task.jsonl:{good_rows + 1}: "):
        load_task(str(path))


@pytest.mark.slow  # each generated input runs the command line
@FEW
@given(line=hostile_line)
def test_hostile_task_lines_are_one_line_and_exit_2(tmp_path_factory, tiny_dir, line) -> None:  # noqa: ANN001
    path = _write(tmp_path_factory.mktemp("h") / "task.jsonl", line + "\n")
    _one_line(invoke("eval", str(tiny_dir), "--task", str(path), catch_exceptions=True))


def _special(kind: str, folder: Path) -> str:
    """A path where a file is expected that is no regular file."""
    if kind == "fifo":
        os.mkfifo(folder / "special.jsonl")
    elif kind == "socket":
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(folder / "special.jsonl"))
        server.close()
    elif kind == "folder":
        (folder / "special.jsonl").mkdir()
    else:
        return kind
    return str(folder / "special.jsonl")


@FEW
@given(kind=st.sampled_from(["fifo", "socket", "folder", "/dev/zero", "/dev/urandom", "/dev/null"]),
       where=st.sampled_from(["eval --task", "find --task", "find --heldout-task", "find --control",
                              "export --verify-task", "export --heads"]))
def test_fifos_and_devices_are_refused_without_blocking(tmp_path_factory, tiny_dir, kind,  # noqa: ANN001
                                                        where) -> None:
    folder = tmp_path_factory.mktemp("s")
    path = _special(kind, folder)
    if where == "export --heads" and kind not in ("folder",):  # a result path: named *.json or a folder
        os.symlink(path, folder / "result.json")
        path = str(folder / "result.json")
    command, option = where.split()
    args = {"eval": ["--task", "sentiment"] if option != "--task" else [],
            "find": ["--task", str(folder / "ok.jsonl")] if option != "--task" else [],
            "export": ["--heads", "L0.H0"] if option != "--heads" else []}[command]
    (folder / "ok.jsonl").write_text("".join(json.dumps({"prompt": f"p {i}", "choices": [" a", " b"], "answer": 0})
                                             + "\n" for i in range(40)))
    out = folder / "out"
    extra = ["--out", str(out)] if command != "eval" else []
    with _deadline():
        done = invoke(command, str(tiny_dir), *args, option, path, *extra, catch_exceptions=True)
    _one_line(done, out)
    assert "not a regular file" in done.stderr or (kind == "folder" and where == "export --heads")


long_name = st.integers(230, 6000).map(lambda n: "x" * n)  # past what a name may have, with headprune's room
long_path = st.one_of(long_name, st.lists(st.text("abc", min_size=100, max_size=200), min_size=42, max_size=60).map(
    "/".join))  # each name short, the path past PATH_MAX (4,096 bytes)


@FUZZ
@given(path=long_path, where=st.sampled_from(["eval --task", "eval MODEL", "eval --out", "find --out", "find --control",
                                              "export --out", "export --verify-task", "push DIR"]))
def test_a_path_too_long_is_one_line_and_exit_2(tmp_path_factory, tiny_dir, path, where) -> None:  # noqa: ANN001
    """A path the system cannot take, wherever it is given: one line, exit 2 (an OSError, exit 3, before)."""
    folder = tmp_path_factory.mktemp("long")
    path = str(folder / path)
    model, task, out = str(tiny_dir), "sentiment:n=4", str(folder / "out")
    args = {"eval --task": ["eval", model, "--task", path], "eval MODEL": ["eval", path, "--task", task],
            "eval --out": ["eval", model, "--task", task, "--out", path],
            "find --out": ["find", model, "--task", task, "--out", path],
            "find --control": ["find", model, "--task", task, "--control", path, "--out", out],
            "export --out": ["export", model, "--heads", "L0.H0", "--out", path],
            "export --verify-task": ["export", model, "--heads", "L0.H0", "--verify-task", path, "--out", out],
            "push DIR": ["push", path, "--repo-id", "a/b", "--dry-run"]}[where]
    done = invoke(*args, catch_exceptions=True)
    assert done.exit_code == 2, done.output[-2000:]
    _refused_cleanly(done, Path(out))
    assert len(done.stderr) < 600, "a long path is shown by its start and end"


@FUZZ
@given(name=st.sampled_from(["n", "digits", "shots", "seed"]), values=st.lists(st.integers(0, 9), min_size=2,
                                                                               max_size=4))
def test_a_task_option_given_twice_is_refused(name, values) -> None:  # noqa: ANN001
    spec = "arithmetic:" + ",".join(f"{name}={value}" for value in values)
    with pytest.raises(HeadpruneError, match=f"task option {name} is given twice"):
        load_task(spec)


config_value = st.one_of(st.integers(-3, 600), st.none(), st.booleans(), st.floats(allow_nan=True),
                         st.text(max_size=5), st.lists(st.integers(0, 4), max_size=3))
config_field = st.sampled_from(["hidden_size", "num_attention_heads", "num_key_value_heads", "num_hidden_layers",
                                "intermediate_size", "head_dim", "vocab_size", "max_position_embeddings",
                                "model_type", "architectures", "rope_theta", "rms_norm_eps"])


@pytest.mark.slow  # each generated input loads a model through the command line
@FEW
@given(edits=st.dictionaries(config_field, config_value, min_size=1, max_size=3))
def test_fuzzed_configs_load_or_are_one_line_and_exit_2(tmp_path_factory, tiny_dir, edits) -> None:  # noqa: ANN001
    folder = tmp_path_factory.mktemp("c") / "model"
    shutil.copytree(tiny_dir, folder, copy_function=os.link)
    config = json.loads((tiny_dir / "config.json").read_text())
    (folder / "config.json").unlink()
    (folder / "config.json").write_text(json.dumps({**config, **edits}))
    task = folder.parent / "task.jsonl"
    task.write_text("".join(json.dumps({"prompt": f"the film is {i}", "choices": [" a", " b"], "answer": i % 2})
                            + "\n" for i in range(4)))
    with _deadline():
        done = invoke("eval", str(folder), "--task", str(task), catch_exceptions=True)
    if done.exit_code != 0:
        _one_line(done, warnings=True)


headprune_record = st.one_of(
    json_value,
    st.fixed_dictionaries({"base_class": st.sampled_from(["pipeline", "AutoModel", "LlamaForCausalLM", "GPT2Model",
                                                          "PreTrainedModel", "__class__", "os", ""]) | st.text(
        max_size=12)}, optional={"layers": json_value, "head_dim": json_value, "paths": json_value}),
)


@pytest.mark.slow  # each generated input loads a model through the command line
@FEW
@given(record=headprune_record)
def test_fuzzed_headprune_records_are_one_line_and_exit_2(tmp_path_factory, tiny_dir, record) -> None:  # noqa: ANN001
    """config.json's ``headprune`` key of any value: refused in one line (a TypeError, exit 3, before; a base class
    of ``pipeline`` was subclassed as given)."""
    folder = tmp_path_factory.mktemp("h") / "model"
    shutil.copytree(tiny_dir, folder, copy_function=os.link)
    config = json.loads((tiny_dir / "config.json").read_text())
    (folder / "config.json").unlink()
    (folder / "config.json").write_text(json.dumps({**config, "headprune": record}))
    with _deadline():
        done = invoke("eval", str(folder), "--task", "sentiment:n=4", catch_exceptions=True)
    if record is not None:
        assert done.exit_code == 2, done.output[-2000:]
        _refused_cleanly(done)


@pytest.fixture(scope="module")
def journal_run(tmp_path_factory, tiny_dir):  # noqa: ANN001, ANN201
    """A finished find run on the tiny model (its journal is what the corruptions start from)."""
    folder = tmp_path_factory.mktemp("journal")
    rows = "".join(json.dumps({"prompt": f"the film is {i}", "choices": [" a", " b"], "answer": i % 2}) + "\n"
                   for i in range(40))
    (folder / "task.jsonl").write_text(rows)
    done = invoke("find", str(tiny_dir), "--task", str(folder / "task.jsonl"), *JOURNAL_FIND, "--out",
                  str(folder / "run"))
    assert done.exit_code in (0, 1), done.output
    return folder


JOURNAL_FIND = ["--discovery", "20", "--heldout", "20", "--nominees", "2", "--max-heads", "2", "--finalists", "1"]
corruption = st.one_of(
    st.tuples(st.just("truncate"), st.floats(0, 1)),
    st.tuples(st.just("flip"), st.floats(0, 1), st.integers(1, 255)),
    st.tuples(st.just("drop line"), st.integers(0, 50)),
    st.tuples(st.just("replace line"), st.integers(0, 50), json_value.map(json.dumps)),
    st.tuples(st.just("insert line"), st.integers(0, 50), st.sampled_from(["[" * 50_000, "{}", '{"key": 1}', "\x00"])),
)


def _corrupt(data: bytes, how: tuple) -> bytes:
    lines = data.split(b"\n")
    if how[0] == "truncate":
        return data[: int(how[1] * len(data))]
    if how[0] == "flip":
        at = min(int(how[1] * len(data)), len(data) - 1)
        return data[:at] + bytes([data[at] ^ how[2]]) + data[at + 1:]
    at = how[1] % len(lines)
    if how[0] == "drop line":
        return b"\n".join(lines[:at] + lines[at + 1:])
    new = how[2].encode("utf-8", "surrogatepass")
    return b"\n".join(lines[:at] + [new] + lines[at + (how[0] == "replace line"):])


@pytest.mark.slow  # each generated input resumes a find run through the command line
@FEW
@given(how=corruption)
def test_corrupt_journals_resume_or_are_one_line_and_exit_2(tmp_path_factory, tiny_dir, journal_run,  # noqa: ANN001
                                                            how) -> None:
    folder = tmp_path_factory.mktemp("r") / "run"
    shutil.copytree(journal_run / "run", folder, ignore=shutil.ignore_patterns(".headprune.lock", "result.json"))
    journal = folder / "journal.jsonl"
    journal.write_bytes(_corrupt(journal.read_bytes(), how))
    with _deadline(300):
        done = invoke("find", str(tiny_dir), "--task", str(journal_run / "task.jsonl"), *JOURNAL_FIND, "--out",
                      str(folder), "--resume", catch_exceptions=True)
    if done.exit_code not in (0, 1):
        _one_line(done, folder / "result.json")
        assert "determinism" not in done.stderr, "a corrupt journal is not a determinism failure"


env_value = st.one_of(st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
                              max_size=12),
                      st.integers(-10**30, 10**30).map(str), st.floats().map(str),
                      st.sampled_from(["", " ", "0", "1", "-1", "1e3", "0x10", "inf", "nan", "2048"]))
env_name = st.sampled_from(["HEADPRUNE_LAYER_CACHE_MB", "HEADPRUNE_DIST_TIMEOUT_MIN", "HEADPRUNE_MAX_TASK_MB",
                            "HEADPRUNE_MAX_LINE_CHARS", "HEADPRUNE_MAX_EXAMPLES", "HEADPRUNE_MAX_NEW_TOKENS",
                            "HEADPRUNE_MAX_SETS", "HEADPRUNE_CPU_LINEAR", "HEADPRUNE_SANDBOX_MODE"])


@FUZZ
@given(name=env_name, value=env_value)
def test_numbers_in_the_environment_are_read_or_one_line_and_exit_2(monkeypatch, name, value) -> None:  # noqa: ANN001
    """Every number (and word) headprune reads from the environment is checked when a command starts."""
    with monkeypatch.context() as env:
        env.setenv(name, value)
        done = invoke("tasks", catch_exceptions=True)
    if done.exit_code != 0:
        _one_line(done)
        assert name in done.stderr

