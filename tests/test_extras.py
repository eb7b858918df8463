"""Optional parts stay optional: with onnx, onnxruntime, onnxscript, gguf, lm-eval, compressed-tensors and every
llama.cpp runtime made unimportable, ``import headprune``, ``find`` and ``export --format safetensors`` work, and each feature that needs
a missing package is one line naming the extra to install, exit 2.

The CLI runs in a fresh interpreter whose ``sys.modules`` holds ``None`` for those packages (what Python does
for a module it must not import: ``import`` raises, ``importlib.util.find_spec`` answers "absent"), so what
the main environment has installed does not matter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from headprune.tasks.jsonl import write_jsonl_task
from helpers import build_tiny, random_choice_task, save_folder

BLOCKED = ("onnx", "onnxruntime", "onnxscript", "onnxruntime_genai", "gguf", "lm_eval", "llama_cpp", "xllamacpp",
           "compressed_tensors")

# Runs each command in one interpreter (one torch import for all), prints their exit codes and output as JSON.
RUNNER = """
import json, sys
for name in {blocked!r}:
    sys.modules[name] = None
import headprune
from click.testing import CliRunner
from headprune.cli.main import cli
runs = []
for args in json.loads(sys.argv[1]):
    done = CliRunner().invoke(cli, args)
    runs.append({{"code": done.exit_code, "output": done.output}})
loaded = sorted(n for n in {blocked!r} if sys.modules.get(n) is not None)
print(json.dumps({{"runs": runs, "loaded": loaded}}))
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tokenizer):  # noqa: ANN001, ANN201
    folder = tmp_path_factory.mktemp("extras")
    save_folder(build_tiny("llama", tokenizer, seed=3).model, tokenizer, folder / "model")
    write_jsonl_task(random_choice_task(60, seed=5), folder / "task.jsonl")
    (folder / "model.gguf").write_bytes(b"GGUF not really")
    save_folder(build_tiny("llama", tokenizer, seed=3).model, tokenizer, folder / "compressed")
    config = json.loads((folder / "compressed" / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "compressed-tensors", "format": "float-quantized"}
    (folder / "compressed" / "config.json").write_text(json.dumps(config))
    model, task = str(folder / "model"), str(folder / "task.jsonl")
    export = ["export", model, "--heads", "L0.H1", "--verify-task", task, "--verify-limit", "8"]
    commands = {
        "find": ["find", model, "--task", task, "--discovery", "20", "--heldout", "20", "--nominees", "2",
                 "--max-heads", "1", "--finalists", "1", "--device", "cpu", "--out", str(folder / "run")],
        "safetensors": [*export, "--out", str(folder / "pruned")],
        "onnx": [*export, "--format", "onnx", "--out", str(folder / "onnx")],
        "gguf": [*export, "--format", "gguf", "--out", str(folder / "gguf")],
        "lm-eval": ["eval", model, "--task", "lm-eval:hellaswag", "--limit", "4"],
        "gguf-model": ["eval", str(folder / "model.gguf"), "--task", task, "--limit", "4"],
        "compressed-tensors": ["eval", str(folder / "compressed"), "--task", task, "--limit", "4"],
    }
    script = RUNNER.format(blocked=BLOCKED)
    done = subprocess.run([sys.executable, "-c", script, json.dumps(list(commands.values()))], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer["loaded"] == []  # none of them came in by another way
    return folder, dict(zip(commands, answer["runs"]))


def test_find_and_a_safetensors_export_work_without_any_extra(runs) -> None:  # noqa: ANN001
    folder, done = runs
    assert done["find"]["code"] in (0, 1), done["find"]["output"]  # confirmed or not: both are results
    assert json.loads((folder / "run" / "result.json").read_text())["finalists"]
    assert done["safetensors"]["code"] == 0, done["safetensors"]["output"]
    assert (folder / "pruned" / "model.safetensors").is_file()


@pytest.mark.parametrize("feature, extra", [("onnx", "onnx"), ("gguf", "gguf"), ("lm-eval", "lm-eval"),
                                            ("gguf-model", "gguf"), ("compressed-tensors", "compressed-tensors")])
def test_a_feature_whose_extra_is_missing_is_one_line_naming_it(runs, feature, extra) -> None:  # noqa: ANN001
    folder, done = runs
    lines = [line for line in done[feature]["output"].splitlines() if line.strip()]
    assert done[feature]["code"] == 2, done[feature]["output"]
    assert len(lines) == 1 and f"pip install 'headprune[{extra}]'" in lines[0], lines
    assert "Traceback" not in done[feature]["output"]
    assert not (folder / feature).exists()  # nothing written


MISSING = '''
import pytest
from helpers.extras import needs

pytest.importorskip("headprune_no_such_package", reason="the x extra is not installed")


def test_never_collected() -> None:
    pass
'''

NEEDS = '''
import pytest
from helpers.extras import needs


def test_needs_a_missing_runtime() -> None:
    needs("headprune_no_such_package", extra="onnx")


def test_skipped_for_another_reason() -> None:
    pytest.skip("this machine has a GPU")
'''


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
@pytest.mark.parametrize("required", [False, True])
def test_a_skip_for_a_missing_package_fails_when_every_extra_is_required(tmp_path, required, workers) -> None:  # noqa: ANN001
    """tests/conftest.py's hook, as CI runs it (HEADPRUNE_REQUIRE_EXTRAS=1, set by scripts/test.sh, with
    pytest-xdist workers): a module skipped by importorskip and a test skipped by ``needs`` fail; any other skip
    stays a skip."""
    (tmp_path / "test_missing.py").write_text(MISSING)
    (tmp_path / "test_needs.py").write_text(NEEDS)
    tests = Path(__file__).resolve().parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tests), str(tests.parent)]),
           "HEADPRUNE_REQUIRE_EXTRAS": "1" if required else "0"}
    # conftest.py and helpers import no torch, and plugins these files do not use stay out: a quick inner pytest.
    light = ["-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-p", "no:anyio"]
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "conftest", *light, "-q", "-rA", *workers,
                           str(tmp_path)], capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    summary = done.stdout.strip().splitlines()[-1]
    if required:
        assert done.returncode == 1 and "1 failed" in summary and "error" not in summary, done.stdout
        assert "FAILED test_missing.py: Skipped: the x extra is not installed (skipped for a missing" in done.stdout
        assert "FAILED test_needs.py::test_needs_a_missing_runtime" in done.stdout
        assert "SKIPPED [1] test_needs.py" in done.stdout and "this machine has a GPU" in done.stdout
    else:
        assert done.returncode == 0 and "3 skipped" in summary and "failed" not in summary, done.stdout
