"""The coverage matrix: a tiny random model of every supported model type (built from transformers' own config
class, as transformers tests its models) through evaluation with heads removed, find, the sliced and dense exports,
loading them (headprune and stock transformers), compared with the masked original by their logits; MoE routers and
experts byte for byte untouched. docs/models.md's table of families and formats is rendered from the same registries.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from helpers import SMALL, choice_task, matrix_heads, save_folder
from helpers.cli import invoke

from headprune.evaluation import evaluate
from headprune.exporter import export, verify_record
from headprune.exporter.onnx.export import GENAI_TYPES
from headprune.exporter.runtimes import empty_past
from headprune.heads import parse_heads
from headprune.loading.adapters import FAMILIES, adapter_for, supported_model_types
from headprune.loading.models import load, load_model, wrap_model
from headprune.search.find import find
from headprune.surgery.ablation import ablated
from headprune.testing import family_model, family_models, random_choice_task

HEADS = "L0.H1,L1.H0,L1.H1"  # one head of a group in layer 0; a whole key/value group in layer 1 (matrix_heads:
# the same in the first two layers with heads, a hybrid's others skipped)
IDS = torch.tensor([[5, 9, 14, 3, 27, 8, 11], [0, 0, 0, 7, 19, 4, 2]])
MASK = torch.tensor([[1, 1, 1, 1, 1, 1, 1], [0, 0, 0, 1, 1, 1, 1]])
DOCS = Path(__file__).resolve().parent.parent / "docs" / "models.md"


def _logits(model, encoder: bool) -> torch.Tensor:  # noqa: ANN001
    extra = {} if encoder else {"position_ids": (MASK.cumsum(-1) - 1).clamp(min=0)}
    with torch.no_grad():
        return model(input_ids=IDS, attention_mask=MASK, **extra).logits[MASK.bool()]


def test_every_supported_model_type_is_in_the_matrix() -> None:
    assert sorted(family_models()) == supported_model_types()


@pytest.mark.parametrize("model_type", sorted(family_models()))
def test_family_through_eval_export_and_load(model_type, tokenizer, tmp_path) -> None:
    import transformers

    model = family_model(model_type, len(tokenizer), seed=2)
    assert model.config.model_type == model_type
    folder = save_folder(model, tokenizer, tmp_path / "m")
    lm = load_model(str(folder), device="cpu")
    names = matrix_heads(lm.grid)
    heads = parse_heads(names)
    with ablated(lm, heads):
        want = _logits(lm.model, lm.is_encoder)
    assert float((want - _logits(lm.model, lm.is_encoder)).abs().max()) > 1e-6  # the heads matter
    task = choice_task()
    removed = evaluate(lm, task, heads=heads)
    assert (removed.margins != evaluate(lm, task).margins).any()
    # find runs on the family (its layer cache, its hooks); the exact screen, which every model kind takes
    found = find(lm, random_choice_task(40), **SMALL, screen="exact", extend=0)
    assert found.finalists and found.model.model_type == model_type
    original = {name: t.clone() for name, t in lm.model.state_dict().items()}
    auto = getattr(transformers, lm.model_class.auto_class)
    layouts = ("dense",) if lm.adapter.dense_only else ("sliced", "dense")
    for layout in layouts:
        out = tmp_path / layout
        record = export(lm, heads, layout=layout, verify_task=task, out=out)
        assert record.verification.task.disagreements == 0 and record.verification.tensors.ok
        verify_record(out)
        stock = auto.from_pretrained(out, trust_remote_code=layout == "sliced")
        for loaded in (load(out, device="cpu").model, stock):
            torch.testing.assert_close(_logits(loaded, lm.is_encoder), want, atol=1e-5, rtol=1e-5)
        saved = stock.state_dict()
        # Only the heads' modules change (attention, a Gated DeltaNet): every router, expert, MLP, norm and embedding
        # tensor is the original's exactly.
        mixers = {f".{m.attention_path}." for m in (lm.adapter.mixer("attention"), *lm.adapter.mixers)}
        untouched = [n for n in original if not any(m in n for m in mixers) and ".attn." not in n
                     and ".attention." not in n and "vision_tower" not in n]  # (a vision tower's own attention: checked
        # in the image test)
        assert untouched and all(torch.equal(saved[n], original[n]) for n in untouched if n in saved)
        if layout == "sliced":
            assert record.parameters.after < record.parameters.before
    if lm.adapter.dense_only:
        result = invoke("export", str(folder), "--heads", names, "--out", str(tmp_path / "s"), "--verify-task",
                        str(_task_file(tmp_path)))
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert result.exit_code == 2 and len(lines) == 1 and "--layout sliced" in lines[0], result.output
        assert "--layout dense" in lines[0] and not (tmp_path / "s").exists()


def _task_file(tmp_path: Path) -> Path:
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"prompt": "the film is", "choices": [" a", " b"], "answer": 0}) + "\n")
    return path


def onnx_matrix() -> list[str]:
    """One model type of each adapter whose ONNX export the other tests do not run (test_export.py's and
    test_encoders.py's cover Llama's, GPT-2's, GPT-NeoX's and the encoders'): the choices below, and for an adapter
    none of them has, its first model type."""
    chosen = {FAMILIES[t].adapter.family: t for t in ("granite", "mixtral", "gpt_oss", "phi3", "cohere", "olmoe",
                                                       "gemma3", "llava", "qwen2_vl")}
    for model_type, family in sorted(FAMILIES.items()):
        others = {*chosen, "gpt2", "gpt_neox", "bert", "deberta", "modernbert"}
        if family.adapter.family not in others and not family.onnx_refused:  # (refused: test_qwen3_5.py)
            chosen[family.adapter.family] = model_type
    return sorted(chosen.values())


# One model of each adapter (MoE layers are exported through transformers' batched_mm experts), run in onnxruntime
# against the masked original.
@pytest.mark.slow  # dynamo's export takes about 40 s a model on one core
@pytest.mark.parametrize("model_type", onnx_matrix())
def test_family_onnx_equals_the_masked_original(model_type, tokenizer, tmp_path) -> None:
    import numpy as np
    from helpers.extras import needs

    needs("onnx", "onnxruntime", "onnxscript", extra="onnx")
    import onnxruntime

    lm = wrap_model(family_model(model_type, len(tokenizer), seed=2), tokenizer, name=f"tiny-{model_type}")
    heads = parse_heads(matrix_heads(lm.grid))
    layout = "dense" if lm.adapter.dense_only else "sliced"
    experts = getattr(lm.model.config, "_experts_implementation", None)
    record = export(lm, heads, format="onnx", layout=layout, verify_task=choice_task(), out=tmp_path / "o")
    assert record.verification.task.measured_on == "onnxruntime" and record.verification.task.disagreements == 0
    session = onnxruntime.InferenceSession(str(tmp_path / "o" / "model.onnx"))
    feeds = {"input_ids": IDS.numpy(), "attention_mask": MASK.numpy(),
             "position_ids": (MASK.cumsum(-1) - 1).clamp(min=0).numpy()}
    for past in session.get_inputs()[3:]:  # a decoder with a key/value cache (GenAI's families): an empty past
        feeds[past.name] = empty_past(past.shape, IDS.shape[0])
    got = torch.from_numpy(np.asarray(session.run(["logits"], feeds)[0]))[MASK.bool()]
    with ablated(lm, heads):
        torch.testing.assert_close(got, _logits(lm.model, False), atol=1e-4, rtol=1e-4)
    assert getattr(lm.model.config, "_experts_implementation", None) == experts  # the original is left as it was
    if FAMILIES[model_type].onnx_tokens:  # a graph traced over a scan's chunks takes rows of other lengths too
        ids = (torch.arange(78).reshape(2, 39) * 7 + 5) % 100
        feeds = {"input_ids": ids.numpy(), "attention_mask": torch.ones_like(ids).numpy(),
                 "position_ids": torch.arange(39).repeat(2, 1).numpy(),
                 **{past.name: empty_past(past.shape, 2) for past in session.get_inputs()[3:]}}
        got = torch.from_numpy(np.asarray(session.run(["logits"], feeds)[0]))
        with ablated(lm, heads), torch.no_grad():
            torch.testing.assert_close(got, lm.model(input_ids=ids).logits.float(), atol=1e-4, rtol=1e-4)


# Every family ONNX Runtime GenAI generates with beyond llama/mistral/qwen2 (tested in test_export.py): the export's
# gate runs GenAI itself, decoding task prompts greedily against the masked original.
@pytest.mark.slow  # about 50 s a model on one core
@pytest.mark.parametrize("model_type", sorted(set(GENAI_TYPES) - {"llama", "mistral", "qwen2"}))
def test_family_onnx_decoder_generates_in_genai(model_type, tokenizer, tmp_path) -> None:
    from helpers import generate_task
    from helpers.extras import needs

    needs("onnx", "onnxruntime", "onnxscript", "onnxruntime_genai", extra="onnx")
    lm = wrap_model(family_model(model_type, len(tokenizer), seed=2), tokenizer, name=f"tiny-{model_type}")
    record = export(lm, matrix_heads(lm.grid), format="onnx", verify_task=generate_task(), out=tmp_path / "o")
    checked = record.verification.runtime
    assert checked.done and checked.runtime.startswith("ONNX Runtime GenAI") and checked.tokens > 0
    assert checked.mismatches == 0 and checked.identical + checked.ties == checked.prompts
    genai = json.loads((tmp_path / "o" / "genai_config.json").read_text())
    assert genai["model"]["type"] == GENAI_TYPES[model_type]


@pytest.mark.slow  # an ONNX export with a key/value cache and GenAI's gate, about 15 s on one core
def test_gpt2_in_genai_keeps_one_head_count_a_layer(tokenizer, tmp_path) -> None:
    """GenAI runs a gpt2 graph's cache as one tensor a layer (keys and values stacked) with one head count for every
    layer: layers left with different counts are written dense, and the record says why; GenAI's gate still ran."""
    from helpers import generate_task
    from helpers.extras import needs

    needs("onnx", "onnxruntime", "onnxscript", "onnxruntime_genai", extra="onnx")
    lm = wrap_model(family_model("gpt2", len(tokenizer), seed=2), tokenizer, name="tiny-gpt2")
    record = export(lm, "L0.H1,L1.H0,L1.H2", format="onnx", verify_task=generate_task(), out=tmp_path / "o")
    assert record.layout == "dense" and "one tensor a layer" in record.layout_note
    assert record.verification.runtime.done and record.verification.runtime.mismatches == 0
    genai = json.loads((tmp_path / "o" / "genai_config.json").read_text())["model"]["decoder"]
    assert genai["inputs"]["past_names"] == "past_%d" and genai["outputs"]["present_names"] == "present_%d"


def test_moe_experts_and_router_are_kept_while_heads_go(tokenizer, tmp_path) -> None:
    """Mixtral: the sliced export holds every expert and the router as they were, and its attention is smaller."""
    import transformers

    lm = wrap_model(family_model("mixtral", len(tokenizer), seed=4), tokenizer, name="tiny-mixtral")
    export(lm, HEADS, layout="sliced", verify_task=choice_task(), out=tmp_path / "s")
    saved = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "s", trust_remote_code=True).state_dict()
    original = lm.model.state_dict()
    moe = [n for n in original if ".mlp." in n]
    assert any("experts" in n for n in moe) and any("gate" in n for n in moe)
    assert all(torch.equal(saved[n], original[n]) for n in moe)
    assert saved["model.layers.1.self_attn.q_proj.weight"].shape[0] == 2 * lm.grid.head_dim


