"""Build the tutorial notebooks from their readable sources (one builder for all of them).

Every notebook is kept as a text source beside it — ``notebooks/NAME.md`` (MyST markdown: markdown text and
``{code-cell}`` blocks, magics written as they are typed) or ``notebooks/NAME.py`` (jupytext "percent"
format) — and ``notebooks/NAME.ipynb`` is generated from it, without outputs, with stable cell ids
(``cell-00``, ``cell-01``, ...), so rebuilding an unchanged source changes nothing.

    python scripts/build_notebooks.py            # rebuild every notebook from its source
    python scripts/build_notebooks.py --check    # exit 1 (naming them) if a committed notebook differs from its source

Edit the source, never the ``.ipynb``; ``tests/test_notebooks.py`` runs the check.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import jupytext
import nbformat

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
KERNELSPEC = {"display_name": "Python 3", "language": "python", "name": "python3"}


def sources(folder: Path = NOTEBOOKS) -> list[Path]:
    """The notebook sources in ``folder``: every ``*.md`` (but README.md) and ``*.py`` file."""
    found = [p for p in folder.glob("*.md") if p.name.lower() != "readme.md"] + list(folder.glob("*.py"))
    return sorted(found)


def build(source: Path) -> str:
    """The ``.ipynb`` text generated from one source (deterministic: same source, same bytes)."""
    nb = jupytext.read(source)
    nb.metadata = nbformat.NotebookNode({"kernelspec": dict(KERNELSPEC)})
    for i, cell in enumerate(nb.cells):
        cell.id = f"cell-{i:02d}"
        cell.metadata.pop("lines_to_next_cell", None)
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    nbformat.validate(nb)
    return nbformat.writes(nb) + "\n"


def target(source: Path) -> Path:
    return source.with_suffix(".ipynb")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="compare instead of writing; exit 1 on a difference")
    args = parser.parse_args(argv)
    stale: list[str] = []
    for src in sources():
        text, out = build(src), target(src)
        if args.check:
            if not out.exists() or out.read_text(encoding="utf-8") != text:
                stale.append(f"{out.name} (from {src.name})")
        else:
            out.write_text(text, encoding="utf-8")
            print(f"wrote {out.relative_to(NOTEBOOKS.parent)}")
    if stale:
        print("notebooks that differ from their sources (run: python scripts/build_notebooks.py):", ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
