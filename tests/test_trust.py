"""Trust checks built into the product: determinism, the run environment, locks, split, fired hooks."""

from __future__ import annotations

import json

import pytest
import torch

from headprune.errors import InternalCheckError, ResultFileError
from headprune.evaluation.contract import MARGIN_TOLERANCE
from headprune.search.determinism import KEY, compare_passes, reordered_pass
from headprune.search.find import find
from headprune.search.journal import JOURNAL_NAME
from helpers import build_tiny, random_choice_task, save_folder

SMALL = dict(discovery=24, heldout=16, nominees=2, max_heads=2, finalists=1, batch_size=8)


def test_determinism_check_passes_on_a_sound_model_and_is_journalled(tmp_path, tokenizer) -> None:
    lm = build_tiny("llama", tokenizer, seed=3)
    find(lm, random_choice_task(40, seed=1), out=tmp_path, **SMALL)
    lines = [json.loads(line) for line in (tmp_path / JOURNAL_NAME).read_text().splitlines()]
    keys = [line.get("key") for line in lines[1:]]
    assert keys[:3] == ["discovery|", "heldout|", KEY]  # before the first ablated condition
    first, second = lines[1], lines[3]
    assert first["correct"] == second["correct"]
    diff = max(abs(a - b) / max(1.0, abs(a)) for a, b in zip(first["margins"], second["margins"]))
    assert diff <= MARGIN_TOLERANCE["float32"]


def test_a_batch_dependent_model_stops_the_run(tmp_path, tokenizer) -> None:
    lm = build_tiny("llama", tokenizer, seed=3)
    # A real batch dependence (as a BatchNorm in training mode would have): each row sees the batch mean.
    handle = lm.model.get_input_embeddings().register_forward_hook(
        lambda module, args, output: output + 0.5 * output.mean(dim=0, keepdim=True))
    try:
        with pytest.raises(InternalCheckError, match="determinism check: .*batch order"):
            find(lm, random_choice_task(40, seed=1), out=tmp_path, **SMALL)
    finally:
        handle.remove()
    # Nothing was screened against the untrustworthy baseline.
    keys = [json.loads(line).get("key") for line in (tmp_path / JOURNAL_NAME).read_text().splitlines()[1:]]
    assert not any(k.startswith("discovery|L") for k in keys)


def test_compare_passes_contract(tokenizer) -> None:
    from headprune.evaluation import Evaluator

    lm = build_tiny("gpt2", tokenizer, seed=4)
    evaluator = Evaluator(lm, random_choice_task(30, seed=5), batch_size=8)
    first, second = evaluator.run(()), reordered_pass(evaluator)
    compare_passes(first, second, "float32")  # a sound model agrees with itself
    from dataclasses import replace

    worst = int(abs(first.margins).argmax())
    nudged = list(second.results)
    nudged[worst] = replace(nudged[worst], margin=nudged[worst].margin * (1 + 3e-4))
    with pytest.raises(InternalCheckError, match="margins differ"):
        compare_passes(first, replace(second, results=tuple(nudged)), "float32")
    compare_passes(first, replace(second, results=tuple(nudged)), "bfloat16")  # within bfloat16's tolerance


def test_resume_refuses_another_environment(tmp_path, tokenizer) -> None:
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
                                     "device": "cpu", "threads": threads}
    other = 1 if threads != 1 else 2
    torch.set_num_threads(other)
    try:
        with pytest.raises(ResultFileError, match=f"environment differs .*threads: {threads} then, {other} now"):
            find(lm, task, out=tmp_path, resume=True, **SMALL)
    finally:
        torch.set_num_threads(threads)
    find(lm, task, out=tmp_path, resume=True, **SMALL)  # the same environment resumes


# ------------------------------------------------------------------ one run per folder, journalled pre-screens


