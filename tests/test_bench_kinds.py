"""scripts/bench/kinds.py on the default model (SmolLM2-135M, few examples): every kind runs (code's programs
too), answers agree with the naive loops, the FLOP limits and the profile are printed, the JSON record renders as
docs/benchmarks.md's table; a fast path that changes an answer makes it exit 1."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from headprune.evaluation import Evaluator
from scripts.bench import kinds, render


@pytest.mark.slow
def test_bench_kinds_runs_every_kind_and_exits_1_when_an_answer_differs(smollm2, monkeypatch, capsys,
                                                                         tmp_path) -> None:
    argv = ["--kinds", "generate,choice,classify,code", "--heads", "2", "--n", "8", "--generate-task",
            "arithmetic:n=8", "--choice-task", "sentiment:n=8", "--code-n", "8", "--profile",
            "--json", str(tmp_path / "kinds.json")]
    kinds.main(argv)  # the exact screen keeps the contract: no exit
    out = capsys.readouterr().out
    record = json.loads((tmp_path / "kinds.json").read_text())
    assert [row["kind"] for row in record["results"]] == ["generate", "choice", "classify", "code"]
    assert all(row["differing"] == 0 and row["naive_s"] > 0 and row["headprune_s"] > 0 for row in record["results"])
    table = render.render(tmp_path / "kinds.json").splitlines()
    assert table[0].startswith("| kind | task |") and table[2].startswith("| generate | `arithmetic:n=8` |")
    assert "running the programs" in out
    for kind in ("generate", "choice", "classify", "code"):
        assert f"{kind:<9}" in out and "answers differing: 0" in out
    assert out.count("profiled L") == 4 and "own work" in out  # choice and classify, 2 heads each
    real = Evaluator.run

    def one_answer_off(self, heads=(), **kwargs):  # noqa: ANN001, ANN003, ANN202 - a fast path that flips one answer
        result = real(self, heads, **kwargs)
        if not heads or result.kind != "choice":
            return result
        first = result.results[0]
        return replace(result, results=(replace(first, correct=not first.correct), *result.results[1:]))

    monkeypatch.setattr(Evaluator, "run", one_answer_off)
    with pytest.raises(SystemExit) as stopped:
        kinds.main(["--kinds", "choice", "--heads", "1", "--choice-task", "sentiment:n=8",
                    "--json", str(tmp_path / "off.json")])
    assert stopped.value.code == 1
