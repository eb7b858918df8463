"""Words that match the numbers, in the model card and report.md: the Hub model-index carries a held-out
accuracy only for a claim that held, the tests are named, the CI level follows --alpha, and the card links
only to a page that exists."""

from __future__ import annotations

import importlib.metadata
from dataclasses import replace
from email.message import Message
from pathlib import Path

import numpy as np
import pytest
import yaml

from headprune.exporter.card import card_metadata, render_card
from headprune.exporter.export_record import ExportRecord, read_record
from headprune.report.compress import non_inferiority_sentence
from headprune.report.markdown import render_markdown
from headprune.search.find_result import FindResult
from headprune.search.stats import NonInferiority, non_inferiority

V1 = Path(__file__).resolve().parent / "data" / "v1"


@pytest.fixture(scope="module")
def confirmed() -> ExportRecord:
    """An export of a confirmed primary set (the hand-made model's harmful head, written by headprune 0.1)."""
    record = read_record(V1)
    assert record.origin.verdict.confirmed
    return record


def _front_matter(text: str) -> dict:
    _, yaml_text, _ = text.split("---\n", 2)
    return yaml.safe_load(yaml_text)


def _with_verdict(record: ExportRecord, **changes) -> ExportRecord:  # noqa: ANN003
    origin = record.origin
    return replace(record, origin=replace(origin, verdict=replace(origin.verdict, **changes)))


def _compression(record: ExportRecord, *, rescued: int, damaged: int, n: int, alpha: float = 0.05) -> ExportRecord:
    unconfirmed = _with_verdict(record, p_value=0.5)
    ni = NonInferiority(n, 0.9, 0.9 + (rescued - damaged) / n, rescued, damaged, 0.02, 3, alpha)
    return replace(unconfirmed, origin=replace(unconfirmed.origin, non_inferiority=ni))


def test_a_confirmed_set_publishes_its_heldout_accuracy(confirmed) -> None:
    text = render_card(confirmed)
    (entry,) = _front_matter(text)["model-index"]
    values = {m["name"]: m["value"] for m in entry["results"][0]["metrics"]}
    assert values == {"held-out accuracy (pruned)": 0.97, "held-out accuracy (original)": 0.85}
    assert "carries these held-out accuracies" in text
    assert "exact McNemar test p = " in text and "95% interval" in text


@pytest.mark.parametrize("case", ["exploratory", "unconfirmed", "not-non-inferior"])
def test_no_plain_heldout_result_in_the_metadata_of_an_unheld_claim(confirmed, case) -> None:
    record = {"exploratory": lambda r: replace(_with_verdict(r, role="exploratory", adjusted_p=0.01),
                                               origin=replace(_with_verdict(r, role="exploratory",
                                                                            adjusted_p=0.01).origin, rank=2)),
              "unconfirmed": lambda r: _with_verdict(r, p_value=0.2),
              "not-non-inferior": lambda r: _compression(r, rescued=0, damaged=3, n=300)}[case](confirmed)
    text = render_card(record)
    meta = _front_matter(text)
    assert "model-index" not in meta and "model-index" not in card_metadata(record)
    assert "carries no held-out result" in text
    if case == "exploratory":
        assert "selection-biased" in text


def test_a_compression_card_names_the_test_and_its_level(confirmed) -> None:
    accepted = _compression(confirmed, rescued=1, damaged=1, n=1_000)
    text = render_card(accepted)
    assert "model-index" in _front_matter(text)  # a non-inferiority claim that held
    assert "Tango's score test" in text and "95% score CI" in text and "at one-sided 2.5%" in text
    assert "the largest set" not in text and "not necessarily the largest" in text  # the search is greedy or beam
    assert "**Non-inferior**" in text.splitlines()[text.splitlines().index("---", 1) + 2]
    loose = render_card(_compression(confirmed, rescued=1, damaged=1, n=1_000, alpha=0.1))
    assert "90% score CI" in loose and "at one-sided 5%" in loose and "95% score CI" not in loose


def test_the_card_links_no_page_that_does_not_exist(confirmed, monkeypatch) -> None:
    text = render_card(confirmed)
    assert "pypi.org" not in text and "Made with headprune:" in text
    assert not [line for line in text.splitlines() if "](http" in line]

    def with_homepage(name: str) -> Message:
        message = Message()
        message["Name"] = name
        message["Project-URL"] = "Homepage, https://example.org/headprune"
        return message

    monkeypatch.setattr(importlib.metadata, "metadata", with_homepage)
    assert "Made with [headprune](https://example.org/headprune):" in render_card(confirmed)


def test_report_names_both_tests_and_the_level_follows_alpha() -> None:
    report = render_markdown(FindResult.load(V1 / "result.json"))
    assert "the exact McNemar test" in report and "Tango's score interval at 95%" in report
    assert "95% CI" in report and "bootstrap CI" not in report
    before = np.ones(300, dtype=bool)
    after = before.copy()
    after[:2] = False
    strict = non_inferiority_sentence(non_inferiority(before, after, margin=0.02, removed=3))
    loose = non_inferiority_sentence(non_inferiority(before, after, margin=0.02, removed=3, alpha=0.1))
    assert "95% score CI" in strict and "Tango's score test, one-sided 2.5%" in strict
    assert "90% score CI" in loose and "Tango's score test, one-sided 5%" in loose
