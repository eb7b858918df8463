"""The package's layering, read from docs/architecture.md's "Code layout" and checked against the source with ``ast``.

Two rules, over every module of ``headprune/``: no module imports one of a higher layer, and no import loop joins
modules (``a`` imports ``b``, which imports ... ``a``). An import inside a function, or under ``TYPE_CHECKING``,
counts like one at the top: deferring an import hides a dependency from the interpreter, not from the reader. The
implicit import of a parent package when a submodule loads does not count (every module would then depend on
``headprune/__init__``); names looked up by string (``import_module`` in the packages' lazy ``__getattr__``) cannot be
seen and are not checked.

The layers are written once, in docs/architecture.md (a numbered list, highest layer first, each entry a module or a package of
``headprune/`` in backticks; the most specific entry decides a module's layer). A module no entry covers, or an
entry that names no module, fails here too, so every new module is given its room deliberately. A subpackage may
order its own modules the same way, in a line ``- `PACKAGE/`: `a` > `b`, `c` > `d` `` (highest first; ``__init__`` is
the package; ``*`` places every module the line does not name, so that a new rule or format needs no line here): no
module of it imports one of the same subpackage listed above it.

The package is what the wheel holds: no module of it imports ``scripts`` (the benchmarks and comparisons beside it,
which the wheel does not ship), anywhere in its source.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "headprune"
ARCHITECTURE = ROOT / "docs" / "architecture.md"

# Imports that may break a rule, each with the reason it may: an allowed import may point to a higher layer, and
# loops are looked for without it. One that no longer breaks a rule fails too: remove it.
ALLOWED: dict[tuple[str, str], str] = {}


def module_files(package: Path = PACKAGE) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` file under ``package`` (a package is its ``__init__``)."""
    modules = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def imports_of(name: str, path: Path, modules: dict[str, Path], top: str = "headprune") -> set[str]:
    """The modules of package ``top`` that module ``name`` imports anywhere in its source (itself excluded); an import
    of a module of ``top`` that does not exist is kept under the name imported (``problems`` reports it)."""
    found = set()
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.split(".")[0] == top)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the importer's package, one level up per extra dot
                package = name.split(".") if is_package else name.split(".")[:-1]
                base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
            if base.split(".")[0] != top:
                continue
            # ``from pkg import sub`` imports the module pkg.sub; ``from mod import name`` imports mod.
            found.update(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                         for alias in node.names)
    found.discard(name)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = module_files()
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def scripts_imports(package: Path = PACKAGE) -> list[str]:
    """``MODULE imports SCRIPT`` for every import of ``scripts`` (the tree beside the package) by a module of it."""
    modules = module_files(package)
    return [f"{name} imports {target}" for name, path in modules.items()
            for target in sorted(imports_of(name, path, modules, top="scripts"))]


def documented_sublayers(text: str | None = None) -> dict[str, list[list[str]]]:
    """The subpackages whose modules docs/architecture.md's Code layout orders (``- `search/rules/`: `a` > `b`, `c```),
    each its layers highest first, as dotted module names (``__init__``: the subpackage itself)."""
    text = ARCHITECTURE.read_text(encoding="utf-8") if text is None else text
    section = re.search(r"^## Code layout\n(.*?)(?=^## |\Z)", text, flags=re.DOTALL | re.MULTILINE)
    assert section, "docs/architecture.md has a '## Code layout' section"
    found = {}
    for package, order in re.findall(r"^- `([\w/]+)/`: (.*)$", section.group(1), flags=re.MULTILINE):
        dotted = "headprune." + package.replace("/", ".")
        found[dotted] = [[dotted if name == "__init__" else f"{dotted}.{name}"
                          for name in re.findall(r"`([^`]+)`", part)]
                         for part in order.split(" > ")]  # ``PACKAGE.*``: every module not named
    return found


def sublayer_problems(graph: dict[str, set[str]], sublayers: dict[str, list[list[str]]]) -> list[str]:
    """Every import, within an ordered subpackage, of a module listed above the importer (a higher layer), every module
    of the subpackage its order does not place, and every entry of the order that names no module."""
    found = []
    for package, layers in sublayers.items():
        rank = {module: index for index, entries in enumerate(layers) for module in entries}
        inside = {m for m in graph if m == package or m.startswith(package + ".")}
        rest = rank.pop(package + ".*", None)
        if rest is not None:
            rank.update({m: rest for m in inside - rank.keys()})
        found += [f"{package}'s order names {m}, which is no module" for m in sorted(rank.keys() - inside)]
        found += [f"{m} has no place in {package}'s order: add it to docs/architecture.md"
                  for m in sorted(inside - rank.keys())]
        for module in sorted(inside & rank.keys()):
            for target in sorted(graph[module] & rank.keys()):
                if rank[target] < rank[module]:
                    found.append(f"{module} imports {target}, listed above it in {package}'s order")
    return found


