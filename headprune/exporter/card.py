"""The model card (README.md) of an export, with Hub-style YAML metadata, rendered from its record.

What a format says of itself (its verification lines, how to load it, its Hub library) its class in
:mod:`headprune.exporter.formats` says; nothing here names a format.
"""

from __future__ import annotations

import json

from headprune.exporter.export_record import ExportRecord, FindOrigin
from headprune.exporter.formats import REGISTRY, format_class


def publishes_heldout(record: ExportRecord) -> bool:
    """Whether the Hub metadata may carry the held-out accuracy as a plain result: only for a claim that held
    (a confirmed primary set, or a compression accepted as non-inferior). An exploratory finalist was picked
    by someone who had seen the finalists' held-out numbers (selection-biased); an unconfirmed set's number
    is not a result headprune stands behind. Their cards give the numbers in prose, labelled, and the
    ``model-index`` leaves them out (Hub leaderboards read it as a plain result)."""
    origin = record.origin
    if origin is None:
        return False
    if origin.confirmed:
        return True
    return origin.non_inferiority is not None and origin.rank == 1 and origin.non_inferiority.accepted


def model_index(record: ExportRecord) -> list | None:
    """The Hub ``model-index`` entry: held-out accuracy before and after, only where :func:`publishes_heldout`."""
    if record.origin is None or not publishes_heldout(record):
        return None
    verdict, name = record.origin.verdict, record.origin.task
    return [{"name": f"{record.source.name}-headpruned", "results": [{
        "task": {"type": "text-generation", "name": name},
        "dataset": {"type": name, "name": f"{name} (held-out split)"},
        "metrics": [
            {"type": "accuracy", "value": round(verdict.accuracy_after, 6), "name": "held-out accuracy (pruned)"},
            {"type": "accuracy", "value": round(verdict.accuracy_before, 6), "name": "held-out accuracy (original)"},
        ]}]}]


def card_metadata(record: ExportRecord) -> dict:
    """The card's YAML front matter as data (what ``push --dry-run`` shows)."""
    meta: dict = {"library_name": format_class(record.format).library_name or record.format,
                  "tags": ["headprune", "pruned", f"headprune-{record.layout}", "attention-head-pruning"]}
    if record.source.hub_id:
        meta["base_model"] = record.source.hub_id
    if record.source.license:
        meta["license"] = record.source.license
    index = model_index(record)
    if index:
        meta["model-index"] = index
    return meta


def _front_matter(meta: dict) -> list[str]:
    lines = ["---"]
    for key, value in meta.items():  # JSON scalars, lists and objects are valid YAML flow values
        if isinstance(value, list) and key != "model-index":
            lines.append(f"{key}:")
            lines += [f"- {json.dumps(v)}" for v in value]
        else:
            lines.append(f"{key}: {json.dumps(value)}")
    return lines + ["---"]


