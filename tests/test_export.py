"""export: sliced and dense checkpoints and ONNX equal the hook-masked original; the gate refuses bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import ALL_FAMILIES, break_slicing, build_tiny
from headprune.core.folder_lock import lock_path
from headprune.errors import ExportSettingsError, HeadSpecError, ResultFileError, VerificationError
from headprune.exporter import export, verify_record
from headprune.exporter.runtimes import empty_past
from headprune.heads import Head, parse_heads
from headprune.loading.models import load, wrap_model
from headprune.surgery.ablation import ablated
from headprune.surgery.plan import plan_layers
from headprune.surgery.slicing import densify, slice_model
from helpers import choice_task
from helpers.extras import needs

IDS = torch.tensor([[5, 9, 14, 3, 27, 8, 11], [0, 0, 0, 7, 19, 4, 2]])
MASK = torch.tensor([[1, 1, 1, 1, 1, 1, 1], [0, 0, 0, 1, 1, 1, 1]])


def _out(model, lm) -> torch.Tensor:  # noqa: ANN001
    with torch.no_grad():
        if lm.is_encoder:
            return model(input_ids=IDS, attention_mask=MASK).last_hidden_state[MASK.bool()]
        pos = (MASK.cumsum(-1) - 1).clamp(min=0)
        return model(input_ids=IDS, attention_mask=MASK, position_ids=pos).logits[MASK.bool()]


def _masked(lm, heads) -> torch.Tensor:  # noqa: ANN001
    with ablated(lm, heads):
        return _out(lm.model, lm)


@st.composite
def head_sets(draw, layers: int = 2, heads: int = 4):  # noqa: ANN001, ANN201
    """Random non-empty head sets that leave at least one head in every layer."""
    chosen = []
    for layer in range(layers):
        count = draw(st.integers(0, heads - 1))
        chosen += [Head(layer, h) for h in draw(st.permutations(range(heads)))[:count]]
    if not chosen:
        chosen = [Head(draw(st.integers(0, layers - 1)), draw(st.integers(0, heads - 1)))]
    return tuple(sorted(chosen))


@pytest.fixture(scope="module")
def models(tokenizer):  # noqa: ANN001, ANN201
    return {family: build_tiny(family, tokenizer, seed=21) for family in ALL_FAMILIES}


@pytest.mark.slow
@pytest.mark.parametrize("family", ALL_FAMILIES)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(heads=head_sets())
def test_sliced_and_dense_equal_the_masked_model(models, family, heads) -> None:
    lm = models[family]
    expected = _masked(lm, heads)
    plans = plan_layers(lm.grid, heads)
    sliced = slice_model(lm, plans, heads)
    torch.testing.assert_close(_out(sliced, lm), expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(_out(densify(lm, heads), lm), expected, atol=1e-5, rtol=1e-5)
    kept = sum(len(p.q_heads) - len(p.zeroed) for p in plans)
    assert kept == lm.grid.total - len(heads)


@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_save_load_round_trip_and_stock_loader_refuses(models, family, tmp_path) -> None:
    lm = models[family]
    heads = parse_heads("L0.H0,L0.H1,L1.H3")
    record = export(lm, heads, verify_task=choice_task(), out=tmp_path / "sliced")
    assert record.verification.task.disagreements == 0
    torch.testing.assert_close(_out(load(tmp_path / "sliced", device="cpu").model, lm), _masked(lm, heads), atol=1e-5, rtol=1e-5)
    from transformers import AutoModel, AutoModelForCausalLM

    auto = AutoModel if lm.is_encoder else AutoModelForCausalLM
    with pytest.raises(Exception, match="ignore_mismatched_sizes|size mismatch"):  # never silently re-initialised
        auto.from_pretrained(tmp_path / "sliced")
    export(lm, heads, layout="dense", verify_task=choice_task(), out=tmp_path / "dense")
    stock = auto.from_pretrained(tmp_path / "dense")  # dense loads everywhere, no remote code
    torch.testing.assert_close(_out(stock, lm), _masked(lm, heads), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("family", ["gpt2", *(pytest.param(f, marks=pytest.mark.slow)
                                             for f in ("llama", "gpt_neox", "bert"))])
def test_onnx_equals_torch(models, family, tmp_path) -> None:
    needs("onnx", "onnxruntime", "onnxscript", extra="onnx")
    import onnxruntime

    lm = models[family]
    heads = parse_heads("L0.H2,L1.H0,L1.H1")
    record = export(lm, heads, format="onnx", verify_task=choice_task(), out=tmp_path / "onnx")
    assert record.verification.logits.max_abs_diff < 1e-4
    session = onnxruntime.InferenceSession(str(tmp_path / "onnx" / "model.onnx"))
    feeds = {"input_ids": IDS.numpy(), "attention_mask": MASK.numpy()}
    if not lm.is_encoder:
        feeds["position_ids"] = (MASK.cumsum(-1) - 1).clamp(min=0).numpy()
    for past in session.get_inputs()[3:]:  # a decoder with a key/value cache: an empty past
        feeds[past.name] = empty_past(past.shape, IDS.shape[0])
    got = torch.from_numpy(session.run(None, feeds)[0])[MASK.bool()]
    torch.testing.assert_close(got, _masked(lm, heads), atol=1e-4, rtol=1e-4)


@pytest.mark.slow  # two ONNX exports with a key/value cache
@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_onnx_decoder_generates_in_onnxruntime_genai(models, family, tmp_path) -> None:
    """The runtime itself (onnxruntime_genai.Model on the export folder) decodes greedily token for token like
    the hook-masked original in torch."""
    from headprune.exporter.runtimes import GenaiRunner

    needs("onnx", "onnxruntime", "onnxscript", "onnxruntime_genai", extra="onnx")
    lm = models[family]
    heads = parse_heads("L0.H1,L1.H2")  # a query head of a group, per layer: the sliced layout keeps every group
    record = export(lm, heads, format="onnx", verify_task=choice_task(), out=tmp_path / "onnx")
    assert record.layout == "sliced"
    checked = record.verification.runtime  # the export gate ran the runtime itself
    assert checked.done and checked.runtime.startswith("ONNX Runtime GenAI") and checked.identical == checked.prompts
    genai = json.loads((tmp_path / "onnx" / "genai_config.json").read_text())
    assert genai["model"]["decoder"]["num_hidden_layers"] == 2
    runner = GenaiRunner(tmp_path / "onnx")
    for prompt in ([5, 17, 33, 60, 7], [9, 4, 120, 3]):
        with torch.inference_mode(), ablated(lm, heads):
            want = lm.model.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False, eos_token_id=None,
                                     pad_token_id=0)[0, len(prompt):].tolist()
        got, _ = runner.greedy(prompt, 12)
        assert got == want


@pytest.mark.slow  # an ONNX export with a key/value cache, run in GenAI
def test_onnx_decoder_with_a_sliding_window_shorter_than_its_inputs(tokenizer, tmp_path) -> None:
    """A Mistral-style window of 4 tokens under 12-token prompts and a decoded past of 12: the graph's present
    tensors keep growing (GenAI feeds them back; a sliding cache layer's stopped at the window and crashed it), and
    the window is applied: onnxruntime's logits, prompt and one cached step, are the windowed masked original's
    and not those of the same weights without a window."""
    import onnxruntime
    from transformers import MistralConfig, MistralForCausalLM

    needs("onnx", "onnxruntime", "onnxscript", "onnxruntime_genai", extra="onnx")
    from helpers import generate_task

    torch.manual_seed(6)
    config = MistralConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                           num_key_value_heads=2, max_position_embeddings=256, sliding_window=4,
                           vocab_size=len(tokenizer), pad_token_id=0, eos_token_id=1, bos_token_id=1,
                           initializer_range=0.2)  # weights large enough for the window to change the logits
    lm = wrap_model(MistralForCausalLM(config).eval(), tokenizer, name="tiny-mistral-window")
    heads = parse_heads("L0.H1,L1.H0")
    record = export(lm, heads, format="onnx", verify_task=generate_task(), out=tmp_path / "o")
    checked = record.verification.runtime  # GenAI decoded past the window, token for token
    assert checked.done and checked.runtime.startswith("ONNX Runtime GenAI") and checked.mismatches == 0
    ids = torch.randint(2, 200, (1, 13))
    session = onnxruntime.InferenceSession(str(tmp_path / "o" / "model.onnx"))
    empty = {i.name: np.zeros((1, i.shape[1], 0, i.shape[3]), dtype=np.float32) for i in session.get_inputs()[3:]}
    names = [o.name for o in session.get_outputs()]
    first = dict(zip(names, session.run(None, {"input_ids": ids[:, :12].numpy(), "attention_mask": np.ones((1, 12),
                 dtype=np.int64), "position_ids": np.arange(12)[None], **empty})))
    assert first["present.0.key"].shape[2] == 12
    past = {f"past_key_values.{n[len('present.'):]}": v for n, v in first.items() if n.startswith("present.")}
    step = session.run(["logits"], {"input_ids": ids[:, 12:].numpy(), "attention_mask": np.ones((1, 13),
                       dtype=np.int64), "position_ids": np.array([[12]]), **past})[0]
    got = torch.cat([torch.from_numpy(first["logits"][0]), torch.from_numpy(step[0])])
    with torch.no_grad(), ablated(lm, heads):
        windowed = lm.model(input_ids=ids).logits[0]
        lm.model.config.sliding_window = None
        try:
            unwindowed = lm.model(input_ids=ids).logits[0]
        finally:
            lm.model.config.sliding_window = 4
    torch.testing.assert_close(got, windowed, atol=1e-4, rtol=1e-4)
    assert float((got - unwindowed).abs().max()) > 0.05


def test_gqa_layouts(tokenizer) -> None:
    llama = build_tiny("llama", tokenizer, seed=4)  # 4 query heads over 2 KV heads
    plans = plan_layers(llama.grid, parse_heads("L0.H0,L0.H1,L1.H1"))
    assert plans[0].layout == "grouped" and plans[0].kv_heads == (1,) and plans[0].q_heads == (2, 3)
    assert plans[1].layout == "mapped" and plans[1].kv_slots == (0, 1, 1) and plans[1].q_heads == (0, 2, 3)
    assert plan_layers(llama.grid, parse_heads("L1.H1"), kv_map=False)[1].layout in ("keep-zeroed", "duplicate-kv")
    for heads in ("L0.H0,L0.H1", "L0.H1", "L0.H1,L0.H2,L0.H3", "L0.H0,L0.H2"):
        sliced = slice_model(llama, plan_layers(llama.grid, parse_heads(heads)), parse_heads(heads))
        torch.testing.assert_close(_out(sliced, llama), _masked(llama, parse_heads(heads)), atol=1e-5, rtol=1e-5)
    qwen = build_tiny("qwen2", tokenizer, seed=4)  # MQA: one KV head shared by all
    plans = plan_layers(qwen.grid, parse_heads("L0.H1,L0.H3"))
    assert plans[0].layout == "grouped" and plans[0].kv_heads == (0,) and plans[0].q_heads == (0, 2)
    three = parse_heads("L0.H1,L0.H3,L1.H0")
    sliced = slice_model(qwen, plan_layers(qwen.grid, three), three)
    torch.testing.assert_close(_out(sliced, qwen), _masked(qwen, parse_heads("L0.H1,L0.H3,L1.H0")), atol=1e-5,
                               rtol=1e-5)
    with pytest.raises(HeadSpecError, match="every head of layer 0"):
        plan_layers(qwen.grid, parse_heads("L0.H0,L0.H1,L0.H2,L0.H3"))


def test_mapped_layout_drops_every_removed_query_head_and_keeps_the_kv_cache(tokenizer, tmp_path) -> None:
    """One query head out of a group of two: its q rows and o columns go, its KV head and the layer's KV cache
    stay, and the loaded export equals the masked original under every attention function, cache included."""
    llama = build_tiny("llama", tokenizer, seed=4)  # 4 query heads over 2 KV heads
    heads = parse_heads("L1.H1")
    export(llama, heads, verify_task=choice_task(), out=tmp_path / "m")
    model = load(tmp_path / "m", device="cpu").model
    hd, hidden = llama.grid.head_dim, llama.model.config.hidden_size
    before = sum(p.numel() for p in llama.model.parameters())
    assert before - sum(p.numel() for p in model.parameters()) == 2 * hd * hidden  # q rows and o columns
    prompt = torch.tensor([[5, 9, 14, 3, 27]])
    with torch.inference_mode(), ablated(llama, heads):
        want = llama.model.generate(prompt, max_new_tokens=8, do_sample=False, pad_token_id=0)
    for implementation in ("eager", "sdpa"):
        model.set_attn_implementation(implementation)
        torch.testing.assert_close(_out(model, llama), _masked(llama, heads), atol=1e-5, rtol=1e-5)
        with torch.inference_mode():
            out = model.generate(prompt, max_new_tokens=8, do_sample=False, pad_token_id=0,
                                 return_dict_in_generate=True)
        assert torch.equal(out.sequences, want)
        assert [layer.keys.shape[1] for layer in out.past_key_values.layers] == [2, 2]  # KV heads, not repeated


@pytest.mark.slow
def test_remote_code_loads_without_headprune(models, tmp_path) -> None:
    lm = models["llama"]
    heads = parse_heads("L0.H0,L0.H1,L1.H2")
    export(lm, heads, verify_task=choice_task(), out=tmp_path / "m")
    expected = _masked(lm, heads)
    torch.save({"ids": IDS, "mask": MASK, "expected": expected}, tmp_path / "io.pt")
    script = f"""
import sys
sys.modules["headprune"] = None  # any import of headprune now fails
try:
    import headprune
    raise SystemExit("headprune was importable")
except ImportError:
    pass
import torch
from transformers import AutoModelForCausalLM
io = torch.load({str(tmp_path / 'io.pt')!r})
model = AutoModelForCausalLM.from_pretrained({str(tmp_path / 'm')!r}, trust_remote_code=True)
pos = (io["mask"].cumsum(-1) - 1).clamp(min=0)
with torch.no_grad():
    got = model(input_ids=io["ids"], attention_mask=io["mask"], position_ids=pos).logits[io["mask"].bool()]
torch.testing.assert_close(got, io["expected"], atol=1e-5, rtol=1e-5)
print("remote ok", type(model).__module__.rsplit(".", 1)[-1], type(model).__name__)
"""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "remote ok modeling_headprune LlamaForCausalLM" in done.stdout


def test_mean_ablation_folds_into_the_bias_or_is_refused(models, tmp_path) -> None:
    gpt2 = models["gpt2"]
    record = export(gpt2, "L0.H1,L1.H2", ablation="mean", verify_task=choice_task(), out=tmp_path / "mean")
    assert record.verification.logits.max_abs_diff < 1e-4
    with pytest.raises(HeadSpecError, match="no bias"):
        export(models["llama"], "L0.H1", ablation="mean", verify_task=choice_task(), out=tmp_path / "x")
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("scale", [1.001, 1.5])
def test_failed_verification_writes_nothing(models, tmp_path, monkeypatch, scale) -> None:
    break_slicing(monkeypatch, scale)
    with pytest.raises(VerificationError, match="nothing was written"):
        export(models["gpt2"], "L0.H1", verify_task=choice_task(), out=tmp_path / "never")
    assert [p.name for p in tmp_path.iterdir()] == [lock_path(tmp_path / "never").name]  # the lock's empty file


@pytest.mark.parametrize("tolerance", [-1.0, 0.5, float("nan")])
def test_nonsense_tolerances_are_refused(models, tmp_path, tolerance) -> None:
    with pytest.raises(ExportSettingsError, match="tolerance must be between 0 and 0.1"):
        export(models["gpt2"], "L0.H1", verify_task=choice_task(), tolerance=tolerance, out=tmp_path / "never")
    assert list(tmp_path.iterdir()) == []


def test_logit_check_covers_every_verification_example(models, tmp_path) -> None:
    task = choice_task()
    record = export(models["llama"], "L0.H1", verify_task=task, out=tmp_path / "all")
    logits = record.verification.logits
    assert logits.examples == len(task) == 12 and logits.sequences > logits.examples and logits.tokens > 100


def test_record_detects_edits(models, tmp_path) -> None:
    export(models["gpt2"], "L0.H1", verify_task=choice_task(), out=tmp_path / "e")
    assert verify_record(tmp_path / "e").removed_heads == ("L0.H1",)
    card = tmp_path / "e" / "README.md"
    assert card.read_text().startswith("---\n") and "headprune" in card.read_text()
    card.write_text(card.read_text() + "\nedited by hand\n")
    with pytest.raises(ResultFileError, match="README.md was changed"):
        verify_record(tmp_path / "e")


def test_mean_ablation_export_uses_exactly_the_means_find_used(models, tmp_path) -> None:
    from dataclasses import replace

    from headprune.evaluation import Evaluator
    from headprune.search.find import find
    from headprune.search.split import split_task
    from headprune.tasks import load_task, write_jsonl_task
    from helpers import random_choice_task

    gpt2, task = models["gpt2"], random_choice_task(40, seed=3)
    write_jsonl_task(task, tmp_path / "t.jsonl")
    options = dict(discovery=20, heldout=20, ablation="mean", nominees=2, max_heads=2, finalists=1, batch_size=4)
    result = find(gpt2, str(tmp_path / "t.jsonl"), **options)
    # The means find ablated with: its discovery set, its batch size (the verification task would give others).
    discovery = split_task(load_task(str(tmp_path / "t.jsonl")), discovery=20, heldout=20, seed=0).discovery
    means = Evaluator(gpt2, discovery, batch_size=4).head_means()
    assert not torch.equal(means, Evaluator(gpt2, choice_task(), batch_size=4).head_means())
    export(gpt2, result, ablation="mean", allow_unconfirmed=True, verify_task=choice_task(), out=tmp_path / "m")
    pruned = load(tmp_path / "m", device="cpu")
    with ablated(gpt2, result.primary, mode="mean", means=means):
        expected = _out(gpt2.model, gpt2)
    torch.testing.assert_close(_out(pruned.model, pruned), expected, atol=1e-5, rtol=1e-5)
    # Refused, with nothing written: other means, another ablation, a discovery set that cannot be rebuilt.
    for bad, kwargs, fragment in (
            (replace(result, means_digest="sha256:" + "0" * 64), {}, "differ from those find used"),
            (result, {"ablation": "zero"}, "find measured this set with mean ablation"),
            (find(gpt2, task, **options), {}, "cannot be rebuilt")):
        with pytest.raises((ResultFileError, ExportSettingsError), match=fragment):
            export(gpt2, bad, **{"ablation": "mean", **kwargs}, allow_unconfirmed=True, verify_task=choice_task(),
                   out=tmp_path / "never")
    assert not (tmp_path / "never").exists()