def documented_layers(text: str | None = None) -> list[list[str]]:
    """The layers written in docs/architecture.md's Code layout, highest first: each a list of dotted module names (a name
    ending in ``.`` is a package: it covers the package and everything in it; ``__init__`` is the root)."""
    text = ARCHITECTURE.read_text(encoding="utf-8") if text is None else text
    section = re.search(r"^## Code layout\n(.*?)(?=^## |\Z)", text, flags=re.DOTALL | re.MULTILINE)
    assert section, "docs/architecture.md has a '## Code layout' section"
    layers = []
    # An item is a line "N. ..." and the indented lines that continue it.
    for line in re.findall(r"^\d+\. (.*(?:\n[ \t]+.*)*)", section.group(1), flags=re.MULTILINE):
        entries = []
        for entry in re.findall(r"`([^`]+)`", line):
            entry = entry.removesuffix(".py")
            dotted = "headprune" if entry == "__init__" else "headprune." + entry.strip("/").replace("/", ".")
            entries.append(dotted + "." if entry.endswith("/") else dotted)
        layers.append(entries)
    assert layers, "docs/architecture.md's Code layout lists the layers (a numbered list, highest first)"
    return layers


def layer_of(module: str, layers: list[list[str]]) -> int | None:
    """Index of ``module``'s layer (0 = highest), by its most specific entry; None when no entry covers it."""
    best, depth = None, -1
    for index, entries in enumerate(layers):
        for entry in entries:
            covers = module == entry if not entry.endswith(".") else (module + ".").startswith(entry)
            if covers and len(entry) > depth:
                best, depth = index, len(entry)
    return best