def render_card(record: ExportRecord) -> str:
    """README.md for an export folder, from its verification record."""
    source, removed, layout = record.source, record.removed_heads, record.layout
    lines = _front_matter(card_metadata(record)) + ["", claim_line(record)]
    lines += ["", f"# {source.name}, {len(removed)} attention heads removed", "",
              f"Made with {headprune_link()}: the attention heads "
              f"`{','.join(removed)}` of `{source.name}`"
              + (f" (commit `{source.revision}`)" if source.revision else "")
              + f" were removed ({layout} layout, {record.ablation} ablation), and the result was verified against the "
              "original model with those heads masked.", "",
              "| | original | pruned |", "|---|---|---|",
              f"| parameters | {record.parameters.before:,} | {record.parameters.after:,} |",
              f"| weight bytes | {record.bytes.before:,} | {record.bytes.after:,} |", ""]
    logits, task = record.verification.logits, record.verification.task

    def metric(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.2%}" if task.metric == "accuracy" else f"{value:.4f}"

    lines += ["## Verification", "",
              f"- Largest difference to the masked original ({', '.join(logits.outputs)}; {logits.examples} examples, "
              f"{logits.tokens:,} tokens, {logits.dtype}): {logits.max_abs_diff:.2e} "
              f"(allowed {logits.allowed:.1e}: {logits.tolerance:.0e} x the largest |value|).",
              f"- `{task.task}` (n={task.n}, {task.metric.replace('_', ' ')}): original {metric(task.intact)}, "
              f"masked {metric(task.masked)}, this model {metric(task.exported)} ({task.disagreements} answers "
              f"differ from the masked model; measured on {task.measured_on})." if task is not None else
              "- **No task was re-measured**: the heads were given by hand without a task, so the outputs were "
              "compared on headprune's built-in text sample only; nothing is claimed about any task."]
    if record.stands_in_for:
        lines.append(f"- The checkpoint's class `{record.stands_in_for}` is not in transformers and ships no code; "
                     f"`{record.model_class}` (the class of its family whose tensors match best) was used to prune and "
                     f"verify, and the {len(record.passthrough)} checkpoint tensors it does not use were written "
                     "through unchanged (compared bit for bit): "
                     + ", ".join(f"`{name}`" for name in record.passthrough[:6])
                     + (" ..." if len(record.passthrough) > 6 else "") + ".")
    lines += _as_shipped_lines(record)
    tensors = record.verification.tensors
    if tensors is not None:
        lines.append(f"- Tensors of the original ({record.model_class}): {len(tensors.kept)} kept unchanged, "
                     f"{len(tensors.sliced)} sliced, {len(tensors.edited)} edited (heads silenced), "
                     f"{len(tensors.removed)} removed.")
    runtime = record.verification.runtime
    if runtime is not None:
        lines.append(f"- Run in {runtime.runtime}: greedy decoding of {runtime.prompts} task prompts gives the masked "
                     f"original's tokens on {runtime.identical} ({runtime.tokens} tokens compared)." if runtime.done
                     else f"- Not run in its runtime: {runtime.reason}.")
    if record.layout_note:
        lines.append(f"- Layout written: {record.layout_note}.")
    lines += format_class(record.format).card_lines(record)
    if record.origin is not None and record.origin.non_inferiority is not None:
        lines += _compression_lines(record.origin) + [_metadata_note(record)]
    elif record.origin is not None:
        lines += ["", "## Held-out result from `headprune find`", "", _heldout_result(record.origin)]
        lines += _guard_lines(record.origin) + _shrink_lines(record.origin)
        lines.append(_metadata_note(record))
    lines += ["", "## How to load", ""] + format_class(record.format).card_usage(record)
    changed = [f"L{p.layer}: {p.layout}" for p in record.layers if p.layout != "unchanged"]
    lines += ["", "Per-layer layouts: " + ", ".join(changed) if changed else "", ""]
    return "\n".join(lines)


def _as_shipped_lines(record: ExportRecord) -> list[str]:
    """The card's lines on a checkpoint as shipped: its quantization, and the tensors its class drops by design."""
    lines = [f"- Quantization: {record.quantization.line()}."] if record.quantization is not None else []
    if record.dropped:
        names = ", ".join(f"`{name}`" for name in record.dropped[:4]) + (" ..." if len(record.dropped) > 4 else "")
        keepers = " or ".join(name for name, cls in REGISTRY.items() if cls.writes_through)
        lines.append(f"- {len(record.dropped)} checkpoint tensors that `{record.model_class}` drops by design "
                     f"(multi-token prediction and the like, no head of the pruned stack: {names}) " + (
                         "were written through unchanged (compared bit for bit)." if set(record.dropped) <= set(
                             record.passthrough) else f"are not in this {record.format} file, which holds what its "
                         f"runtime runs; an export as {keepers} writes them through."))
    return lines


def _heldout_result(origin: FindOrigin) -> str:
    """The card's paragraph on the exported set's held-out result: a grown set's or another finalist's numbers,
    exploratory, or the primary set's test and whether it confirmed."""
    v = origin.verdict
    numbers = (f"accuracy {v.accuracy_before:.2%} -> {v.accuracy_after:.2%} (difference {v.difference:+.2%}, "
               f"{100 * v.level:.3g}% interval [{v.interval[0]:+.2%}, {v.interval[1]:+.2%}]")
    if origin.shrink is not None:
        return (f"Finalist {origin.rank}, the primary set grown by `find --shrink`; its own held-out numbers are "
                f"exploratory (the primary set was chosen on them): {numbers}, Bonferroni-adjusted p = "
                f"{v.adjusted_p:.3g} over the finalists).")
    if v.role == "exploratory":
        return (f"**Exploratory**: finalist {origin.rank}, not the set find chose on discovery; picked by a user who "
                f"could see the finalists' held-out numbers. On {v.n} held-out examples: {numbers}, "
                f"Bonferroni-adjusted p = {v.adjusted_p:.3g} over the finalists). No improvement is claimed for it.")
    gate = "" if v.gate is None else (f" and the set it was cut down from ({', '.join(v.gate.heads)}) "
                                      f"passes the same test (p = {v.gate.p_value:.3g})")
    chosen = (" Its heads were chosen from the proposed set by held-out tests, so these held-out numbers are an "
              "exploratory estimate (they read the examples that chose the heads); the test's level allows "
              "for that choice." if v.selected else "")
    test = (f"exact McNemar test p = {v.p_value:.3g}, confirmed when p < {v.size:g} and the gain is "
            f"positive{gate}")
    from headprune.search.rules import rule_confirming  # here: the card's metadata (push) loads no search code

    rule = rule_confirming(v)
    if rule is not None:  # the claim is the selection rule's steps, in its words
        test = f"the set's own exact McNemar p = {v.p_value:.3g}; {rule.claim(v, detail=True)}"
    return (f"Discovery-selected set, tested on {v.n} held-out examples the search never saw: {numbers}, {test}): "
            + ("**confirmed**." if v.confirmed else "**not confirmed** (no improvement is claimed).") + chosen)


