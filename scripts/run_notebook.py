"""Execute a notebook in a real Jupyter kernel (nbclient) and print each cell's source and what it showed
(for a %%dpquery cell: its SQL, the answer, notes, the cost line, the noise line and the budget line).

Usage: python scripts/run_notebook.py notebooks/quickstart.ipynb [--save executed.ipynb]
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

_TAG = re.compile(r"<[^>]+>")


def text_of(output: nbformat.NotebookNode) -> str:
    if output.output_type == "stream":
        return output.text
    if output.output_type == "error":
        return f"{output.ename}: {output.evalue}\n"
    data = output.get("data", {})
    plain = data.get("text/plain", "")
    if "application/vnd.jupyter.widget-view+json" in data:
        if plain.startswith("dpmagic budget"):  # the panel's text form
            return plain + "\n"
        return "[live budget panel: a widget, shown in JupyterLab]\n"
    if "image/png" in data:
        return "[figure]\n"
    if "text/plain" in data and not data["text/plain"].startswith("<IPython.core.display.HTML"):
        return data["text/plain"] + "\n"
    if "text/html" in data:
        return _TAG.sub(" ", data["text/html"]).strip() + "\n"
    return ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("notebook")
    parser.add_argument("--save", default=None, help="write the executed notebook here")
    parser.add_argument("--timeout", type=int, default=600)
    args = parser.parse_args()
    path = Path(args.notebook)
    nb = nbformat.read(path, as_version=4)
    NotebookClient(
        nb, timeout=args.timeout, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    ).execute()
    for i, c in enumerate(nb.cells, 1):
        if c.cell_type != "code":
            continue
        lines = c.source.splitlines() or [""]
        print(f"--- [{i}] {lines[0]}")
        for more in lines[1:]:  # the SQL of a %%dpquery cell, the rest of a code cell
            print(f"          {more}")
        for o in c.get("outputs", []):
            sys.stdout.write(text_of(o))
    if args.save:
        nbformat.write(nb, args.save)
    return 0


if __name__ == "__main__":
    sys.exit(main())