@pytest.mark.parametrize(("model_type", "path", "rows"), [
    ("gpt_oss", "self_attn.sinks", "q"), ("cohere", "self_attn.q_norm.weight", "q"),
    ("cohere", "self_attn.k_norm.weight", "kv")])
def test_per_head_parameters_are_sliced_with_their_heads(model_type, path, rows, tokenizer, tmp_path) -> None:
    """GPT-OSS's attention sinks and Command R+'s per-head q/k norm weights keep exactly the kept heads' rows."""
    import transformers

    from headprune.loading.adapters.base import get_path

    lm = wrap_model(family_model(model_type, len(tokenizer), seed=5), tokenizer, name=f"tiny-{model_type}")
    with torch.no_grad():  # distinct rows, so a wrong row is seen
        for layer in lm.adapter.layers(lm.model):
            get_path(layer, path).copy_(torch.randn_like(get_path(layer, path)))
    record = export(lm, HEADS, layout="sliced", verify_task=choice_task(), out=tmp_path / "s")
    stock = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "s", trust_remote_code=True)
    for plan in record.layers:
        kept = plan.q_heads if rows == "q" else plan.kv_heads
        want = get_path(lm.adapter.layers(lm.model)[plan.layer], path)[list(kept)]
        assert torch.equal(get_path(lm.adapter.layers(stock)[plan.layer], path), want)
    assert any(len(p.q_heads) < lm.grid.num_heads for p in record.layers)


