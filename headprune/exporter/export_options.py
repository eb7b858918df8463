"""The options of an export checked before any model is loaded: the format's options given two ways, the options
about a find result's finalists, and the options on their own (``headprune.exporter.pipeline`` calls them first)."""

from __future__ import annotations

from collections.abc import Mapping

from headprune.core.choices import ABLATIONS, EXPORT_LAYOUTS
from headprune.errors import ExportSettingsError
from headprune.exporter.formats import ExportFormat

LAYOUTS = EXPORT_LAYOUTS


def format_option_values(given: Mapping[str, str] | None, **keywords: str | None) -> dict[str, str]:
    """``format_options`` with the format options ``export`` also takes as keywords (``gguf_type``) merged in.

    Raises:
        ExportSettingsError: one given both ways, differently.
    """
    options = dict(given or {})
    for name, value in keywords.items():
        if value is None:
            continue
        if options.get(name, value) != value:
            raise ExportSettingsError(f"{name} is given twice ({value!r}, and {options[name]!r} in format_options)",
                                      settings=(name,))
        options[name] = value
    return options


def check_result_options(result: object, set_rank: int, allow_unconfirmed: bool) -> None:
    """Refuse the options about a find result's finalists when the heads were given as a list (one set, which
    claims nothing): they would be ignored.

    Raises:
        ExportSettingsError
    """
    if result is not None:
        return
    for name, given in (("set_rank", set_rank != 1), ("allow_unconfirmed", allow_unconfirmed)):
        if given:
            raise ExportSettingsError(f"{name} applies only to heads from a find result (its finalists and their "
                                      "verdicts); heads given as a list are one set that claims no gain",
                                      settings=(name,))


def check_options(fmt: ExportFormat, ablation: str, tolerance: float | None) -> None:
    """The options on their own and the format's (the model is not loaded yet).

    Raises:
        ExportSettingsError, MissingExtraError.
    """
    from headprune.exporter.verify import MAX_TOLERANCE

    for name, value, allowed in (("layout", fmt.options.layout, LAYOUTS), ("ablation", ablation, ABLATIONS)):
        if value not in allowed:
            raise ExportSettingsError(f"{name} must be one of {', '.join(allowed)}, not {value!r}", settings=(name,))
    fmt.check_options()
    if tolerance is not None and not 0 <= tolerance <= MAX_TOLERANCE:
        raise ExportSettingsError(f"tolerance must be between 0 and {MAX_TOLERANCE} (relative to the largest logit), "
                                  f"not {tolerance:g}: a larger one would pass a broken export",
                                  settings=("tolerance",))


__all__ = ["check_options", "check_result_options", "format_option_values"]