def claim_line(record: ExportRecord) -> str:
    """The card's first line: what is (and is not) claimed for this model."""
    if record.origin is None:
        return ("**No claim**: these heads were given by hand, not chosen by `headprune find`; no improvement "
                "is claimed.")
    v, ni = record.origin.verdict, record.origin.non_inferiority
    if record.origin.shrink is not None:
        return _shrink_claim(record.origin)
    if ni is not None and not v.confirmed:  # find --objective compress: a test of not being worse
        low = 100 * ni.interval[0]
        if ni.accepted:
            return (f"**Non-inferior**: with {100 * ni.level:g}% confidence, removing these heads costs held-out "
                    f"`{record.origin.task}` accuracy at most {100 * ni.margin:g} points (the {100 * ni.level:g}% score "
                    f"interval's lower end is {low:+.1f} points); no improvement is claimed.")
        return (f"**Not shown non-inferior**: held-out `{record.origin.task}` accuracy may be more than "
                f"{100 * ni.margin:g} points below the original ({100 * ni.level:g}% score CI lower end "
                f"{low:+.1f} points); exported with --allow-unconfirmed.")
    guards = record.origin.guards
    if record.origin.confirmed:
        kept = "" if not guards else ", and it is no worse than the margin on " + ", ".join(
            f"`{g.task}`" for g in guards)
        return (f"**Confirmed**: the head set find chose on discovery improves `{record.origin.task}` on held-out "
                f"data ({v.difference * 100:+.1f} points, p = {v.p_value:.3g}){kept}.")
    if v.role == "exploratory":
        return (f"**Unconfirmed (exploratory)**: finalist {record.origin.rank}, picked by hand after its held-out "
                f"numbers were seen, so they are exploratory; exported with --allow-unconfirmed; Bonferroni-adjusted "
                f"p = {v.adjusted_p:.3g}. No improvement is claimed.")
    if v.confirmed:  # the gain held, a guard did not
        missed = [f"`{g.task}`" for g in guards if not g.held]
        return (f"**Unconfirmed**: the gain on `{record.origin.task}` is confirmed ({v.difference * 100:+.1f} points), "
                f"but {'no candidate kept the guards on discovery' if not record.origin.guards_kept else 'the guard ' + ', '.join(missed) + ' was not shown to hold'}; "
                "exported with --allow-unconfirmed. No claim is made.")
    return (f"**Unconfirmed**: find's held-out verdict did not confirm a gain ({v.difference * 100:+.1f} points, "
            f"p = {v.p_value:.3g}); exported with --allow-unconfirmed. No improvement is claimed.")


def _shrink_claim(origin: FindOrigin) -> str:
    """The claim line of a ``find --shrink`` grown set: better than the original (the primary set's verdict), no worse
    than the primary set by more than the margin (on fresh examples), this much smaller."""
    s, better = origin.shrink, origin.improving
    assert s is not None and better is not None
    ni = s.verdict
    if not origin.shrink_claimed or ni is None:
        return (f"**Unconfirmed**: the smaller set find grew from the primary set was not shown no worse than it by "
                f"more than {s.margin:g} points ({s.note or 'see below'}); exported with --allow-unconfirmed. No claim "
                "is made.")
    return (f"**Better and smaller**: the head set find chose improves `{origin.task}` on held-out data "
            f"({better.difference * 100:+.1f} points, p = {better.p_value:.3g}); this model removes whole key/value "
            f"groups on top of it and is no worse than that set by more than {s.margin:g} points on {ni.n} fresh "
            f"examples ({100 * ni.level:g}% score CI lower end {100 * ni.interval[0]:+.1f} points).")


def _shrink_lines(origin: FindOrigin) -> list[str]:
    """What ``find --shrink`` tested for this grown set, and what it saves."""
    s = origin.shrink
    if s is None or s.verdict is None:
        return []
    ni, z = s.verdict, s.size
    return ["", f"This is the primary set `{','.join(s.improving)}` grown by whole key/value groups on discovery "
            f"({', '.join(s.added)}). Against the primary set on {ni.n} fresh examples (neither discovery nor "
            f"held-out): accuracy {ni.accuracy_before:.2%} -> {ni.accuracy_after:.2%}, {ni.rescued} rescued, "
            f"{ni.damaged} damaged; {ni.test}, one-sided at {100 * ni.alpha / 2:g}%, margin {s.margin:g} points: "
            + ("**non-inferior**." if ni.accepted else "**not shown non-inferior**.")
            + f" Sliced: {z.parameters:,} parameters against {z.parameters_original:,}, {z.kv_heads} key/value heads "
            f"against {z.kv_heads_original}. The held-out figures above are exploratory for this set."]