@pytest.mark.parametrize(("config_class", "words"), [
    ("FalconConfig", "Falcon"), ("StableLmConfig", "StableLM"), ("T5Config", "encoder-decoder"),
    ("DeepseekV4Config", "DeepSeek-V4's attention")])
def test_known_unsupported_families_say_why_and_what_works(config_class, words, tokenizer, tmp_path) -> None:
    import transformers

    with pytest.raises(Exception, match=words) as caught:
        adapter_for(getattr(transformers, config_class)())
    assert "supported model types: " in str(caught.value) and "phi3" in str(caught.value)


def _image_inputs(config) -> dict:  # noqa: ANN001
    """Text around one image's 4 tokens, and the image (seeded random pixels), as each family's processor gives them:
    Gemma 3 and LLaVA a 28 x 28 picture; Mistral 3 and Llama 4 a 56 x 56 one, whose 4 x 4 patches Pixtral's merger
    (told each image's size) and Llama 4's pixel shuffle make 4 tokens; Gemma 4 its 4 x 4 patches flattened with their
    positions; Qwen2-VL and Qwen3.5 its 14 x 14 patches flattened (2 frames x 3 channels), a 4 x 4 grid its merger
    reads 2 x 2, and the image tokens' type for M-RoPE's positions."""
    image = config.image_token_id
    generator = torch.Generator().manual_seed(0)
    if config.model_type in ("qwen2_vl", "qwen2_5_vl", "qwen3_5", "qwen3_5_moe"):
        ids = torch.tensor([[5, 9, config.vision_start_token_id] + [image] * 4 + [config.vision_end_token_id, 14, 3]])
        return dict(input_ids=ids, pixel_values=torch.randn(16, 3 * 2 * 14 * 14, generator=generator),
                    image_grid_thw=torch.tensor([[1, 4, 4]]), mm_token_type_ids=(ids == image).int())
    ids = torch.tensor([[5, 9] + [image] * 4 + [14, 3, 27]])
    if config.model_type == "gemma4":  # 4 x 4 patches of 4 x 4 pixels and their positions, pooled 2 x 2
        grid = torch.stack(torch.meshgrid(torch.arange(4), torch.arange(4), indexing="ij"), -1).reshape(1, 16, 2)
        return dict(input_ids=ids, pixel_values=torch.rand(1, 16, 3 * 4 * 4, generator=generator),
                    image_position_ids=grid, mm_token_type_ids=(ids == image).long())
    size = config.vision_config.image_size
    inputs = dict(input_ids=ids, pixel_values=torch.randn(1, 3, size, size, generator=generator))
    if config.model_type == "mistral3":
        return dict(inputs, image_sizes=torch.tensor([[size, size]]))
    return dict(inputs, token_type_ids=(ids == image).long()) if config.model_type == "gemma3" else inputs


