"""The settings of a find run, their defaults, built and checked in one place for both objectives.

:class:`FindSettings` holds the options and their defaults (imports no torch: the CLI reads them for ``--help``).
``find`` completes the settings it is given (:func:`settings_for`), refuses what cannot
work before anything is loaded (:func:`check_settings`), and once the model is known refuses what its layout
cannot do and fits what it can (:func:`check_layout`, :func:`fit_to_grid`). The objectives read the settings
and never check them again.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass, fields, replace
from pathlib import Path

from headprune.core.choices import OBJECTIVES, PREFER, PROTOCOLS, RANK_KEYS, SCREENS, SEARCHES
from headprune.core.limits import check_limit
from headprune.errors import SearchSettingsError
from headprune.heads import HeadGrid

DEFAULT_DISCOVERY = 2000  # examples (selection); find's own keywords, not settings: the record stores the split
DEFAULT_HELDOUT = 1000  # examples (verdict only)
DEFAULT_MAX_DROP = 0.5  # accuracy points
MAX_DROP_LIMIT = 50.0  # accuracy points: beyond, non-inferiority says nothing (at 100 its null is impossible)
DEFAULT_PATIENCE = 3
DEFAULT_BEAM_WIDTH = 4
COMPRESS_ONLY = ("max_drop", "prefer", "patience", "compress_search", "beam_width")
DEFAULT_CANDIDATES = 30
MIN_FRESH = 10  # find --shrink: the fewest fresh examples asked for (as a split's side)
DEFAULT_SHRINK_EXAMPLES = 1000  # find --shrink: fresh examples for its non-inferiority test
# The search each protocol fixes (headprune.search.protocol says what and why).
PROTOCOL_PRESETS: dict[str, dict[str, object]] = {
    "cel": {"objective": "improve", "screen": "exact", "nominees": 10, "max_heads": 3, "extend": 0, "finalists": 10},
}


@dataclass(frozen=True)
class FindSettings:
    """The search options that decide the result (what ``--resume`` insists on), and their defaults: the CLI's
    options and ``find``'s keywords read them here. As given, before :func:`settings_for` fills in what depends on
    other fields (``candidates`` for a pre-screen, the compress fields for compress)."""

    seed: int = 0
    ablation: str = "zero"
    nominees: int = 10
    max_heads: int = 3
    extend: int = 1
    finalists: int = 10
    alpha: float = 0.05
    rank_by: str = "gain"
    batch_size: int | str = "auto"
    screen: str = "exact"
    candidates: int | None = None  # pre-screens only
    control_limit: int = 500
    guard_limit: int = 600  # examples per guard: a third for the search, the rest for the verdict
    objective: str = "improve"  # "improve" (the protocol) or "compress" (a large set within max_drop)
    max_drop: float | None = None  # compress: accuracy points discovery may lose
    prefer: str | None = None  # compress: grow by single "heads" or whole key/value "groups"
    patience: int | None = None  # compress: consecutive single-unit rejections that end the search
    compress_search: str | None = None  # compress: "greedy" (galloping, with backtracking) or "beam"
    beam_width: int | None = None  # compress with beam: sets kept per round
    protocol: str | None = None  # a preset of the search fields above (headprune.search.protocol)
    shrink: float | None = None  # improve: grow the primary set by key/value groups within this many points of it
    shrink_examples: int | None = None  # with shrink: fresh examples for its non-inferiority test


SETTING_NAMES = tuple(f.name for f in fields(FindSettings))


def settings_for(given: FindSettings) -> FindSettings:
    """The settings as given (by ``find``'s caller or its keyword arguments) as the record's settings: ``candidates``
    only with a pre-screen (refused with the exact screen, which would ignore it; default 30), the compress defaults
    filled in for compress and left unset for improve (so that improve can refuse them). Settings it returned come
    back unchanged."""
    given = with_protocol(given)
    candidates = given.candidates
    if given.screen == "exact" and candidates is not None:
        _refuse("candidates applies only with screen attribution or halving; the exact screen scores every head",
                "candidates", "screen")
    if given.screen != "exact" and candidates is None:
        candidates = DEFAULT_CANDIDATES
    shrink_examples = given.shrink_examples
    if given.shrink is not None and shrink_examples is None:
        shrink_examples = DEFAULT_SHRINK_EXAMPLES
    return replace(given, candidates=candidates, shrink_examples=shrink_examples, **compress_fields(
        given.objective, given.max_drop, given.prefer, given.patience, given.compress_search, given.beam_width))


def with_protocol(settings: FindSettings, *, given: Collection[str] = ()) -> FindSettings:
    """The settings with a protocol's preset filled in: a field left at find's default takes the protocol's value;
    one set otherwise, or named in ``given`` (the options a user typed), is refused unless it is the protocol's
    value (the protocol is what it fixes).

    Raises:
        SearchSettingsError
    """
    if settings.protocol is None:
        return settings
    if settings.protocol not in PROTOCOLS:
        _refuse(f"protocol must be one of {', '.join(PROTOCOLS)}, not {settings.protocol!r}", "protocol")
    preset, defaults = PROTOCOL_PRESETS[settings.protocol], FindSettings()
    for name, value in preset.items():
        now = getattr(settings, name)
        if now != value and (now != getattr(defaults, name) or name in given):
            _refuse(f"protocol {settings.protocol} runs {name} {value}; drop {name} or the protocol", name,
                    "protocol")
    return replace(settings, **preset)


def compress_fields(objective: str, max_drop: float | None, prefer: str | None, patience: int | None,
                    compress_search: str | None = None, beam_width: int | None = None) -> dict:
    """The compress fields of FindSettings: defaults filled in for compress, left unset for improve."""
    if objective != "compress":
        return {"objective": objective, "max_drop": max_drop, "prefer": prefer, "patience": patience,
                "compress_search": compress_search, "beam_width": beam_width}
    search = compress_search or "greedy"
    if search == "beam" and beam_width is None:
        beam_width = DEFAULT_BEAM_WIDTH
    return {"objective": objective, "max_drop": DEFAULT_MAX_DROP if max_drop is None else max_drop,
            "prefer": prefer or "heads", "patience": DEFAULT_PATIENCE if patience is None else patience,
            "compress_search": search, "beam_width": beam_width}


def _refuse(message: str, *names: str) -> None:
    raise SearchSettingsError(message, settings=names)


def check_settings(settings: FindSettings, *, resume: bool = False, out: Path | None = None,
                   guarded: bool = False) -> None:
    """Refuse settings that cannot work, naming them (``guarded``: the run has guards, which only improve takes).

    Raises:
        SearchSettingsError
    """
    if settings.screen not in SCREENS:
        _refuse(f"screen must be one of {', '.join(SCREENS)}, not {settings.screen!r}", "screen")
    if settings.candidates is not None and settings.candidates < settings.nominees and settings.objective == "improve":
        _refuse(f"candidates ({settings.candidates}) is smaller than nominees ({settings.nominees})",
                "candidates", "nominees")
    if settings.rank_by not in RANK_KEYS:
        _refuse(f"rank_by must be one of {', '.join(RANK_KEYS)}, not {settings.rank_by!r}", "rank_by")
    if not 0 < settings.alpha < 1:
        _refuse(f"alpha must be between 0 and 1, got {settings.alpha}", "alpha")
    if min(settings.nominees, settings.max_heads, settings.finalists) < 1 or settings.extend < 0:
        _refuse("nominees, max_heads and finalists must be at least 1, extend at least 0",
                "nominees", "max_heads", "finalists", "extend")
    if settings.max_heads > settings.nominees:
        _refuse(f"max_heads ({settings.max_heads}) is larger than nominees ({settings.nominees})",
                "max_heads", "nominees")
    if settings.guard_limit < 30:
        _refuse(f"guard_limit must be at least 30 (a third for the search, the rest for the verdict), got "
                f"{settings.guard_limit}", "guard_limit")
    if resume and out is None:
        _refuse("resume needs out (the folder of the interrupted run)", "resume", "out")
    if guarded and settings.objective != "improve":
        _refuse("guard: only with objective improve (compress has its own budget, max_drop)", "guard", "objective")
    check_objective(settings)
    check_shrink(settings)


def check_shrink(settings: FindSettings) -> None:
    """Refuse ``shrink`` options that cannot work (``headprune.search.shrink``).

    Raises:
        SearchSettingsError
    """
    if settings.shrink is None:
        if settings.shrink_examples is not None:
            _refuse("shrink_examples: only with shrink", "shrink_examples", "shrink")
        return
    if settings.objective != "improve":
        _refuse("shrink: only with objective improve (it grows the improving set; compress grows its own)", "shrink",
                "objective")
    if not (isinstance(settings.shrink, (int, float)) and 0 < settings.shrink <= MAX_DROP_LIMIT):
        _refuse(f"shrink must be a number of accuracy points above 0 and at most {MAX_DROP_LIMIT:g}, got "
                f"{settings.shrink}", "shrink")
    if settings.shrink_examples is None or settings.shrink_examples < MIN_FRESH:
        _refuse(f"shrink_examples must be at least {MIN_FRESH}, got {settings.shrink_examples}", "shrink_examples")
    # More fresh examples than a task may hold: no task has them (a generated one would try to draw them all).
    check_limit("shrink_examples", settings.shrink_examples, "HEADPRUNE_MAX_EXAMPLES", error=SearchSettingsError,
                settings=("shrink_examples",))


def check_plan_size(settings: FindSettings) -> None:
    """Refuse, before anything is screened (settings fitted to the model), an improve run whose joint search would
    evaluate more head sets than ``HEADPRUNE_MAX_SETS`` allows (every subset of the M nominees of size 2..K, plus
    the greedy extension's steps).

    Raises:
        SearchSettingsError: with the number of sets.
    """
    if settings.objective != "improve":
        return
    nominees = settings.nominees
    sets = sum(math.comb(nominees, k) for k in range(2, settings.max_heads + 1)) + settings.extend * 2 * nominees
    check_limit(f"nominees ({nominees}) and max_heads ({settings.max_heads})"
                + (f" with extend ({settings.extend})" if settings.extend else "")
                + f" make the joint search evaluate C({nominees},2)+...+C({nominees},{settings.max_heads})"
                + (" and the extension's" if settings.extend else "") + " head sets", sets, "HEADPRUNE_MAX_SETS",
                error=SearchSettingsError, settings=("nominees", "max_heads", "extend"))


def check_objective(settings: FindSettings) -> None:
    """Refuse compress options that cannot work, or that the improve objective would silently ignore.

    Raises:
        SearchSettingsError
    """
    if settings.objective not in OBJECTIVES:
        _refuse(f"objective must be one of {', '.join(OBJECTIVES)}, not {settings.objective!r}", "objective")
    given = [name for name in COMPRESS_ONLY if getattr(settings, name) is not None]
    if settings.objective == "improve":
        if given:
            _refuse(f"{', '.join(given)}: only with objective compress", *given, "objective")
        return
    if settings.max_drop is None or not 0 <= settings.max_drop <= MAX_DROP_LIMIT:
        _refuse(f"max_drop must be a number of accuracy points from 0 to {MAX_DROP_LIMIT:g}, got {settings.max_drop} "
                "(a budget of half the accuracy or more is no longer a test of not being worse)", "max_drop")
    if settings.prefer not in PREFER:
        _refuse(f"prefer must be one of {', '.join(PREFER)}, not {settings.prefer!r}", "prefer")
    if settings.patience is None or settings.patience < 1:
        _refuse(f"patience must be at least 1, got {settings.patience}", "patience")
    if settings.compress_search not in SEARCHES:
        _refuse(f"compress_search must be one of {', '.join(SEARCHES)}, not {settings.compress_search!r}",
                "compress_search")
    if settings.compress_search == "greedy" and settings.beam_width is not None:
        _refuse("beam_width: only with compress_search beam", "beam_width", "compress_search")
    if settings.compress_search == "beam" and (settings.beam_width is None or settings.beam_width < 1):
        _refuse(f"beam_width must be at least 1, got {settings.beam_width}", "beam_width")


def check_placement(device_map: str | None, parallel: bool) -> None:
    """Refuse a model spread over every GPU by each of several processes.

    Raises:
        SearchSettingsError
    """
    if device_map is not None and parallel:
        _refuse("device_map with several processes: each process would spread its model over every visible GPU; "
                "give each its own (CUDA_VISIBLE_DEVICES) or run one process", "device_map")


def check_layout(grid: HeadGrid, prefer: str | None) -> None:
    """Refuse ``prefer="groups"`` where there are no groups of several query heads to prefer.

    Raises:
        SearchSettingsError
    """
    if prefer == "groups" and all(layer.group <= 1 for layer in grid.layers):
        counts = sorted({layer.heads for layer in grid.layers if layer.heads})
        _refuse(f"prefer groups needs grouped-query attention; this model has one key/value head per query head "
                f"({'/'.join(map(str, counts))} per layer): use prefer heads", "prefer")


def fit_to_grid(settings: FindSettings, grid: HeadGrid) -> FindSettings:
    """Fewer nominees (and joint sizes) when the model has fewer heads than asked for; otherwise unchanged."""
    if settings.nominees <= grid.total:
        return settings
    return replace(settings, nominees=grid.total, max_heads=min(settings.max_heads, grid.total))


__all__ = ["DEFAULT_BEAM_WIDTH", "DEFAULT_CANDIDATES", "DEFAULT_DISCOVERY", "DEFAULT_HELDOUT", "DEFAULT_MAX_DROP",
           "DEFAULT_PATIENCE", "DEFAULT_SHRINK_EXAMPLES", "MAX_DROP_LIMIT", "OBJECTIVES", "PREFER", "PROTOCOLS",
           "PROTOCOL_PRESETS", "RANK_KEYS", "SCREENS", "SEARCHES", "SETTING_NAMES", "FindSettings", "check_layout",
           "check_objective", "check_placement", "check_plan_size", "check_settings", "check_shrink", "compress_fields",
           "fit_to_grid", "settings_for", "with_protocol"]
