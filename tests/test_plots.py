"""The figures draw what they say: controls.png has 95% CIs on both axes, screen.png shows the pre-screen's
estimate of the heads it passed over (the data fed to matplotlib is checked, not pixels)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.handmade import build_model, cue_task, reversed_task
from matplotlib.container import ErrorbarContainer

from headprune.heads import Head
from headprune.report.plots import control_series, control_tradeoff_figure, save_heatmap, screen_figure, screen_grids
from headprune.search.find import find


@pytest.fixture(scope="module")
def handmade():  # noqa: ANN201
    return build_model()


@pytest.fixture(scope="module")
def attributed(handmade):  # noqa: ANN001, ANN201
    """4 heads, 2 scored exactly after an attribution pre-screen; a control task; 3 finalists."""
    return find(handmade, cue_task(), discovery=120, heldout=120, screen="attribution", candidates=2, nominees=2,
                max_heads=2, finalists=3, control=reversed_task(), batch_size=64)


def test_controls_png_draws_both_confidence_intervals(attributed) -> None:
    (label, points), = control_series(attributed)
    assert label.startswith("reversed-cue") and [p.rank for p in points] == [f.rank for f in attributed.finalists]
    for p, f in zip(points, attributed.finalists):
        (control,) = f.controls
        assert p.x_ci == pytest.approx((100 * f.heldout.interval[0], 100 * f.heldout.interval[1]))
        assert p.y_ci == pytest.approx((100 * control.interval[0], 100 * control.interval[1]))
        assert p.x_ci[0] <= p.x <= p.x_ci[1] and p.y_ci[0] <= p.y <= p.y_ci[1]
    fig = control_tradeoff_figure(attributed)
    (bars,) = [c for c in fig.axes[0].containers if isinstance(c, ErrorbarContainer)]
    assert bars.has_xerr and bars.has_yerr
    x_segments, y_segments = (collection.get_segments() for collection in bars.lines[2])
    assert np.allclose([seg[:, 0] for seg in x_segments], [p.x_ci for p in points])
    assert np.allclose([seg[:, 1] for seg in y_segments], [p.y_ci for p in points])


def test_screen_png_shows_the_pre_screen_estimate_of_every_head(attributed, tmp_path) -> None:
    grids = screen_grids(attributed)
    exact = {row.head for row in attributed.screen}
    assert len(exact) == 2 and np.isnan(grids.exact).sum() == 2  # the heads attribution passed over stay grey
    assert not np.isnan(grids.estimate).any()  # ... and the estimate panel covers the whole model
    for name, value in attributed.prescreen.estimates.items():
        head = Head.parse(name)
        assert grids.estimate[head.layer, head.head] == pytest.approx(value)
    fig = screen_figure(attributed)
    gain_ax, estimate_ax, _, estimate_bar = fig.axes  # the two panels, then their colour bars
    assert "ESTIMATE" in estimate_ax.get_title() and "attribution" in estimate_bar.get_ylabel()
    hatched = [p for p in estimate_ax.patches if p.get_hatch()]
    assert sorted((round(p.get_y() + 0.5), round(p.get_x() + 0.5)) for p in hatched) == sorted(
        (Head.parse(h).layer, Head.parse(h).head) for h in attributed.prescreen.estimates if h not in exact)
    shown = estimate_ax.images[0].get_array()
    assert np.ma.count_masked(shown) == 0 and np.ma.count_masked(gain_ax.images[0].get_array()) == 2
    save_heatmap(attributed, tmp_path / "screen.png")
    assert (tmp_path / "screen.png").stat().st_size > 1000


def test_halving_estimates_read_in_the_gain_unit(handmade) -> None:
    result = find(handmade, cue_task(), discovery=120, heldout=120, screen="halving", candidates=1, nominees=1,
                  max_heads=1, finalists=1, batch_size=64)
    grids = screen_grids(result)
    assert np.isnan(grids.exact).sum() == 3 and not np.isnan(grids.estimate).any()
    for name, record in result.prescreen.rounds.items():
        head = Head.parse(name)
        expected = record.paired.gain * result.split.discovery / record.paired.n
        assert grids.estimate[head.layer, head.head] == pytest.approx(expected)
    assert "halving" in screen_figure(result).axes[3].get_ylabel()


def test_an_exact_screen_has_one_panel(handmade) -> None:
    result = find(handmade, cue_task(), discovery=80, heldout=80, nominees=2, max_heads=2, finalists=1,
                  batch_size=64)
    assert screen_grids(result).estimate is None and len(screen_figure(result).axes) == 2  # the panel, its bar