def _load_as_hinted(output: str, out: Path):  # noqa: ANN202
    """The export loaded by stock transformers as the CLI's hint says (``load with ...``): its auto class, with
    remote code where the hint passes it."""
    import re

    import transformers

    hint = re.search(r"load with (.*)\)$", output, re.MULTILINE)
    assert hint, output
    auto = re.search(r"(AutoModel\w*)\.from_pretrained", hint.group(1))
    assert auto, hint.group(1)
    trust = "trust_remote_code=True" in hint.group(1)
    return getattr(transformers, auto.group(1)).from_pretrained(out, trust_remote_code=trust).eval()


# Vision-language checkpoints as shipped (Gemma 3 4B-27B, Gemma 4 with its audio tower, LLaVA around each language
# model it takes, Qwen2-VL, Qwen2.5-VL, Qwen3.5 dense and MoE, Mistral 3 around each, Llama 4): their language model's
# heads are removed, the towers and projector kept byte for byte.
@pytest.mark.parametrize(("model_type", "text_type"), [
    ("gemma3", None), ("gemma4", None), ("llava", "llama"), ("llava", "mistral"), ("llava", "qwen2"),
    ("qwen2_vl", None), ("qwen2_5_vl", None), ("qwen3_5", None), ("qwen3_5_moe", None), ("mistral3", "mistral"),
    ("mistral3", "ministral3"), ("mistral3", "mistral4"), ("llama4", None)])
