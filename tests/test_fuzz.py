"""Fuzzed input, no traceback: generated task files, head specifications, model paths and result files are
either accepted or refused with one line on stderr and exit code 2, and nothing is written.

Each property runs a fixed number of generated inputs (``max_examples``); exit code 3 (an internal error)
or any other exception fails the test with the input that caused it.
"""

from __future__ import annotations

import json
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
    """Accepted (0/1) or refused with exit 2 and one headprune line; never an internal error or traceback."""
    assert done.exit_code in (0, 1, 2), (done.exit_code, done.output[-2000:])
    assert "Traceback" not in done.output
    if done.exit_code == 2:
        ours = [line for line in done.output.splitlines() if line.startswith(("headprune: error", "Error:"))]
        assert len(ours) == 1, done.output
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