def test_a_second_find_on_the_same_folder_is_refused_and_a_stale_lock_taken_over(tmp_path, tokenizer) -> None:
    import os
    import signal
    import socket
    import subprocess
    import sys


    from helpers.cli import invoke
    from headprune.io import LOCK_NAME
    from headprune.tasks import write_jsonl_task

    lm = build_tiny("llama", tokenizer, seed=1)
    save_folder(lm.model, tokenizer, tmp_path / "model")
    write_jsonl_task(random_choice_task(40), tmp_path / "t.jsonl")
    out = tmp_path / "run"
    script = (f"import time\nfrom headprune.io import FolderLock\nlock = FolderLock({str(out)!r}).acquire()\n"
              "print('locked', flush=True)\ntime.sleep(120)")
    holder = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        args = ["find", str(tmp_path / "model"), "--task", str(tmp_path / "t.jsonl"), "--discovery", "24",
                "--heldout", "16", "--nominees", "2", "--max-heads", "2", "--finalists", "1", "--out", str(out)]
        refused = invoke(*args, catch_exceptions=True)
        assert refused.exit_code == 2 and refused.output.count("\n") == 1
        assert f"pid {holder.pid} on host {socket.gethostname()}" in refused.output
        assert not (out / JOURNAL_NAME).exists()
        os.kill(holder.pid, signal.SIGKILL)  # dies holding the lock
        holder.wait()
        assert (out / LOCK_NAME).exists()
        taken = invoke(*args, catch_exceptions=True)
        assert taken.exit_code in (0, 1), taken.output
        assert f"taking over the lock of find (pid {holder.pid}" in taken.output
        assert not (out / LOCK_NAME).exists()  # released when the run ended
    finally:
        if holder.poll() is None:
            holder.kill()


@pytest.mark.slow  # four small find runs
def test_prescreens_are_journalled_and_never_recomputed_on_resume(tmp_path, tokenizer, monkeypatch) -> None:
    import headprune.search.attribution as attribution
    import headprune.search.halving as halving
    from headprune.evaluation import Evaluator

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
    import headprune.io
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

    monkeypatch.setattr(headprune.io.os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        Journal(tmp_path, settings, resume=True)
    assert path.read_bytes() == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(f".{JOURNAL_NAME}")]
    monkeypatch.undo()
    assert Journal(tmp_path, settings, resume=True).has("discovery|") and not path.read_text().endswith("L1.H")


# ------------------------------------------------------------------ the split


def test_the_split_is_disjoint_by_input_and_counts_what_it_drops() -> None:
    from headprune.search.split import split_task
    from headprune.tasks import Example, Task

    # 30 inputs, each asked twice with opposite answers, plus 5 exact duplicates.
    examples = [Example(f"a{i}", prompt=f"question {i}", choices=(" yes", " no"), answer=0) for i in range(30)]
    examples += [Example(f"b{i}", prompt=f"question {i}", choices=(" yes", " no"), answer=1) for i in range(30)]
    examples += [Example(f"c{i}", prompt=f"question {i}", choices=(" yes", " no"), answer=0) for i in range(5)]
    task = Task("conflicts", "choice", tuple(examples))
    for seed in range(5):
        split = split_task(task, discovery=15, heldout=15, seed=seed)
        inputs = [{e.prompt for e in side.examples} for side in (split.discovery, split.heldout)]
        assert not inputs[0] & inputs[1] and all(len(s) == 15 for s in inputs)
        assert (split.duplicates_dropped, split.conflicts_dropped) == (5, 30)
    # A second task with the same inputs (other answers) as held-out: those in discovery are dropped there.
    split = split_task(Task("d", "choice", tuple(examples[:30])), discovery=10, heldout=10, seed=0,
                       heldout_task=Task("h", "choice", tuple(examples[30:60]) + tuple(
                           Example(f"n{i}", prompt=f"new {i}", choices=(" yes", " no"), answer=0) for i in range(12))))
    assert not {e.prompt for e in split.discovery.examples} & {e.prompt for e in split.heldout.examples}
    assert split.conflicts_dropped == 10


# ------------------------------------------------------------------ nothing silent: fired hooks, replay start


def _cached_evaluator(lm):  # noqa: ANN001, ANN202
    from headprune.evaluation import Evaluator
    from headprune.layer_cache import LayerInputCache

    evaluator = Evaluator(lm, random_choice_task(12, seed=6), batch_size=4, reuse_layers=True)
    evaluator._layer_cache = LayerInputCache(lm, [1, 2])  # checkpoints at layers 1 and 2 of 4
    evaluator.run()  # the intact run captures the layer inputs
    return evaluator


def test_a_replay_that_starts_above_the_ablated_layer_is_an_internal_error(tokenizer, monkeypatch) -> None:
    from headprune.heads import Head
    from headprune.layer_cache import LayerInputCache

    lm = build_tiny("llama", tokenizer, seed=7, layers=4)
    evaluator = _cached_evaluator(lm)
    sound = evaluator.run([Head(1, 1)])  # replays from layer 1: fine
    monkeypatch.setattr(LayerInputCache, "start_for", lambda self, lowest: 2)  # an off-by-one bug
    with pytest.raises(InternalCheckError, match=r"ablation hook of layer 1 \(L1.H1\) ran 0 times in \d+ forward"):
        evaluator.run([Head(1, 1)])
    monkeypatch.undo()
    assert evaluator.run([Head(1, 1)]) == sound


