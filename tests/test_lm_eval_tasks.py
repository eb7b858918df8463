"""lm-evaluation-harness tasks: headprune's numbers for a task equal ``lm_eval``'s own, document by document.

The tasks are local YAML files over JSONL rows shipped in ``tests/data/lm_eval``; ``lm_eval`` itself scores
the same tiny random model (in process, and as a command on exported models).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from headprune.errors import TaskError
from headprune.evaluation import evaluate
from headprune.loading.models import load_model
from headprune.tasks import load_task


@pytest.fixture(scope="module", autouse=True)
def lm_eval_installed():  # noqa: ANN201
    """These tests compare with lm_eval itself: without it they fail, saying so, rather than skip (CI installs the
    extra; a parity never run against lm_eval is not tested), as tests/test_gguf.py does for llama.cpp."""
    try:
        import lm_eval
    except ImportError as error:
        pytest.fail(f"these tests compare with lm-evaluation-harness, which cannot be imported ({error}); "
                    "pip install 'headprune[lm-eval]' (scripts/setup.sh does)")
    return lm_eval

DATA = Path(__file__).resolve().parent / "data" / "lm_eval"


def write_yaml(folder: Path, name: str, rows: Path, body: str) -> Path:
    """A YAML task over ``rows`` (a JSONL file), its datasets cache inside ``folder``."""
    path = folder / f"{name}.yaml"
    path.write_text(f"task: {name}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {rows}\n"
                    f"  cache_dir: {folder / 'datasets'}\ntest_split: test\n{body}")
    return path


CHOICE = """fewshot_split: test
num_fewshot: 1
output_type: multiple_choice
doc_to_text: "{{question}}"
doc_to_choice: "{{choices}}"
doc_to_target: "{{answer}}"
metric_list:
  - metric: acc
  - metric: acc_norm
  - metric: acc_bytes
"""
GENERATE = """output_type: generate_until
doc_to_text: "{{question}}"
doc_to_target: "{{answer}}"
generation_kwargs:
  until: ["\\n", "."]
  max_gen_toks: 8
  do_sample: false
metric_list:
  - metric: exact_match
