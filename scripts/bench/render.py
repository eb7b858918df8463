"""Markdown tables from the benchmarks' JSON records (``--json`` of every script in scripts/bench/).

    python -m scripts.bench.render runs/bench/kinds.json ...     # print each record's table
    python -m scripts.bench.render --update docs/benchmarks.md   # rewrite the tables a document marks
    python -m scripts.bench.render --check docs/benchmarks.md    # exit 1 when one differs from its record

A document marks a table with the line ``<!-- table: PATH -->`` (PATH from the repository root) right above it;
the table is the run of lines starting with ``|`` that follows, or a fenced block (commands, a program's output)
when a fence follows; ``PATH#VIEW`` picks one of several tables a renderer makes of a record. A record whose
benchmark has a renderer here (``kinds``, ``passengers``, ``export_check``, ``guards``, ``guard_size``,
``main_job``) gets that table; any other, one row per result with a column per key.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
MARK = re.compile(r"^<!-- table: (\S+) -->$")
# A stage's progress line, and find's lines about its own bookkeeping (the baseline's sets, the determinism check, the
# plan of conditions, the stage times): report.md and result.json keep them.
PROGRESS = re.compile(r"^headprune: .+?: \d+(/\d+)? conditions|^headprune: (baseline|determinism check|planned): "
                      r"|^stage times: ")


def _row(cells: list[Any]) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _table(header: list[str], rows: list[list[Any]]) -> str:
    return "\n".join([_row(header), "|" + "---|" * len(header), *(_row(r) for r in rows)])


def kinds(record: dict[str, Any], view: str = "") -> str:
    """scripts/bench/kinds.py: seconds per ablated condition on each side, ratio, answers, FLOP-limit ratios."""
    rows = [[r["kind"], r["task"], f"{r['naive_s']:.2f}", f"{r['headprune_s']:.2f}", f"x{r['ratio']:.1f}",
             r["differing"], f"{r['naive_x_limit']:.2f} / {r['headprune_x_limit']:.2f}" if "naive_x_limit" in r else "-"] for r in record["results"]]
    return _table(["kind", "task", "naive, s per ablated condition", "headprune", "ratio", "answers differing",
                   "FLOP-limit ratio naive / headprune"], rows)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    return "" if value is None else str(value).replace("|", "\\|")


def generic(record: dict[str, Any], view: str = "") -> str:
    """One row per result (a dict; a record whose results are one dict has one row), a column per key."""
    results = record["results"]
    results = [results] if isinstance(results, dict) else results
    columns: list[str] = []
    for result in results:
        columns += [key for key in result if key not in columns]
    return _table(columns, [[_cell(result.get(key)) for key in columns] for result in results])


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _pct_se(value: float | None, runs: int) -> str:
    """A rate with its standard error, ``30.1 ± 1.5%``."""
    return "-" if value is None else f"{100 * value:.1f} ± {100 * (value * (1 - value) / runs) ** 0.5:.1f}%"


def passengers(record: dict[str, Any], view: str = "defaults") -> str:
    """scripts/passengers.py: ``defaults`` (find's defaults, each cell against the rule before it in parentheses where
    the record ran it there; any other search setting by its name), ``readme`` (the same at null flips of 0.3%),
    ``searches`` (the worst cell of each size and search setting), ``power`` (the cells that decide, at more runs,
    with standard errors, each rule of ``power_rules``), ``masked`` (the held-out stage on redundant and masked
    heads), ``compress`` (the budget table)."""
    rules, rows = record["rules"], record["improve"]
    now, before = rules[0], (rules[1] if len(rules) > 1 else None)

    def pair(row: dict, key: str, fmt: Callable[[Any], str] = _pct) -> str:
        if row[now][key] is None:  # a rate of runs with real heads, in a cell without them
            return "-"
        return fmt(row[now][key]) + (f" ({fmt(row[before][key])})" if before in row else "")

    if view == "power":  # its own rules (``pair`` reads these): find's, then the one it is measured against
        now, before = (record.get("power_rules", rules) + [None])[:2]

        def both(row: dict, key: str) -> str:
            return pair(row, key, lambda value: _pct_se(value, row["runs"]))
        return _table(["discovery/held-out", "real heads", "null heads flip", "runs", "all real heads kept, confirmed",
                       "all kept, confirmed or not", "false confirmations", "passengers",
                       "a null head ahead: runs", "a null head ahead: all kept, confirmed"],
                      [[r["size"], r["real"], _pct(r["flip"]), r["runs"], both(r, "confirmed_all"),
                        both(r, "all_kept"), both(r, "false_confirmed"), both(r, "passenger"),
                        _pct(r[now]["null_ahead"]) if r[now]["all_kept"] is not None else "-",
                        both(r, "confirmed_null_ahead") if r[now]["all_kept"] is not None else "-"]
                       for r in record["power"]])

    if view == "compress":
        return _table(["budget (points)", "accepted", "accepted sets over budget", "estimate alone: accepted",
                       "over budget"], [[r["max_drop"], _pct(r["held-out"]["accepted"]),
                                         _pct(r["held-out"]["accepted_over_budget"]), _pct(r["estimate"]["accepted"]),
                                         _pct(r["estimate"]["accepted_over_budget"])] for r in record["compress"]])
    if view == "masked":
        return _table(["null heads flip", "confirmed", "false confirmations", "confirmed true gain, points"],
                      [[_pct(r["flip"]), _pct(r[now]["confirmed"]), _pct(r[now]["false_confirmed"]),
                        f"{r[now]['confirmed_gain']:+.2f}"] for r in record.get("masked", [])])
    if view == "searches":
        out = []
        for size in dict.fromkeys(r["size"] for r in rows):
            for search in dict.fromkeys(r["search"] for r in rows):
                cells = [r for r in rows if r["size"] == size and r["search"] == search]
                two = next(r for r in cells if r["real"] == "2" and r["flip"] == 0.003)
                pair_ = next(r for r in cells if r["real"] == "pair" and r["flip"] == 0.003)
                together = next((r for r in cells if r["real"] == "together" and r["flip"] == 0.003), None)
                out.append([size, search, _pct(max(r[now]["passenger"] for r in cells)),
                            _pct(max(r[now]["false_confirmed"] for r in cells)), pair(two, "all_kept"),
                            pair(two, "confirmed_all"), pair(pair_, "all_kept"),
                            pair(together, "confirmed_all") if together else "-"])
        return _table(["discovery/held-out", "search", "passengers, worst cell", "false confirmations, worst cell",
                       "2 real heads: both kept", "both kept, confirmed", "interacting pair: both kept",
                       "acting together: both kept, confirmed"], out)
    gain = lambda value: f"{round(value, 2) + 0.0:+.2f}"  # noqa: E731  (no "-0.00")
    search, flips = ("defaults", {0.003}) if view == "readme" else (view, None)  # readme: null heads flip 0.3%
    return _table(["discovery/held-out", "real heads", "null heads flip", "passengers", "false confirmations",
                   "all real heads kept", "all kept, confirmed", "confirmed true gain, points"],
                  [[r["size"], r["real"], _pct(r["flip"]), pair(r, "passenger"), pair(r, "false_confirmed"),
                    "-" if r["real"] == "0" else pair(r, "all_kept"),
                    "-" if r["real"] == "0" else pair(r, "confirmed_all"), pair(r, "confirmed_gain", gain)]
                   for r in rows if r["search"] == search and (flips is None or r["flip"] in flips)])


def guards(record: dict[str, Any], view: str = "") -> str:
    """scripts/guard_rates.py: per size and family, the share of runs that claim a set truly breaking the guard,
    and the share that ship a good set (confirmed, a true gain, the guard truly kept), without the guard in
    parentheses."""
    def pair(row: dict, key: str) -> str:
        return f"{_pct(row['guarded'][key])} ({_pct(row['unguarded'][key])})"

    def gain(row: dict) -> str:
        now, before = row["guarded"].get("confirmed_gain"), row["unguarded"].get("confirmed_gain")
        return "-" if now is None else f"{now + 0.0:+.2f} ({before + 0.0:+.2f})"

    return _table(["discovery/held-out", "family", "guard margin, points", "broken guard claimed",
                   "good set shipped", "confirmed true gain, points"],
                  [[r["size"], r["family"], f"{r['margin']:g}", pair(r, "false_guard_claim"), pair(r, "good_ship"),
                    gain(r)] for r in record["results"]])


def guard_size(record: dict[str, Any], view: str = "size") -> str:
    """scripts/guard_size.py: ``size`` (each family's share accepted at the null's boundary by find's text test, by
    0.3's in parentheses, per n), ``others`` (the plain t test and the studentized bootstrap at the sizes it was run
    at), ``power`` (the share accepted where the true change lies inside the margin, find's test and 0.3's)."""
    def pct(value: float) -> str:
        return f"{100 * value:.1f}%"

    def grid(rows: list[dict], key: Callable[[dict], Any], cell: Callable[[dict], str]) -> tuple[list, list]:
        sizes = sorted({r["n"] for r in rows})
        groups: dict[Any, dict[int, dict]] = {}
        for row in rows:
            groups.setdefault(key(row), {})[row["n"]] = row
        return sizes, [[*name, *(cell(cells[n]) if n in cells else "-" for n in sizes)]
                       for name, cells in groups.items()]

    if view == "others":
        rows = [r for r in record["size"] if "bootstrap" in r]
        sizes, table = grid(rows, lambda r: (r["family"],), lambda r: f"{pct(r['t'])} / {pct(r['bootstrap'])}")
        return _table(["family (skewness)", *(f"n={n}: t / bootstrap" for n in sizes)], table)
    if view == "power":
        sizes, table = grid(record["power"], lambda r: (r["family"], f"{1 - r['distance']:g} margin"),
                            lambda r: f"{pct(r['now'])} ({pct(r['hall'])})")
        return _table(["family (skewness)", "true change", *(f"n={n}" for n in sizes)], table)
    sizes, table = grid(record["size"], lambda r: (r["family"],), lambda r: f"{pct(r['now'])} ({pct(r['hall'])})")
    return _table(["family (skewness)", *(f"n={n}" for n in sizes)], table)


def export_check(record: dict[str, Any], view: str = "") -> str:
    """scripts/bench/export_check.py: CPU and wall seconds of each stage of one export, and in all."""
    result = record["results"]
    rows = [[stage["stage"].rstrip(", "), f"{stage['cpu_s']:.1f}", f"{stage['wall_s']:.1f}"]
            for stage in result["stages"]]
    rows.append([f"in all ({result['examples']} examples; in llama.cpp, original {_pct(result['original'])}, pruned "
                 f"{_pct(result['pruned'])})", f"{result['cpu_s']:.1f}", f"{result['wall_s']:.1f}"])
    return _table(["stage (from its log line)", "CPU s", "wall s"], rows)


def _command(argv: list[str]) -> str:
    """A headprune command as a user types it, wrapped under 116 columns with backslashes, an option kept with its
    value."""
    words = [shlex.quote(w) for w in argv]
    units = []
    for word in words:
        if units and units[-1].startswith("--") and " " not in units[-1] and not word.startswith("--"):
            units[-1] += " " + word
        else:
            units.append(word)
    lines, line = [], "headprune"
    for unit in units:
        if len(line) + len(unit) > 112:
            lines.append(line + " \\")
            line = "   "
        line += " " + unit
    return "\n".join([*lines, line])


def _points(value: float) -> str:
    return f"{100 * value:+.1f}"


def main_job(record: dict[str, Any], view: str = "figures") -> str:
    """scripts/bench/main_job.py: ``commands`` and ``output`` (fenced blocks: what was typed, what it printed),
    ``figures`` (the export, the times, the machine), ``variants`` (each way of running find: what it shipped, its
    verdict, its guards and controls), ``steps`` (the selection rule's steps as find tested them)."""
    main = record["results"]["main"]
    if view == "commands":
        return "```\n" + "\n".join(_command(c) for c in main["commands"]) + "\n```"
    if view == "steps":  # the rule's steps as the selection record holds them: each one level reached, in order
        steps = (main.get("selection") or {}).get("steps", [])
        return _table(["step", "heads tested", "added", "better (check / held-out)", "worse (check / held-out)",
                       "one-sided p", "level", "rejects"],
                      [[i, f"`{','.join(s['prefix'])}`", f"`{s['added']}`",
                        f"{s['check_rescued']} / {s['heldout_rescued']}", f"{s['check_damaged']} / {s['heldout_damaged']}",
                        f"{s['p_value']:.2g}", f"{s['level']:.3g}", "yes" if s["rejected"] else "no"]
                       for i, s in enumerate(steps, 1)])
    if view == "output":  # what was printed, progress lines ("screen: 4/8 conditions, ...") left out
        shown = [line for line in main["output"] if not PROGRESS.match(line)]
        return "```\n" + "\n".join(shown) + "\n```"

    def effect(e: dict[str, Any]) -> str:
        accuracy = e["metric"] == "accuracy"
        scale, unit = (100, " points") if accuracy else (1, " nats")
        low, high = e.get("interval") or (None, None)
        span = "" if low is None else f" [{scale * low:+.{1 if accuracy else 3}f}, {scale * high:+.{1 if accuracy else 3}f}]"
        return f"{e['task']} {scale * (e['after'] - e['before']):+.{1 if accuracy else 3}f}{unit}{span} (n={e['n']})"

    def claim(job: dict[str, Any]) -> list[str]:
        v = job["verdict"]
        low, high = v["interval"]
        return [f"`{','.join(job['primary'])}`", f"{_pct(v['accuracy_before'])} -> {_pct(v['accuracy_after'])}",
                f"{_points(v['difference'])} [{_points(low)}, {_points(high)}] (n={v['n']})",
                "; ".join(effect(e) for e in [*job["guards"], *job["controls"]]) or "-",
                "confirmed" if job["confirmed"] else "not confirmed"]

    if view == "variants":
        jobs = {"as above": main, **record["results"].get("variants", {})}
        return _table(["find", "ships", "held-out", "change, points [interval]", "guards and controls", "verdict"],
                      [[name, *claim(job)] for name, job in jobs.items()])
    machine, export = record["machine"], main.get("export") or {}
    rows = []
    if export:
        task, logits, count = export["task"], export["logits"], export["parameters"]
        rows += [[f"{task['task']} (n={task['n']}): original, masked, exported",
                  f"{_pct(task['intact'])}, {_pct(task['masked'])}, {_pct(task['exported'])}"],
                 [f"parameters ({export['layout']} {export['format']})", f"{count['before']:,} -> {count['after']:,}"],
                 ["max \\|logit diff\\| against the masked original (allowed)",
                  f"{logits['max_abs_diff']:.2e} ({logits['allowed']:.2e}, {logits['tokens']:,} tokens)"]]
    rows += [["find, s", main["find_s"]], ["export and verification, s", main.get("export_s", "-")],
             ["machine", f"{machine['cpu']} ({machine.get('kernels', '')}), {machine['cores']} cores, load average "
                         f"{machine.get('load_average')} at the start"]]
    return _table(["the main job", "measured"], rows)


RENDERERS: dict[str, Callable[..., str]] = {"kinds": kinds, "passengers": passengers, "export_check": export_check,
                                             "guards": guards, "guard_size": guard_size, "main_job": main_job}


def render(path: Path | str) -> str:
    """The table of a record, ``PATH#VIEW`` for one of several its renderer makes."""
    name, _, view = str(path).partition("#")
    record = json.loads(Path(name).read_text(encoding="utf-8"))
    renderer = RENDERERS.get(record.get("bench"), generic)
    return renderer(record, view) if view else renderer(record)


def marked_tables(text: str) -> list[tuple[str, str]]:
    """Each marked table of a document: (record path, the table as written)."""
    lines, found = text.splitlines(), []
    for i, line in enumerate(lines):
        mark = MARK.match(line)
        if mark:
            table: list[str] = []
            fenced = i + 1 < len(lines) and lines[i + 1].startswith("```")
            for row in lines[i + 1:]:
                if fenced:  # a fenced block: up to its closing fence
                    table.append(row)
                    if len(table) > 1 and row.startswith("```"):
                        break
                elif row.startswith("|"):
                    table.append(row)
                else:
                    break
            found.append((mark.group(1), "\n".join(table)))
    return found


def updated(text: str) -> str:
    """The document with every marked table rendered again from its record."""
    for record, table in marked_tables(text):
        mark = f"<!-- table: {record} -->\n"
        text = text.replace(mark + table, mark + render(ROOT / record), 1)
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("records", nargs="*", type=Path)
    parser.add_argument("--update", type=Path, help="a document whose marked tables are rendered again")
    parser.add_argument("--check", type=Path, help="a document whose marked tables must equal their records'")
    args = parser.parse_args(argv)
    for path in args.records:
        print(render(path) + "\n")
    document = args.update or args.check
    if document is None:
        return 0
    text = document.read_text(encoding="utf-8")
    fresh = updated(text)
    if args.update and fresh != text:
        document.write_text(fresh, encoding="utf-8")
    stale = [record for (record, old), (_, new) in zip(marked_tables(text), marked_tables(fresh)) if old != new]
    if args.check and stale:
        print(f"{document}: tables differ from their records: {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