def test_vision_language_export_reads_an_image_as_the_masked_original(model_type, text_type, tokenizer,
                                                                      tmp_path) -> None:
    """Both layouts, exported by the CLI and loaded by headprune and as the CLI's hint says, give the masked
    original's logits on text and on an image that reaches them through the vision tower."""
    changes = {"text_config": dict(num_key_value_heads=2, model_type=text_type)} if text_type else {}
    latent = text_type == "mistral4"  # Mistral Small 4 as shipped: the mistral4 family's tiny latent attention
    if latent:
        changes = {"text_config": family_model(text_type, len(tokenizer)).config.to_dict()}
    vlm = family_model(model_type, len(tokenizer), seed=1, **changes)
    folder = save_folder(vlm, tokenizer, tmp_path / "vlm")
    lm = load_model(str(folder), device="cpu")
    adapters = {"qwen2_5_vl": "qwen2_vl", "qwen3_5": "qwen3_5_vl", "qwen3_5_moe": "qwen3_5_vl"}
    assert lm.adapter.family == ("mistral3_latent" if latent else adapters.get(model_type, model_type))
    assert lm.task_head == "causal-lm"
    layer = lm.grid.layers[0 if model_type == "gemma4" else 1]  # (Gemma 4's layer 1 attends over one KV head)
    assert (layer.heads, layer.kv_heads) == (4, 4 if latent else 2)
    heads = parse_heads(HEADS)
    image = _image_inputs(vlm.config)
    text_only = dict(input_ids=image["input_ids"].masked_fill(image["input_ids"] == vlm.config.image_token_id, 7))
    with torch.no_grad(), ablated(lm, heads):
        want_image, want_text = lm.model(**image).logits, lm.model(**text_only).logits
    assert float((want_image - want_text).abs().max()) > 1e-3  # the image reaches the logits
    original = lm.model.state_dict()
    vision = [n for n in original if "language_model" not in n and not n.startswith("lm_head")]
    assert any("attn" in n or "attention" in n for n in vision)  # the tower's own attention, never sliced
    for layout in ("sliced", "dense"):
        out = tmp_path / layout
        result = invoke("export", str(folder), "--heads", HEADS, "--layout", layout, "--out", str(out),
                        "--verify-task", str(_task_file(tmp_path)))
        assert result.exit_code == 0, result.output
        for loaded in (load(out, device="cpu").model, _load_as_hinted(result.output, out)):
            assert type(loaded).__name__ == type(vlm).__name__
            with torch.no_grad():
                torch.testing.assert_close(loaded(**image).logits, want_image, atol=1e-5, rtol=1e-5)
                torch.testing.assert_close(loaded(**text_only).logits, want_text, atol=1e-5, rtol=1e-5)
            saved = loaded.state_dict()
            assert all(saved[n].dtype == original[n].dtype and torch.equal(saved[n], original[n]) for n in vision)
        query = "q_b_proj" if latent else "q_proj"  # (Qwen3.5's q_proj: 2 blocks a head)
        rows = [getattr(lm.adapter.attention(m, 1), query).weight.shape[0] for m in (loaded, lm.model)]
        assert rows[0] == (2 if layout == "sliced" else 4) * rows[1] // 4