def test_a_replay_that_never_feeds_its_start_layer_is_an_internal_error(tokenizer, monkeypatch) -> None:
    import copy

    from headprune.heads import Head

    lm = build_tiny("llama", tokenizer, seed=7, layers=4)
    evaluator = _cached_evaluator(lm)
    real = type(lm.adapter).layers_container
    # An adapter bug: the replay patches copies of the layers, not those the model runs, so the pass does not
    # start from the cache.
    monkeypatch.setattr(type(lm.adapter), "layers_container", lambda self, model: copy.deepcopy(real(self, model)))
    with pytest.raises(InternalCheckError, match="should start at layer 2, but layer 2 was fed 0 times"):
        evaluator.run([Head(3, 0)])


def test_a_hook_on_a_module_outside_the_forward_pass_is_an_internal_error(tokenizer, monkeypatch) -> None:
    from torch import nn

    from headprune.evaluation import evaluate
    from headprune.heads import Head

    lm = build_tiny("gpt2", tokenizer, seed=7)
    stray = nn.Linear(4, 4)
    real = type(lm.adapter).output_projection
    monkeypatch.setattr(type(lm.adapter), "output_projection",
                        lambda self, model, layer: stray if layer == 1 else real(self, model, layer))
    with pytest.raises(InternalCheckError, match=r"layer 1 \(L1.H0\) ran 0 times"):
        evaluate(lm, random_choice_task(6), heads=[Head(0, 1), Head(1, 0)])


# ------------------------------------------------------------------ "identical" means the stated contract


@pytest.mark.slow  # decoding on two tasks x six conditions x two evaluators per family
@pytest.mark.parametrize("family", ["llama", "gpt2", "gpt_neox"])
def test_fast_paths_keep_the_contract_against_a_plain_full_forward_pass(family, tokenizer) -> None:
    from headprune.evaluation import Evaluator
    from headprune.evaluation.contract import disagreement
    from headprune.heads import parse_heads
    from helpers import choice_task, generate_task, prefixed

    lm = build_tiny(family, tokenizer, seed=7, layers=4)
    for task in (prefixed(choice_task()), prefixed(generate_task())):
        plain = Evaluator(lm, task, batch_size=5, share_prefix=False)  # every token of every sequence, every layer
        fast = Evaluator(lm, task, batch_size=5, reuse_layers=True)  # shared prefix + layer cache (find's setup)
        assert fast._layer_cache.checkpoints and (fast._prefix or fast.scorer.generates) and not plain._prefix
        means = plain.head_means()
        assert disagreement(plain.run(), fast.run(), "float32")[0] is None  # the intact run fills the cache
        for spec in ("L0.H1", "L2.H0,L3.H3", "L1.H2"):
            for mode in ("zero", "mean"):
                heads = parse_heads(spec)
                reference = plain.run(heads, mode=mode, means=means)
                problem, _ = disagreement(reference, fast.run(heads, mode=mode, means=means), "float32")
                assert problem is None, f"{family} {task.name} {spec} {mode}: {problem}"


def test_bench_screen_exits_1_when_an_answer_differs_from_the_naive_loop(tmp_path, tokenizer, monkeypatch) -> None:
    import runpy
    from dataclasses import replace

    from headprune.evaluation import Evaluator
    from headprune.tasks import write_jsonl_task

    lm = build_tiny("llama", tokenizer, seed=7)
    save_folder(lm.model, tokenizer, tmp_path / "m")
    # One-token choices: the naive loop tokenizes prompt + choice together, so longer choices could merge.
    write_jsonl_task(random_choice_task(12, seed=4), tmp_path / "t.jsonl")
    bench = runpy.run_path("scripts/bench_screen.py")
    argv = ["--model", str(tmp_path / "m"), "--task", str(tmp_path / "t.jsonl"), "--n", "12", "--layer-step", "1"]
    bench["main"](argv)  # the fast paths keep the contract: no exit
    real = Evaluator.run

    def one_answer_off(self, heads=(), **kwargs):  # noqa: ANN001, ANN003, ANN202 - a fast path that flips one answer
        result = real(self, heads, **kwargs)
        if not heads:
            return result
        first = result.results[0]
        return replace(result, results=(replace(first, correct=not first.correct), *result.results[1:]))

    monkeypatch.setattr(Evaluator, "run", one_answer_off)
    with pytest.raises(SystemExit) as stopped:
        bench["main"](argv)
    assert stopped.value.code == 1
