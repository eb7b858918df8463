"""CPU float32 linear layers through oneDNN (``headprune.core.cpu_linear``): the same numbers as torch's own product up
to float rounding, on real (tiny) models of every family, with the ablation's hooks still applied; restored on
exit; a bad setting is a clear error with exit 2."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from headprune.core import cpu_linear
from headprune.errors import SettingsError
from headprune.evaluation import Evaluator
from headprune.heads import Head
from headprune.surgery.ablation import ablated
from helpers import (ALL_FAMILIES, assert_same_results, build_tiny, choice_task, generate_task, prefixed,
                     random_choice_task)
from helpers.cli import invoke


def _logits(lm, batch: torch.Tensor) -> torch.Tensor:  # noqa: ANN001
    with torch.inference_mode():
        out = lm.model(input_ids=batch)
    return (out.logits if hasattr(out, "logits") else out[0]).float()


@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_onednn_linears_give_torch_logits_and_keep_the_ablation(family, tokenizer, monkeypatch) -> None:
    monkeypatch.setenv(cpu_linear.ENV, "onednn")
    monkeypatch.setattr(cpu_linear, "SMALL", 0)  # a tiny model's products are small: route them all the same
    lm = build_tiny(family, tokenizer, seed=3)
    batch = torch.randint(3, 60, (3, 9), generator=torch.Generator().manual_seed(0))
    head = (Head(1, 0),)
    plain, plain_ablated = _logits(lm, batch), None
    with ablated(lm, head):
        plain_ablated = _logits(lm, batch)
    linears = sum(type(m) is nn.Linear for m in lm.model.modules())
    with cpu_linear.fast_linears(lm.model) as routed:
        assert routed == linears > 0
        ours = _logits(lm, batch)
        with ablated(lm, head):
            ours_ablated = _logits(lm, batch)
    assert not any("forward" in vars(m) for m in lm.model.modules())  # every layer is torch's again
    scale = float(plain.abs().max())
    torch.testing.assert_close(ours, plain, rtol=1e-5, atol=1e-5 * scale)
    torch.testing.assert_close(ours_ablated, plain_ablated, rtol=1e-5, atol=1e-5 * scale)
    assert (plain_ablated - plain).abs().max() > 1e3 * (ours - plain).abs().max()  # the head's effect is real


@pytest.mark.parametrize("make_task", [choice_task, generate_task, lambda: prefixed(generate_task()),
                                       lambda: random_choice_task(24)])
def test_evaluator_results_are_the_same_with_either_kernel(make_task, tokenizer, monkeypatch) -> None:
    lm = build_tiny("llama", tokenizer, seed=5)
    runs = {}
    monkeypatch.setattr(cpu_linear, "SMALL", 0)
    for kernel in ("torch", "onednn"):
        monkeypatch.setenv(cpu_linear.ENV, kernel)
        evaluator = Evaluator(lm, make_task(), batch_size=4, reuse_layers=True)
        runs[kernel] = [evaluator.run(), evaluator.run((Head(1, 1),))]
    for plain, ours in zip(runs["torch"], runs["onednn"]):
        assert_same_results(plain, ours)
        assert [r.text for r in plain.results] == [r.text for r in ours.results]


def test_small_products_stay_torchs_and_large_ones_are_onednns(monkeypatch) -> None:
    monkeypatch.setenv(cpu_linear.ENV, "onednn")
    layer = nn.Linear(256, 512)
    small, large = torch.randn(2, 256), torch.randn(64, 256)  # 2 x 256 x 512 and 64 x 256 x 512 multiply-adds
    assert small.numel() * 512 < cpu_linear.SMALL <= large.numel() * 512
    with torch.inference_mode(), cpu_linear.fast_linears(layer) as routed:
        assert routed == 1
        assert torch.equal(layer(small), torch.nn.functional.linear(small, layer.weight, layer.bias))
        ours = layer(large)
        assert torch.equal(ours, cpu_linear.onednn_linear(large, layer.weight, layer.bias))
        torch.testing.assert_close(ours, torch.nn.functional.linear(large, layer.weight, layer.bias))


def test_modules_with_their_own_forward_and_other_dtypes_are_left_alone(tokenizer, monkeypatch) -> None:
    monkeypatch.setenv(cpu_linear.ENV, "onednn")
    lm = build_tiny("llama", tokenizer)
    linears = [m for m in lm.model.modules() if type(m) is nn.Linear]
    hooked, half = linears[0], linears[1]
    hooked.forward = own = lambda x: x  # what accelerate's offload hook does to a module  # noqa: E731
    half.to(torch.bfloat16)
    with cpu_linear.fast_linears(lm.model) as routed:
        assert routed == len(linears) - 2
        assert hooked.forward is own and "forward" not in vars(half)
    assert hooked.forward is own
    with cpu_linear.fast_linears(object()) as routed:  # a runtime's model, not a torch module, is not touched
        assert routed == 0


def test_torch_setting_routes_nothing_and_auto_follows_the_cpu(tokenizer, monkeypatch) -> None:
    lm = build_tiny("llama", tokenizer)
    monkeypatch.setenv(cpu_linear.ENV, "torch")
    with cpu_linear.fast_linears(lm.model) as routed:
        assert routed == 0
    monkeypatch.setenv(cpu_linear.ENV, " AUTO ")
    assert cpu_linear.kernel() == cpu_linear._for_this_cpu() in ("onednn", "torch")  # noqa: SLF001


CPU = "processor\t: {n}\nvendor_id\t: {vendor}\ncpu family\t: 25\nflags\t\t: fpu sse2 avx2 fma{more}\n"


@pytest.mark.parametrize(("vendor", "more", "suits"), [
    ("AuthenticAMD", " avx512f avx512bw avx512_bf16", True),  # Zen 4, Zen 5: MKL runs AVX2 kernels there
    ("AuthenticAMD", " avx512_bf16", False),  # no AVX-512 foundation: MKL's AVX2 is what the CPU has
    ("AuthenticAMD", "", False),
    ("GenuineIntel", " avx512f avx512bw", False),  # MKL at its best
])
def test_onednn_suits_amd_cpus_with_avx512_only(vendor: str, more: str, suits: bool) -> None:
    cpuinfo = "\n".join(CPU.format(n=n, vendor=vendor, more=more) for n in range(2))
    assert cpu_linear.suits_onednn(cpuinfo) is suits
    assert not cpu_linear.suits_onednn("")


def test_bad_setting_is_a_settings_error_and_exit_2(tiny_folder, monkeypatch) -> None:
    monkeypatch.setenv(cpu_linear.ENV, "mkl")
    with pytest.raises(SettingsError, match="HEADPRUNE_CPU_LINEAR='mkl': use one of auto, onednn, torch"):
        cpu_linear.kernel()
    result = invoke("eval", str(tiny_folder), "--task", "sentiment:n=4")
    assert result.exit_code == 2, result.output
    assert "HEADPRUNE_CPU_LINEAR" in result.output and "Traceback" not in result.output
    monkeypatch.setenv(cpu_linear.ENV, "onednn")  # asked for where this torch build has no working oneDNN linear
    monkeypatch.setattr(cpu_linear, "_works", lambda: False)
    with pytest.raises(SettingsError, match="no working oneDNN linear; use auto or torch"):
        cpu_linear.kernel()
    monkeypatch.setenv(cpu_linear.ENV, "auto")
    cpu_linear._for_this_cpu.cache_clear()  # noqa: SLF001 - decided again, without oneDNN
    try:
        assert cpu_linear.kernel() == "torch"  # auto falls back to torch's product
    finally:
        cpu_linear._for_this_cpu.cache_clear()  # noqa: SLF001


def test_a_run_keeps_the_kernel_it_agreed_on_while_entered(tokenizer, monkeypatch, caplog) -> None:
    monkeypatch.setenv(cpu_linear.ENV, "onednn")
    with cpu_linear.agreed("torch", "rank 0") as used:
        assert used == cpu_linear.kernel() == "torch", "the agreed kernel, not this process's setting"
        with cpu_linear.fast_linears(build_tiny("llama", tokenizer).model) as routed:
            assert routed == 0
    assert cpu_linear.kernel() == "onednn", "the setting again once the run is over"
    monkeypatch.setattr(cpu_linear, "_works", lambda: False)  # rank 0 has oneDNN, this process has none
    monkeypatch.setenv(cpu_linear.ENV, "torch")
    with caplog.at_level("WARNING", logger="headprune"), cpu_linear.agreed("onednn", "rank 0") as used:
        assert used == cpu_linear.kernel() == "torch"
    assert "rank 0 used oneDNN" in caplog.text and "uses torch's own product" in caplog.text