def _guard_lines(origin: FindOrigin) -> list[str]:
    """What this set does to each guard of the find run (what must not break), with its test."""
    if not origin.guards:
        return []
    lines = ["", "Guards (tasks this model must not be worse at, by more than a margin, on held-out examples the "
             "search never saw):", ""]
    for g in origin.guards:
        low, high = g.interval
        change = (f"accuracy {g.before:.2%} -> {g.after:.2%} ({g.difference:+.2%}, {100 * g.level:.3g}% interval "
                  f"[{low:+.2%}, {high:+.2%}]), margin -{100 * g.margin:g} points" if g.metric == "accuracy" else
                  f"mean NLL {g.before:.4f} -> {g.after:.4f} ({g.difference:+.4f} nats, {100 * g.level:.3g}% interval "
                  f"[{low:+.4f}, {high:+.4f}]), margin +{g.margin:g} nats")
        state = ("**held**" if g.held else "exploratory (not a claim)" if g.role == "exploratory"
                 else "**not shown to hold**")
        lines.append(f"- `{g.task}` (n={g.n}): {change}; {g.test}, one-sided at {g.alpha / g.family / 2:g}: {state}.")
    return lines


def _compression_lines(origin: FindOrigin) -> list[str]:
    """What ``find --objective compress`` tested: non-inferiority within its margin, by Tango's score test,
    never an improvement unless the superiority test confirmed one."""
    ni, v = origin.non_inferiority, origin.verdict
    assert ni is not None
    margin, level = 100 * ni.margin, f"{100 * ni.level:g}%"
    low, high = ni.interval
    outcome = (f"**accepted as non-inferior**: the lower end of the {level} score interval is above -{margin:g} "
               "points" if ni.accepted else f"**not shown non-inferior**: the lower end of the {level} score "
               f"interval is not above -{margin:g} points, so this model may be worse than the original by more "
               "than that")
    lines = ["", "## Held-out result from `headprune find --objective compress`", "",
             f"The heads were chosen on discovery data by a search (greedy or beam) that grew the set, least "
             f"harmful heads first, while the discovery data still showed `{origin.task}` accuracy within "
             f"{margin:g} points of the original: a set within that budget, not necessarily the largest. Tested on {ni.n} held-out examples "
             f"the search never saw: accuracy {ni.accuracy_before:.2%} -> {ni.accuracy_after:.2%} (difference "
             f"{ni.difference:+.2%}, {level} score CI [{low:+.2%}, {high:+.2%}]; {ni.rescued} answers rescued, "
             f"{ni.damaged} damaged). The test: {ni.test}, Tango 1998, at one-sided {100 * ni.alpha / 2:g}%. "
             f"Non-inferiority margin {margin:g} points: {outcome}. The interval is what the data allow: a change "
             "anywhere inside it is consistent with the held-out examples."]
    if v.confirmed:
        lines.append(f"The held-out accuracy is also significantly higher (exact McNemar test p = {v.p_value:.3g}).")
    else:
        lines.append("This is a smaller model that was tested for not being worse; no improvement is claimed.")
    return lines


def _metadata_note(record: ExportRecord) -> str:
    """Says whether the card's Hub metadata carries the held-out accuracy, and why not where it does not."""
    if publishes_heldout(record):
        return "The Hub metadata (`model-index`) of this card carries these held-out accuracies."
    why = ("its own held-out numbers are exploratory: the primary set it was grown from was chosen on them"
           if record.origin.shrink is not None else
           "it is an exploratory finalist, picked after its held-out numbers were seen, so they are "
           "selection-biased" if record.origin.verdict.role == "exploratory" else
           "the held-out test did not support the claim it was run for")
    return f"The Hub metadata (`model-index`) of this card carries no held-out result: {why}."


def headprune_link() -> str:
    """``headprune``, linked only to a page the installed package names (its ``Project-URL`` metadata, set by
    ``[project.urls]`` in pyproject.toml): headprune is not published on a package index, and a link to one
    would point at a page that does not exist."""
    from importlib import metadata

    try:
        entries = metadata.metadata("headprune").get_all("Project-URL") or []
    except metadata.PackageNotFoundError:
        entries = []
    for entry in entries:
        label, _, url = entry.partition(",")
        if label.strip().lower() in ("homepage", "repository", "source") and url.strip().startswith("https://"):
            return f"[headprune]({url.strip()})"
    return "headprune"
