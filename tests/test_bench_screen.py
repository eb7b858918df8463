"""scripts/bench/screen.py: it exits 1 when a fast path's answer differs from the naive loop's."""

from __future__ import annotations

import pytest

from helpers import build_tiny, random_choice_task, save_folder


def test_bench_screen_exits_1_when_an_answer_differs_from_the_naive_loop(tmp_path, tokenizer, monkeypatch) -> None:
    import json
    from dataclasses import replace

    from headprune.evaluation import Evaluator
    from headprune.tasks import write_jsonl_task
    from scripts.bench import screen

    lm = build_tiny("llama", tokenizer, seed=7)
    save_folder(lm.model, tokenizer, tmp_path / "m")
    # One-token choices: the naive loop tokenizes prompt + choice together, so longer choices could merge.
    write_jsonl_task(random_choice_task(12, seed=4), tmp_path / "t.jsonl")
    argv = ["--model", str(tmp_path / "m"), "--task", str(tmp_path / "t.jsonl"), "--n", "12", "--layer-step", "1",
            "--device", "cpu", "--json", str(tmp_path / "screen.json")]
    screen.main(argv)  # the fast paths keep the contract: no exit
    rows = json.loads((tmp_path / "screen.json").read_text())["results"]
    assert [row["variant"] for row in rows][0] == "naive loop" and all(row["differing"] == 0 for row in rows)
    real = Evaluator.run

    def one_answer_off(self, heads=(), **kwargs):  # noqa: ANN001, ANN003, ANN202 - a fast path that flips one answer
        result = real(self, heads, **kwargs)
        if not heads:
            return result
        first = result.results[0]
        return replace(result, results=(replace(first, correct=not first.correct), *result.results[1:]))

    monkeypatch.setattr(Evaluator, "run", one_answer_off)
    with pytest.raises(SystemExit) as stopped:
        screen.main(argv)
    assert stopped.value.code == 1
