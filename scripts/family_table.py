"""docs/models.md's table of families, rendered from the family files' registry (``headprune.loading.adapters``).

    python -m scripts.family_table            # print the table
    python -m scripts.family_table --update   # write it into docs/models.md (below its marker line)
    python -m scripts.family_table --check    # exit 1 when docs/models.md's table is not the registry's

The table follows the line ``<!-- families: python -m scripts.family_table --update -->``: the run of lines starting
with ``|`` after it. Each row is one registered model type; nothing in it is written by hand.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "models.md"
MARK = "<!-- families: python -m scripts.family_table --update -->"


def family_table() -> str:
    """Every supported model type: its adapter, the layouts, what each export format writes, and its note."""
    from headprune.loading.adapters import FAMILIES

    rows = ["| model type | adapter | sliced | dense | ONNX | GGUF | notes |", "|---|---|---|---|---|---|---|"]
    for model_type, family in sorted(FAMILIES.items()):
        adapter, gguf = family.adapter, family.gguf
        onnx = "decoder with cache (GenAI)" if family.genai else "logits graph"
        onnx += ", text only" if adapter.text_config else ""  # a vision-language model: no vision tower in the graph
        if family.onnx_refused:  # (a Gated DeltaNet's scan: docs/models.md)
            onnx = "-"
        # run in llama.cpp: test_gguf.py, test_gguf_families.py, test_gguf_encoders.py
        written = ("-" + (f" ({family.gguf_refused})" if family.gguf_refused else "")) if gguf is None else (
            f"llama.cpp `{gguf.arch}`") + (
            " (embeddings: the bare encoder)" if gguf.encoder else "") + (
            ", dense only" if gguf.dense_only else ", sliced too (per-layer head counts)" if gguf.per_layer else
            "; sliced as `deci`")
        rows.append(f"| `{model_type}` ({family.tiny.config_class.removesuffix('Config')}) | {adapter.family} | "
                    f"{'-' if adapter.dense_only else 'yes'} | yes | {onnx} | {written} | {family.note} |")
    return "\n".join(rows) + "\n"


def replaced(text: str, table: str) -> str:
    """``text`` with the table below its marker replaced by ``table``."""
    lines = text.splitlines(keepends=True)
    start = lines.index(MARK + "\n") + 1
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return "".join(lines[:start] + [table] + lines[end:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--update", action="store_true", help="write the table into docs/models.md")
    parser.add_argument("--check", action="store_true", help="exit 1 when docs/models.md's table differs")
    args = parser.parse_args(argv)
    table = family_table()
    text = DOC.read_text(encoding="utf-8")
    if args.check:
        same = replaced(text, table) == text
        print("docs/models.md: the family table is the registry's" if same else
              "docs/models.md: the family table differs: run python -m scripts.family_table --update")
        return 0 if same else 1
    if args.update:
        DOC.write_text(replaced(text, table), encoding="utf-8")
        return 0
    sys.stdout.write(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