def loops(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import loops: paths ``a -> ... -> a`` covering every module of each strongly connected group of two or
    more modules (Tarjan's algorithm, iterative; then the shortest loop through each module no loop so far passes)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.add(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(group)
    found = []
    for group in groups:
        covered: set[str] = set()
        for start in sorted(group - covered):
            if start not in covered:
                found.append(_shortest_loop(graph, group, start))
                covered.update(found[-1])
    return found


def _shortest_loop(graph: dict[str, set[str]], group: set[str], start: str) -> list[str]:
    paths = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for child in sorted(graph[node] & group):
            if child == start:
                return paths[node] + [start]
            if child not in paths:
                paths[child] = paths[node] + [child]
                queue.append(child)
    raise AssertionError(f"no loop through {start} in {sorted(group)}")  # a strongly connected group has one


def problems(graph: dict[str, set[str]], layers: list[list[str]], *,
             allowed: dict[tuple[str, str], str] = ALLOWED) -> list[str]:
    """Every broken rule, one line each (an empty list: the layering holds)."""
    found = []
    for entry in (e for entries in layers for e in entries):
        if not any(m == entry or (m + ".").startswith(entry) for m in graph):
            found.append(f"docs/architecture.md's layers name {entry.rstrip('.')!r}, which is no module: remove or rename it")
    for module in sorted(graph):
        if layer_of(module, layers) is None:
            found.append(f"{module} has no layer: add it to docs/architecture.md's Code layout list")
    upward = set()
    for module, imported in sorted(graph.items()):
        found += [f"{module} imports {target}, which is no module" for target in sorted(imported - graph.keys())]
        for target in sorted(imported & graph.keys()):
            mine, theirs = layer_of(module, layers), layer_of(target, layers)
            if mine is not None and theirs is not None and theirs < mine:
                upward.add((module, target))
                if (module, target) not in allowed:
                    found.append(f"{module} (layer {mine + 1}) imports {target}, a higher layer ({theirs + 1})")
    unexcused = {module: imported - {t for m, t in allowed if m == module} for module, imported in graph.items()}
    found += ["import loop: " + " -> ".join(loop) for loop in loops(unexcused)]
    for module, target in allowed:
        if target not in graph.get(module, ()):
            found.append(f"allowed import {module} -> {target} no longer occurs: remove it from ALLOWED")
        elif (module, target) not in upward and not reaches(graph, target, module):
            found.append(f"allowed import {module} -> {target} breaks no rule now: remove it from ALLOWED")
    return found


def reaches(graph: dict[str, set[str]], start: str, goal: str) -> bool:
    """Whether a chain of imports leads from ``start`` to ``goal``."""
    seen, todo = {start}, [start]
    while todo:
        for child in graph.get(todo.pop(), ()):
            if child == goal:
                return True
            if child not in seen:
                seen.add(child)
                todo.append(child)
    return False


def test_the_package_keeps_its_layers_and_has_no_import_loops() -> None:
    found = problems(import_graph(), documented_layers())
    assert not found, "\n".join(found)


def test_subpackages_keep_their_own_order() -> None:
    sublayers = documented_sublayers()
    assert {"headprune.search.rules", "headprune.search.simulation"} <= sublayers.keys()
    found = sublayer_problems(import_graph(), sublayers)
    assert not found, "\n".join(found)


def test_the_package_imports_nothing_from_scripts() -> None:
    """The wheel ships ``headprune/`` alone: a module that imported ``scripts`` would work in a checkout only."""
    found = scripts_imports()
    assert not found, "\n".join(found)


def test_the_scripts_have_no_import_loops() -> None:
    """scripts/ (the benchmarks in scripts/bench, run as ``python -m scripts.bench.NAME``, and the tools beside them)
    keeps the second rule too: gpu_check and protocol once imported each other."""
    modules = module_files(ROOT / "scripts")
    graph = {name: imports_of(name, path, modules, top="scripts") for name, path in modules.items()}
    assert {"scripts.bench.gpu_inputs", "scripts.bench.gpu_parts"} <= graph["scripts.bench.protocol"]
    found = loops(graph)
    assert not found, "\n".join("import loop: " + " -> ".join(loop) for loop in found)


# The checker itself, on small made-up packages: each rule can fail.
def _write(root: Path, files: dict[str, str]) -> dict[str, set[str]]:
    for relative, source in files.items():
        path = root / "headprune" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source, encoding="utf-8")
    modules = module_files(root / "headprune")
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def test_imports_inside_functions_relative_and_type_checking_ones_all_count(tmp_path: Path) -> None:
    graph = _write(tmp_path, {
        "__init__.py": "", "low.py": "X = 1\n", "pkg/__init__.py": "", "pkg/sub.py": "",
        "top.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from headprune.low import X\n"
                  "def f():\n    import headprune.pkg.sub\n",
        "pkg/rel.py": "from . import sub\nfrom ..low import X\nfrom headprune.pkg import sub as s\n",
    })
    assert graph["headprune.top"] == {"headprune.low", "headprune.pkg.sub"}
    assert graph["headprune.pkg.rel"] == {"headprune.pkg.sub", "headprune.low"}


def test_an_upward_import_a_loop_and_an_unplaced_module_are_each_reported(tmp_path: Path) -> None:
    graph = _write(tmp_path, {
        "__init__.py": "", "high.py": "from headprune import low\n",
        "low.py": "def f():\n    from headprune.high import g\n",  # upward, and a loop with high
        "stray.py": "from headprune.gone import x\n",
    })
    layout = "## Code layout\n1. `__init__`, `high`\n2. `low`,\n   `gone/`\n## Next\n"
    found = problems(graph, documented_layers(layout), allowed={})
    assert "headprune.low (layer 2) imports headprune.high, a higher layer (1)" in found
    assert "import loop: headprune.high -> headprune.low -> headprune.high" in found
    assert "headprune.stray has no layer: add it to docs/architecture.md's Code layout list" in found
    assert "docs/architecture.md's layers name 'headprune.gone', which is no module: remove or rename it" in found
    assert "headprune.stray imports headprune.gone, which is no module" in found
    assert len(found) == 5


def test_an_import_of_scripts_and_a_subpackage_out_of_order_are_each_reported(tmp_path: Path) -> None:
    graph = _write(tmp_path, {
        "__init__.py": "", "pkg/__init__.py": "from headprune.pkg import low\n",
        "pkg/low.py": "def f():\n    from headprune.pkg import high\n    import scripts.admission\n",
        "pkg/high.py": "from headprune.pkg import low\n", "pkg/stray.py": "",
    })
    assert scripts_imports(tmp_path / "headprune") == ["headprune.pkg.low imports scripts.admission"]
    order = documented_sublayers("## Code layout\n- `pkg/`: `__init__` > `high` > `low`, `gone`\n## Next\n")
    assert sublayer_problems(graph, order) == [
        "headprune.pkg's order names headprune.pkg.gone, which is no module",
        "headprune.pkg.stray has no place in headprune.pkg's order: add it to docs/architecture.md",
        "headprune.pkg.low imports headprune.pkg.high, listed above it in headprune.pkg's order"]
    placed = documented_sublayers("## Code layout\n- `pkg/`: `__init__` > `*` > `low`\n## Next\n")  # high, stray
    assert sublayer_problems(graph, placed) == [
        "headprune.pkg.low imports headprune.pkg.high, listed above it in headprune.pkg's order"]


def test_an_allowed_import_is_excused_and_fails_once_it_breaks_no_rule(tmp_path: Path) -> None:
    graph = _write(tmp_path, {"__init__.py": "", "high.py": "import headprune.low\n",
                              "low.py": "import headprune.high\n"})
    layers = documented_layers("## Code layout\n1. `__init__`, `high`\n2. `low`\n## Next\n")
    allowed = {("headprune.low", "headprune.high"): "a reason"}  # upward, and the loop's only way back
    assert problems(graph, layers, allowed=allowed) == []
    same_layer = documented_layers("## Code layout\n1. `__init__`, `high`, `low`\n## Next\n")
    assert problems(graph, same_layer, allowed=allowed) == []  # still the loop's way back
    graph["headprune.high"].clear()  # high no longer imports low: no loop, but still upward
    assert problems(graph, layers, allowed=allowed) == []
    assert problems(graph, same_layer, allowed=allowed) == [
        "allowed import headprune.low -> headprune.high breaks no rule now: remove it from ALLOWED"]
    graph["headprune.low"].clear()
    assert problems(graph, layers, allowed=allowed) == [
        "allowed import headprune.low -> headprune.high no longer occurs: remove it from ALLOWED"]
