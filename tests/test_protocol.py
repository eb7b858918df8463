"""``find --protocol cel``: the research protocol as a preset, run at a tiny size on the CPU."""

from __future__ import annotations

import math

import pytest

from helpers import build_tiny, random_choice_task
from helpers.cli import invoke
from headprune.errors import InternalCheckError, SearchSettingsError
from headprune.evaluation import Evaluator
from headprune.search.find import find


@pytest.fixture(scope="module")
def tiny_llama(tokenizer):  # noqa: ANN001, ANN201
    return build_tiny("llama", tokenizer, seed=3)  # 8 heads: the 10 nominees are every head


def test_the_protocol_runs_the_research_search_and_reconfirms_it(tiny_llama) -> None:
    result = find(tiny_llama, random_choice_task(100, seed=5), discovery=40, heldout=40, protocol="cel",
                  batch_size=40)
    settings = result.settings
    assert (settings.protocol, settings.screen, settings.nominees, settings.max_heads, settings.extend,
            settings.finalists) == ("cel", "exact", 8, 3, 0, 10)  # nominees: all 8 heads
    assert len(result.screen) == 8  # every query head alone, exactly; all of them nominees
    joint = [s for s in result.sets if len(s.heads) > 1]
    assert len(joint) == math.comb(8, 2) + math.comb(8, 3) and max(len(s.heads) for s in joint) == 3
    assert result.reconfirmed >= 10 and result.timings["reconfirm"] > 0
    assert len(result.finalists) == 10 and result.selection is not None  # headprune's selection on top


def test_the_reconfirmation_stops_a_run_whose_numbers_do_not_come_back(tiny_llama, monkeypatch) -> None:
    """A fresh pass that answers one example differently from the pass the search used is a failed re-confirmation
    (exit 3 from the command line), not a result."""
    real_run = Evaluator.run

    def drifting(self, heads=(), **kwargs):  # noqa: ANN001, ANN003, ANN202
        result = real_run(self, heads, **kwargs)
        if heads and not self.layers.active:  # only the re-confirmation's fresh evaluator runs without the cache
            from dataclasses import replace

            first = result.results[0]
            flipped = replace(first, correct=not first.correct, margin=-first.margin)
            return replace(result, results=(flipped, *result.results[1:]))
        return result

    monkeypatch.setattr(Evaluator, "run", drifting)
    with pytest.raises(InternalCheckError, match="re-confirmation: .* run again on discovery"):
        find(tiny_llama, random_choice_task(60, seed=5), discovery=24, heldout=24, protocol="cel", batch_size=24)


def test_the_protocol_refuses_a_search_option_against_it(tiny_llama) -> None:
    with pytest.raises(SearchSettingsError, match="protocol cel runs nominees 10"):
        find(tiny_llama, random_choice_task(60), discovery=20, heldout=20, protocol="cel", nominees=4)


@pytest.mark.parametrize("args", [["--nominees", "4"], ["--extend", "1"], ["--screen", "attribution"]])
def test_the_command_line_refuses_an_option_against_the_protocol(tiny_folder, args) -> None:  # noqa: ANN001
    done = invoke("find", str(tiny_folder), "--task", "sentiment:n=40", "--discovery", "20", "--heldout", "20",
                  "--protocol", "cel", *args, catch_exceptions=True)
    assert done.exit_code == 2, done.output
    assert "protocol cel runs" in done.output and len(done.output.strip().splitlines()) == 1
    assert "Traceback" not in done.output


def test_an_unknown_protocol_is_one_line() -> None:
    done = invoke("find", "smollm2-135m", "--task", "arithmetic", "--protocol", "paper", catch_exceptions=True)
    assert done.exit_code == 2 and "'paper' is not 'cel'" in done.output
    assert len(done.output.strip().splitlines()) == 1
