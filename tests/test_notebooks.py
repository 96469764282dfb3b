"""Every tutorial notebook executes top to bottom in a real Jupyter kernel (nbclient)."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_executes(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    errors = [
        (i, o)
        for i, c in enumerate(nb.cells)
        if c.cell_type == "code" and "raises-exception" not in c.metadata.get("tags", [])
        for o in c.get("outputs", [])
        if o.output_type == "error"
    ]
    assert not errors, errors
    text = "\n".join(
        str(o.get("text", ""))
        + str(o.get("data", {}).get("text/plain", ""))
        + str(o.get("data", {}).get("text/html", ""))
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
    )
    assert "charged" in text


def test_quickstart_shows_answers_and_budget() -> None:
    nb = nbformat.read(NOTEBOOKS[[p.name for p in NOTEBOOKS].index("quickstart.ipynb")], as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3").execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    html = "".join(o.get("data", {}).get("text/html", "") for o in outputs)
    assert "people" in html and "ci_low" in html  # noisy answers with intervals
    # the refused query shows one readable line (IPython's UsageError goes to stderr, no traceback)
    refused = [o for o in outputs if o.output_type == "stream" and "BudgetExceededError" in o.text]
    assert len(refused) == 1 and "Traceback" not in refused[0].text
    assert any("remaining ε" in o.get("text", "") for o in outputs)


def test_committed_notebooks_match_their_sources() -> None:
    """Every .ipynb is exactly what scripts/build_notebooks.py builds from its text source (stable cell ids)."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    import build_notebooks as builder

    sources = builder.sources()
    assert {s.stem for s in sources} == {p.stem for p in NOTEBOOKS}, "every notebook needs a source and vice versa"
    for src in sources:
        assert builder.build(src) == builder.target(src).read_text(encoding="utf-8"), f"{src.name}: rebuild it"
        assert builder.build(src) == builder.build(src)