"""


@pytest.fixture(scope="module")
def tasks_folder(tmp_path_factory, tiny_folder):  # noqa: ANN001, ANN201
    """The choice task, and a generate task whose even documents' targets are what the model writes (taken
    from transformers' own greedy decoding), so that exact match is right on some documents and wrong on others."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = tmp_path_factory.mktemp("lm-eval-tasks")
    write_yaml(folder, "hp_choice", DATA / "choice.jsonl", CHOICE)
    model, tokenizer = AutoModelForCausalLM.from_pretrained(tiny_folder), AutoTokenizer.from_pretrained(tiny_folder)
    rows = [json.loads(line) for line in (DATA / "generate.jsonl").read_text().splitlines()]
    for i, row in enumerate(rows[::2]):
        ids = tokenizer(row["question"], return_tensors="pt").input_ids
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=8, do_sample=False, pad_token_id=0)
        text = tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
        row["answer"] = text.split("\n")[0].split(".")[0]
    (folder / "generate.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    write_yaml(folder, "hp_generate", folder / "generate.jsonl", GENERATE)
    return folder


def lm_eval_samples(model_folder: Path, tasks_folder: Path, task: str) -> dict[int, dict]:
    """``lm_eval``'s per-document results for ``task`` on the model in ``model_folder`` (in process)."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    out = lm_eval.simple_evaluate(model="hf", model_args=f"pretrained={model_folder},dtype=float32",
                                  tasks=[task], device="cpu", batch_size=4, log_samples=True,
                                  task_manager=TaskManager(include_path=str(tasks_folder), include_defaults=False))
    return {sample["doc_id"]: sample for sample in out["samples"][task]}


@pytest.fixture(scope="module")
def lm_eval_choice(tiny_folder, tasks_folder):  # noqa: ANN001, ANN201
    return lm_eval_samples(tiny_folder, tasks_folder, "hp_choice")


@pytest.mark.parametrize("metric", ["acc", "acc_norm", "acc_bytes"])
def test_choice_agrees_with_lm_eval(tiny_folder, tasks_folder, lm_eval_choice, metric) -> None:
    task = load_task(f"lm-eval:{tasks_folder / 'hp_choice.yaml'}:metric={metric}")
    assert task.length_normalize == (metric != "acc")
    result = evaluate(load_model(str(tiny_folder), device="cpu"), task)
    ours = [int(r.correct) for r in result.results]
    theirs = [int(lm_eval_choice[doc][metric]) for doc in range(len(ours))]
    assert len(ours) == 14
    assert ours == theirs
    assert 0 < sum(ours) < len(ours)  # right and wrong answers both occur
    margins = []  # from lm_eval's log-likelihoods, normalised as its metric does
    for doc, example in enumerate(task.examples):
        length = {"acc": lambda c: 1, "acc_norm": len, "acc_bytes": lambda c: len(c.encode("utf-8"))}[metric]
        scores = [float(ll) / length(c)
                  for (ll, _), c in zip(lm_eval_choice[doc]["filtered_resps"], example.choices)]
        margins.append(scores[example.answer] - max(v for k, v in enumerate(scores) if k != example.answer))
    assert result.margins == pytest.approx(margins, abs=1e-4)
    # The two metrics pick differently on some documents, so agreeing on both is not agreeing on one.
    assert any(lm_eval_choice[d]["acc"] != lm_eval_choice[d]["acc_norm"] for d in lm_eval_choice)


def test_default_metric_is_acc_norm_when_listed(tasks_folder) -> None:
    task = load_task(f"lm-eval:{tasks_folder / 'hp_choice.yaml'}")
    assert task.kind == "choice" and task.length_normalize and task.length_unit == "chars"
    assert task.strip_context == "whitespace"
    assert task.examples[0].id == "hp_choice/0"
    assert task.examples[0].prompt.endswith("Sentiment: ")  # lm-eval's context and target delimiter
    assert "\n\n" in task.examples[0].prompt  # its one-shot example
    # The shots are lm_eval's seeded draw: the same task every time (a resumed search finds its journal).
    assert load_task(f"lm-eval:{tasks_folder / 'hp_choice.yaml'}").content_hash() == task.content_hash()


def test_generate_agrees_with_lm_eval(tiny_folder, tasks_folder) -> None:
    task = load_task(f"lm-eval:{tasks_folder / 'hp_generate.yaml'}")
    assert task.kind == "generate" and task.until == ("\n", ".") and task.max_new_tokens == 8
    result = evaluate(load_model(str(tiny_folder), device="cpu"), task)
    theirs = lm_eval_samples(tiny_folder, tasks_folder, "hp_generate")
    ours = [int(r.correct) for r in result.results]
    assert ours == [int(theirs[doc]["exact_match"]) for doc in range(len(ours))]
    assert ours == [1, 0, 1, 0, 1, 0, 1]
    assert task.examples[-1].prompt.endswith("= ")  # decoding starts after the space, as in lm_eval


GSM_LIKE = """output_type: generate_until
doc_to_text: "Question: {{question}}\\nAnswer:"
doc_to_target: "{{answer}}"
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
    ignore_case: true
    ignore_punctuation: false
    regexes_to_ignore: [",", "\\\\$", "(?s).*#### ", "\\\\.$"]
generation_kwargs:
  until: ["Question:", "</s>", "<|im_end|>"]
  do_sample: false
  max_gen_toks: 8
filter_list:
  - name: "strict-match"
    filter:
      - function: "regex"
        regex_pattern: "#### (\\\\-?[0-9\\\\.\\\\,]+)"
      - function: "take_first"
  - name: "last-word"
    filter:
      - function: "regex"
        group_select: -1
        regex_pattern: "(\\\\w+)"
      - function: "take_first"
"""


@pytest.fixture(scope="module")
def gsm_folder(tmp_path_factory, tiny_folder):  # noqa: ANN001, ANN201
    """A gsm8k-style task (gsm8k's metric options and strict-match filter, and a last-word filter a tiny random
    model can pass): even documents' targets end in "#### " and the last word the model writes (upper-cased: the
    metric ignores case), taken from transformers' own greedy decoding."""
    import re

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = tmp_path_factory.mktemp("lm-eval-gsm")
    model, tokenizer = AutoModelForCausalLM.from_pretrained(tiny_folder), AutoTokenizer.from_pretrained(tiny_folder)
    rows = [json.loads(line) for line in (DATA / "generate.jsonl").read_text().splitlines()]
    for i, row in enumerate(rows):
        ids = tokenizer(f"Question: {row['question']}\nAnswer:", return_tensors="pt").input_ids
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=8, do_sample=False, pad_token_id=0)
        text = tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True).split("Question:")[0]
        words = re.findall(r"(\w+)", text)
        row["answer"] = f"Some work, $3.\n#### {words[-1].upper()}" if i % 2 == 0 and words else "#### 7"
    (folder / "gsm.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    write_yaml(folder, "hp_gsm", folder / "gsm.jsonl", GSM_LIKE)
    return folder


def test_gsm8k_style_filters_agree_with_lm_eval(tiny_folder, gsm_folder) -> None:
    """A task with gsm8k's answer filters and exact_match options scores as lm_eval scores it, per filter."""
    out = __import__("lm_eval").simple_evaluate(
        model="hf", model_args=f"pretrained={tiny_folder},dtype=float32", tasks=["hp_gsm"], device="cpu",
        batch_size=4, log_samples=True,
        task_manager=__import__("lm_eval.tasks", fromlist=["TaskManager"]).TaskManager(
            include_path=str(gsm_folder), include_defaults=False))
    lm = load_model(str(tiny_folder), device="cpu")  # lm_eval ran on the CPU in float32
    seen = {}
    for name in ("strict-match", "last-word"):
        theirs = {s["doc_id"]: s for s in out["samples"]["hp_gsm"] if s["filter"] == name}
        spec = f"lm-eval:{gsm_folder / 'hp_gsm.yaml'}" + ("" if name == "strict-match" else f":filter={name}")
        task = load_task(spec)
        assert task.answer.name == f"lm-eval:{name}"
        result = evaluate(lm, task)
        ours = [int(r.correct) for r in result.results]
        assert ours == [int(theirs[doc]["exact_match"]) for doc in range(len(ours))]
        assert [r.text for r in result.results] == [theirs[doc]["resps"][0][0] for doc in range(len(ours))]
        assert [task.answer.extract(r.text) for r in result.results] == [
            theirs[doc]["filtered_resps"][0] for doc in range(len(ours))]
        seen[name] = ours
    assert not any(seen["strict-match"])  # the model writes no "#### N": every answer is [invalid]
    assert 0 < sum(seen["last-word"]) < len(seen["last-word"])  # right and wrong both occur
    with pytest.raises(TaskError, match="has no filter 'flexible'; its filters: strict-match, last-word"):
        load_task(f"lm-eval:{gsm_folder / 'hp_gsm.yaml'}:filter=flexible")


def test_bad_specs_are_refused(tasks_folder, tmp_path) -> None:
    with pytest.raises(TaskError, match="metric must be one of"):
        load_task(f"lm-eval:{tasks_folder / 'hp_choice.yaml'}:metric=f1")
    with pytest.raises(TaskError, match="has no split 'train'"):
        load_task(f"lm-eval:{tasks_folder / 'hp_choice.yaml'}:split=train")
    with pytest.raises(TaskError, match="take only metric, num_fewshot, split and filter"):
        load_task(f"lm-eval:{tasks_folder / 'hp_choice.yaml'}:shots=2")
    with pytest.raises(TaskError, match="no lm-eval task file"):
        load_task(f"lm-eval:{tmp_path / 'absent.yaml'}")
    odd = write_yaml(tmp_path, "hp_odd", DATA / "choice.jsonl", CHOICE + 'target_delimiter: ": "\n')
    with pytest.raises(TaskError, match="target_delimiter"):
        load_task(f"lm-eval:{odd}")


def test_missing_dataset_offline_names_it(tmp_path, monkeypatch) -> None:
    import datasets

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True, raising=False)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True, raising=False)
    path = tmp_path / "missing.yaml"
    path.write_text(CHOICE.replace("fewshot_split: test\n", "") + "task: hp_missing\n"
                    "dataset_path: someone/not-a-real-dataset\ntest_split: test\n")
    with pytest.raises(TaskError) as error:
        load_task(f"lm-eval:{path}")
    assert "someone/not-a-real-dataset" in str(error.value)
    assert "dataset_path: json" in str(error.value) and "\n" not in str(error.value)


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["sliced", "dense"])
def test_lm_eval_command_on_the_export_matches_headprune(tiny_folder, tasks_folder, tmp_path, layout) -> None:
    """``lm_eval --model hf`` on an exported model gives the accuracy headprune measured with the heads ablated."""
    from headprune.exporter import export

    lm = load_model(str(tiny_folder), device="cpu")  # lm_eval ran on the CPU in float32
    spec = f"lm-eval:{tasks_folder / 'hp_choice.yaml'}:metric=acc"
    task = load_task(spec)
    heads = "L0.H1,L1.H3"
    export(lm, heads, layout=layout, verify_task=spec, out=tmp_path / "export")
    command = [sys.executable, "-m", "lm_eval", "--model", "hf", "--model_args",
               f"pretrained={tmp_path / 'export'},trust_remote_code=True,dtype=float32", "--tasks", "hp_choice",
               "--include_path", str(tasks_folder), "--device", "cpu", "--batch_size", "4", "--log_samples",
               "--output_path", str(tmp_path / "lm-eval-out")]
    run = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    samples_file = next((tmp_path / "lm-eval-out").rglob("samples_hp_choice_*.jsonl"))
    theirs = {row["doc_id"]: row for row in map(json.loads, samples_file.read_text().splitlines())}
    from headprune.heads import parse_heads

    ours = evaluate(lm, task, heads=parse_heads(heads))
    docs = range(len(ours.results))
    assert [int(r.correct) for r in ours.results] == [int(theirs[d]["acc"]) for d in docs]
    # Their log-likelihoods give the same margins: the right choice's minus the best wrong one's.
    margins = []
    for d, example in zip(docs, task.examples):
        lls = [float(ll) for ll, _ in theirs[d]["filtered_resps"]]
        margins.append(lls[example.answer] - max(ll for k, ll in enumerate(lls) if k != example.answer))
    assert ours.margins == pytest.approx(margins, abs=1e-4)
    intact = evaluate(lm, task)
    assert max(abs(a - b) for a, b in zip(intact.margins, ours.margins)) > 1e-3  # the ablation shows


