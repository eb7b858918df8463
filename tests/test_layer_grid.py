"""Models whose layers differ: each layer's own heads (:class:`~headprune.heads.LayerHeads`) through naming, ablation,
head means, the attribution screen, the plan and slicing, and a layer without heads left untouched through an export
and its loading. Real tiny models: a GPT-2 whose second layer splits the same width into 2 heads of 32 instead of 4
of 16 (per-layer head counts and sizes), and a Llama whose first layer is declared a layer without heads (what a Mamba
or convolution layer of a hybrid is). The hybrids themselves (attention beside Gated DeltaNet layers, whose heads are
narrower at the output than at the query) are in test_qwen3_5.py.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from helpers import choice_task, generate_task, prefixed, save_folder

from headprune.errors import HeadSpecError
from headprune.evaluation import evaluate
from headprune.exporter import export
from headprune.heads import HeadGrid, LayerHeads, parse_heads
from headprune.loading.adapters.gpt2 import GPT2
from headprune.loading.adapters.llama import LLAMA
from headprune.loading.models import LoadedModel, load, wrap_model
from headprune.search.attribution import estimate_effects
from headprune.surgery.ablation import ablated, collect_head_means
from headprune.surgery.plan import plan_layers
from headprune.surgery.slicing import densify, slice_model
from headprune.testing import family_model

IDS = torch.tensor([[5, 9, 14, 3, 27, 8, 11], [0, 0, 0, 7, 19, 4, 2]])
MASK = torch.tensor([[1, 1, 1, 1, 1, 1, 1], [0, 0, 0, 1, 1, 1, 1]])


def _logits(model) -> torch.Tensor:  # noqa: ANN001
    with torch.no_grad():
        return model(input_ids=IDS, attention_mask=MASK).logits[MASK.bool()]


def _two_sizes(tokenizer) -> LoadedModel:  # noqa: ANN001
    """A GPT-2 whose layer 1 reads its 64 dimensions as 2 heads of 32 (layer 0: 4 of 16), with an adapter saying so."""
    lm = wrap_model(family_model("gpt2", len(tokenizer), seed=3), tokenizer, name="two-sizes")
    attention = lm.model.transformer.h[1].attn
    attention.num_heads, attention.head_dim, attention.scaling = 2, 32, 32 ** -0.5
    adapter = replace(GPT2, layer_heads=lambda config, layer, heads: LayerHeads(2, 2, 32, 32) if layer else heads)
    return replace(lm, adapter=adapter, grid=adapter.grid(lm.model.config))


def test_a_grid_names_and_checks_heads_by_each_layers_own_count() -> None:
    grid = HeadGrid((LayerHeads(0, 0, 0, 0, "conv"), LayerHeads(4, 2, 8, 8),
                     LayerHeads(8, 2, 4, 6, "linear_attention")))
    assert grid.total == 12 and [str(h) for h in grid.all_heads()][:5] == ["L1.H0", "L1.H1", "L1.H2", "L1.H3", "L2.H0"]
    assert grid.check(parse_heads("L2.H7,L1.H3")) == parse_heads("L1.H3,L2.H7")
    with pytest.raises(HeadSpecError, match=r"layer 1 has 4 heads \(H0..H3\)"):
        grid.check(parse_heads("L1.H4"))
    with pytest.raises(HeadSpecError, match=r"layer 2 has 8 linear_attention heads \(H0..H7\)"):
        grid.check(parse_heads("L2.H8"))
    with pytest.raises(HeadSpecError, match="layer 0 is a conv layer, without heads headprune removes"):
        grid.check(parse_heads("L0.H0"))
    assert grid.describe() == "3 layers: 1 conv without heads, 1 attention x 4 heads, 1 linear_attention x 8 heads"
    assert grid.widest == (8, 8) and grid.cache_width() == 2 * (8 + 8) and grid.cache_width([0, 1, 2]) == 16
    with pytest.raises(ValueError, match=r"read grid.layers\[i\].heads"):
        grid.num_heads  # noqa: B018 - one count for every layer: only where they have one
    uniform = HeadGrid.uniform(2, 4, 2, 8)
    assert uniform.is_uniform and uniform.num_heads == 4 and uniform.describe() == "2 layers x 4 heads"


def test_per_layer_head_sizes_through_ablation_means_attribution_and_slicing(tokenizer) -> None:
    lm = _two_sizes(tokenizer)
    assert [(layer.heads, layer.head_dim) for layer in lm.grid.layers] == [(4, 16), (2, 32)]
    with pytest.raises(HeadSpecError, match=r"layer 1 has 2 heads \(H0..H1\)"):
        evaluate(lm, choice_task(), heads=parse_heads("L1.H2"))
    heads = parse_heads("L0.H2,L1.H1")
    # The reference: layer 1's second 32 columns of c_proj's input silenced by hand (its head 1, as the layer reads it).
    columns = {0: slice(32, 48), 1: slice(32, 64)}
    hooks = [lm.model.transformer.h[layer].attn.c_proj.register_forward_pre_hook(
        lambda module, args, cut=cut: (args[0].index_fill(-1, torch.arange(cut.start, cut.stop), 0.0),))
        for layer, cut in columns.items()]
    try:
        want = _logits(lm.model)
    finally:
        for hook in hooks:
            hook.remove()
    assert float((want - _logits(lm.model)).abs().max()) > 1e-4  # the heads matter
    with ablated(lm, heads):
        torch.testing.assert_close(_logits(lm.model), want, atol=0, rtol=0)
    sliced = slice_model(lm, plan_layers(lm.grid, heads), heads)
    assert sliced.transformer.h[1].attn.c_proj.weight.shape == (32, 64)  # one head of 32 left: Conv1D (in, out)
    assert sliced.config.headprune["grid"][1] == dict(heads=2, kv_heads=2, head_dim=32, out_dim=32,
                                                      kind="attention", kv_map=True, kv_source=None)
    torch.testing.assert_close(_logits(sliced), want, atol=1e-5, rtol=1e-5)
    batches = [(IDS, MASK, {})]
    means = collect_head_means(lm, batches)  # (layers, most heads, widest head), a narrower layer padded with zeros
    assert means.shape == (2, 4, 32) and torch.all(means[0, :, 16:] == 0) and torch.all(means[1, 2:] == 0)
    assert torch.any(means[1, :2] != 0)
    effects = estimate_effects(_evaluator(lm))
    assert sorted(map(str, effects)) == sorted(map(str, lm.grid.all_heads()))


def _evaluator(lm: LoadedModel):  # noqa: ANN202
    from headprune.evaluation import Evaluator

    return Evaluator(lm, choice_task())


def test_a_layer_without_heads_is_left_untouched_through_an_export(tokenizer, tmp_path) -> None:
    """Layer 0 declared a layer without heads (as a hybrid's Mamba or convolution layer): its heads cannot be named,
    it is never changed, and the sliced export, whose record gives each layer's heads, loads in headprune and in stock
    transformers with remote code as the masked original."""
    import transformers

    model = family_model("llama", len(tokenizer), seed=4)
    folder = save_folder(model, tokenizer, tmp_path / "m")
    adapter = replace(LLAMA, layer_kinds=lambda config: ["conv"] + ["attention"] * (config.num_hidden_layers - 1))
    lm = wrap_model(model, tokenizer, name="hybrid", folder=folder)
    lm = replace(lm, adapter=adapter, grid=adapter.grid(model.config))
    assert lm.grid.describe() == "2 layers: 1 conv without heads, 1 attention x 4 heads"
    with pytest.raises(HeadSpecError, match="layer 0 is a conv layer"):
        evaluate(lm, choice_task(), heads=parse_heads("L0.H1"))
    heads = parse_heads("L1.H0,L1.H1")
    with ablated(lm, heads):
        want = _logits(lm.model)
    record = export(lm, heads, layout="sliced", verify_task=choice_task(), out=tmp_path / "s")
    assert [p.layout for p in record.layers] == ["unchanged", "grouped"]
    stock = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "s", trust_remote_code=True)
    for loaded in (load(tmp_path / "s", device="cpu").model, stock):
        torch.testing.assert_close(_logits(loaded), want, atol=1e-5, rtol=1e-5)
    saved, original = stock.state_dict(), model.state_dict()
    assert all(torch.equal(saved[n], t) for n, t in original.items() if n.startswith("model.layers.0."))
    assert saved["model.layers.1.self_attn.q_proj.weight"].shape[0] == 2 * 16


def test_a_state_beside_every_attention_layer_makes_the_grid_recurrent(tokenizer) -> None:
    """Falcon-H1's layers are all attention, each with a Mamba2 mixer beside it (Adapter.stateful): the grid is
    recurrent, so answers are decoded plainly (a shared prompt prefix fails on its Mamba2 cache), the same as the
    model with the heads' columns zeroed in its weights with a few-shot prefix every prompt shares."""
    import transformers
    from packaging.version import Version

    if Version(transformers.__version__) < Version("5.25"):  # pyproject's floor, 5.17: its own generate fails here
        pytest.skip("transformers < 5.25: FalconH1ForCausalLM.generate fails on these prompts inside transformers "
                    "(its Mamba2 chunk padding, 104 against 102 positions), with or without heads removed")
    lm = wrap_model(family_model("falcon_h1", len(tokenizer), seed=2), tokenizer, name="tiny-falcon_h1")
    assert {layer.kind for layer in lm.grid.layers} == {"attention"} and lm.grid.recurrent
    heads = parse_heads("L0.H1,L1.H0,L1.H1")
    task = prefixed(generate_task())
    hooked = evaluate(lm, task, heads=heads)
    dense = evaluate(replace(lm, model=densify(lm, heads)), task)
    assert hooked.texts == dense.texts and hooked.texts != evaluate(lm, task).texts
    torch.testing.assert_close(torch.tensor(hooked.margins), torch.tensor(dense.margins), atol=1e-4, rtol=0)


def test_falcon_h1_generation_is_refused_in_one_line_where_transformers_own_generate_fails(tokenizer, tmp_path,
                                                                                            monkeypatch) -> None:
    """Below transformers 5.25 (pyproject's floor, 5.17, where the floors' run meets it for real), FalconH1's own
    generate fails inside transformers: a generate task is refused in one line and exit 2, not an internal error;
    a choice task still runs. On a newer transformers the rule is checked with an older version number."""
    import transformers
    from helpers.cli import invoke
    from packaging.version import Version

    from headprune.tasks import write_jsonl_task

    if Version(transformers.__version__) >= Version("5.25"):
        monkeypatch.setattr(transformers, "__version__", "5.17.0")
    save_folder(family_model("falcon_h1", len(tokenizer), seed=2), tokenizer, tmp_path / "m")
    for name, task in (("generate", prefixed(generate_task())), ("choice", choice_task())):
        write_jsonl_task(task, tmp_path / f"{name}.jsonl")
    refused = invoke("eval", str(tmp_path / "m"), "--task", str(tmp_path / "generate.jsonl"))
    assert refused.exit_code == 2, refused.output
    assert "falcon_h1: generating needs transformers >= 5.25" in refused.stderr.splitlines()[-1], refused.stderr
    assert "Traceback" not in refused.output and "internal error" not in refused.output
    assert invoke("eval", str(tmp_path / "m"), "--task", str(tmp_path / "choice.jsonl")).exit_code == 0
