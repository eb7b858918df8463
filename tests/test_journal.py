"""find's journal: it records the run environment and refuses to resume in another, keeps pre-screens so a resume
never recomputes them, and rewrites itself atomically."""

from __future__ import annotations

import json

import pytest
import torch

from headprune.core import cpu_linear
from headprune.errors import ResultFileError
from headprune.search.find import find
from headprune.search.journal import JOURNAL_NAME
from helpers import SMALL, build_tiny, random_choice_task


def test_resume_refuses_another_environment(tmp_path, tokenizer, monkeypatch) -> None:
    lm = build_tiny("llama", tokenizer, seed=1)
    task = random_choice_task(40)
    find(lm, task, out=tmp_path, **SMALL)
    header = json.loads((tmp_path / JOURNAL_NAME).read_text().splitlines()[0])["settings"]
    import transformers

    import headprune

    threads = torch.get_num_threads()
    assert header["environment"] == {"headprune": headprune.__version__, "torch": torch.__version__,
                                     "transformers": transformers.__version__,
                                     "python": header["environment"]["python"], "dtype": "float32",
                                     "device": "cpu", "threads": threads, "cpu_linear": cpu_linear.kernel()}
    other = 1 if threads != 1 else 2
    torch.set_num_threads(other)
    try:
        with pytest.raises(ResultFileError, match=f"environment differs .*threads {threads} then, {other} now"):
            find(lm, task, out=tmp_path, resume=True, **SMALL)
    finally:
        torch.set_num_threads(threads)
    kernel = cpu_linear.kernel()  # results computed by another float32 linear kernel differ by float rounding
    monkeypatch.setenv(cpu_linear.ENV, other_kernel := "torch" if kernel == "onednn" else "onednn")
    with pytest.raises(ResultFileError, match=f"environment differs .*cpu_linear {kernel} then, {other_kernel} now"):
        find(lm, task, out=tmp_path, resume=True, **SMALL)
    monkeypatch.delenv(cpu_linear.ENV)
    find(lm, task, out=tmp_path, resume=True, **SMALL)  # the same environment resumes


@pytest.mark.slow  # four small find runs
def test_prescreens_are_journalled_and_never_recomputed_on_resume(tmp_path, tokenizer, monkeypatch) -> None:
    from headprune.evaluation import Evaluator
    import headprune.search.attribution as attribution
    import headprune.search.halving as halving

    lm = build_tiny("gpt2", tokenizer, seed=2)
    task = random_choice_task(40, seed=3)
    results = {screen: find(lm, task, out=tmp_path / screen, screen=screen, candidates=3, **SMALL).to_dict()
               for screen in ("attribution", "halving")}

    def never(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("a journalled pre-screen was computed again")

    class NoRuns(Evaluator):
        run = never

    monkeypatch.setattr(attribution, "estimate_effects", never)
    monkeypatch.setattr(halving, "Evaluator", NoRuns)
    for screen, whole in results.items():
        resumed = find(lm, task, out=tmp_path / screen, screen=screen, candidates=3, resume=True, **SMALL).to_dict()
        whole.pop("timings"), resumed.pop("timings")
        assert resumed == whole


def test_the_journal_rewrite_on_resume_is_atomic(tmp_path, monkeypatch) -> None:
    import headprune.core.io
    from headprune.evaluation.results import EvalResult, ExampleResult
    from headprune.search.journal import Journal

    settings = {"model_hash": "sha256:x", "environment": {"threads": 1}}
    journal = Journal(tmp_path, settings)
    journal.put("discovery|", EvalResult("t", "choice", (ExampleResult("a", True, 1.5), ExampleResult("b", False, -2))))
    del journal  # releases the folder's lock
    path = tmp_path / JOURNAL_NAME
    with path.open("a") as handle:
        handle.write('{"key": "discovery|L1.H')  # a line cut short by a kill: resume rewrites the journal
    before = path.read_bytes()

    def killed(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - the process dies before the rename
        raise KeyboardInterrupt

    monkeypatch.setattr(headprune.core.io.os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        Journal(tmp_path, settings, resume=True)
    assert path.read_bytes() == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(f".{JOURNAL_NAME}")]
    monkeypatch.undo()
    assert Journal(tmp_path, settings, resume=True).has("discovery|") and not path.read_text().endswith("L1.H")