def test_several_tasks_in_one_spec(tasks_folder) -> None:
    plain = write_yaml(tasks_folder, "hp_choice_zero", DATA / "choice.jsonl",
                       CHOICE.replace("num_fewshot: 1", "num_fewshot: 0"))
    both = load_task(f"lm-eval:{tasks_folder / 'hp_choice.yaml'},{plain}:metric=acc")
    assert len(both) == 28 and not both.length_normalize
    assert [e.id for e in both.examples][13:15] == ["hp_choice/13", "hp_choice_zero/0"]
    assert both.examples[14].prompt == "the film is a delight from start to finish. Sentiment: "  # zero-shot
    with pytest.raises(TaskError, match="mix kinds"):
        load_task(f"lm-eval:{plain},{tasks_folder / 'hp_generate.yaml'}")


def test_only_lm_evals_public_api_is_used() -> None:
    """No private module or member of lm-eval (``task._metric_fn_list``, ``lm_eval.tasks._yaml_loader``): what a
    release may change without notice."""
    import ast

    import headprune.tasks.answers as answers
    import headprune.tasks.harness as harness

    for module in (harness, answers):
        for node in ast.walk(ast.parse(Path(module.__file__).read_text())):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                names += [f"{node.module}.{a.name}" for a in node.names] if isinstance(node, ast.ImportFrom) else []
                for name in names:
                    if name.startswith("lm_eval"):
                        assert not any(p.startswith("_") for p in name.split(".")), name
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                assert isinstance(node.value, ast.Name) and node.value.id == "self", ast.unparse(node)
