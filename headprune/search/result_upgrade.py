"""Version 1 ``result.json`` files (headprune before typed records: flat dicts) in the later layout, which
``FindResult.from_dict`` reads."""

from __future__ import annotations

from headprune.search.settings import FindSettings


def _paired_v1(row: dict) -> dict:
    return {k: row[k] for k in ("n", "rescued", "damaged", "accuracy_before", "accuracy_after", "margin_change")}


def _verdict_v1(v: dict, rank: int) -> dict:
    return {**{k: v[k] for k in ("n", "accuracy_before", "accuracy_after", "rescued", "damaged", "p_value",
                                 "alpha")}, "role": "primary" if rank == 1 else "exploratory"}


def _control_v1(c: dict, task: str) -> dict:
    return {"task": task, "metric": c["metric"], "n": c["n"], "before": c["before"], "after": c["after"],
            "ci95": c["ci95"], "rescued": c.get("rescued"), "damaged": c.get("damaged")}


def upgrade_v1(data: dict, version: int) -> dict:
    """A version 1 ``result.json`` (flat dicts) in the version 2 layout, marked as schema ``version`` (what reads it
    next)."""
    control = data.get("control_task")
    control_name = control["name"] if control else ""
    baseline = data["baseline"]
    prescreen = data.get("prescreen")
    if prescreen and prescreen.get("rounds"):
        prescreen = {**prescreen, "rounds": {head: {"round": r["round"], "paired": _paired_v1(r)}
                                             for head, r in prescreen["rounds"].items()}}
    known = {f for f in FindSettings.__dataclass_fields__}
    return {
        "model": data["model"], "task": data["task"], "heldout_task": data["heldout_task"],
        "control_tasks": [control] if control else [], "split": data["split"],
        "settings": {k: v for k, v in data["settings"].items() if k in known},
        "baseline": {"discovery": baseline["discovery"], "heldout": baseline["heldout"],
                     "controls": [baseline["control"]] if "control" in baseline else []},
        "screen": [{"head": r["head"], "paired": _paired_v1(r), "estimate": r.get("estimate")}
                   for r in data["screen"]],
        "nominees": data["nominees"],
        "sets": [{"heads": s["heads"], "paired": _paired_v1(s)} for s in data["sets"]],
        "finalists": [{"rank": f["rank"], "heads": f["heads"], "discovery": _paired_v1(f["discovery"]),
                       "heldout": _verdict_v1(f["heldout"], f["rank"]),
                       "controls": [_control_v1(f["control"], control_name)] if f.get("control") else []}
                      for f in data["finalists"]],
        "prescreen": prescreen, "timings": data.get("timings", {}), "schema_version": version,
    }