def test_llava_around_a_language_model_it_does_not_take_is_refused_in_one_line(tokenizer, tmp_path) -> None:
    """LLaVA wraps a language model of any family: one headprune does not slice as Llama is refused, naming those it
    takes (and, where headprune supports that family alone, the recipe's section)."""
    import transformers

    for text, alone in (("gemma2", True), ("phi", False)):
        config = transformers.LlavaConfig(text_config={"model_type": text})
        with pytest.raises(Exception, match=r"'llava' \(LlavaConfig\) with a '" + text + "' language model is not "
                                            r"supported: headprune prunes llava checkpoints whose language model is "
                                            r"llama, mistral, qwen2") as caught:
            adapter_for(config)
        assert ("its language model alone is supported" in str(caught.value)) == alone
    vlm = family_model("llava", len(tokenizer), seed=1, text_config=dict(model_type="gemma2", head_dim=16))
    save_folder(vlm, tokenizer, tmp_path / "vlm")
    result = invoke("eval", str(tmp_path / "vlm"), "--task", str(_task_file(tmp_path)))
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and "'gemma2' language model" in lines[0], result.output


def test_other_vision_language_checkpoints_say_which_are_taken_whole() -> None:
    import transformers

    with pytest.raises(Exception, match=r"'llava_next' \(LlavaNextConfig\) is a vision-language checkpoint headprune "
                                        r"does not take whole \(it does: gemma3, gemma4, llama4, llava, mistral3, "
                                        r"qwen2_5_vl, qwen2_vl, qwen3_5, qwen3_5_moe\); its language model \(llama\) is "
                                        r"supported"):
        adapter_for(transformers.LlavaNextConfig())
    with pytest.raises(Exception, match=r"\(cohere2\) is not supported either; supported model types"):
        adapter_for(transformers.AyaVisionConfig())


def test_the_documented_recipe_takes_a_language_model_out(tokenizer, tmp_path) -> None:
    """docs/models.md's recipe for a vision-language checkpoint headprune does not take whole (LLaVA-NeXT), run
    here: the folder it writes loads in headprune, with the full model's logits on text."""
    import transformers

    text = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, vocab_size=len(tokenizer), max_position_embeddings=256)
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, image_size=28,
                  patch_size=14, projection_dim=32)
    torch.manual_seed(1)
    config = transformers.LlavaNextConfig(text_config=transformers.MistralConfig(**text),
                                          vision_config=transformers.CLIPVisionConfig(**vision),
                                          image_token_index=len(tokenizer) - 1)
    save_folder(transformers.LlavaNextForConditionalGeneration(config).eval(), tokenizer, tmp_path / "vlm")
    result = invoke("eval", str(tmp_path / "vlm"), "--task", str(_task_file(tmp_path)))
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and "(mistral) is supported" in lines[0], result.output
    # docs/models.md's recipe, as written there.
    vlm = transformers.AutoModelForImageTextToText.from_pretrained(tmp_path / "vlm")
    text = transformers.AutoModelForCausalLM.from_config(vlm.config.text_config)
    text.model.load_state_dict(vlm.model.language_model.state_dict())
    text.lm_head.load_state_dict(vlm.lm_head.state_dict())
    save_folder(text, tokenizer, tmp_path / "text")
    assert "text.model.load_state_dict(vlm.model.language_model.state_dict())" in DOCS.read_text()
    lm = load_model(str(tmp_path / "text"), device="cpu")
    torch.testing.assert_close(_logits(lm.model, False), _logits(vlm.eval(), False), atol=1e-5, rtol=1e-5)


def test_docs_table_is_the_registry() -> None:
    from scripts.family_table import DOC as TABLE_DOC
    from scripts.family_table import family_table, replaced

    text = TABLE_DOC.read_text(encoding="utf-8")
    assert replaced(text, family_table()) == text, "run python -m scripts.family_table --update"
