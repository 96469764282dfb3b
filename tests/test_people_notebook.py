"""notebooks/people.ipynb in a real kernel: row level vs person level, parallel composition on invariant columns only.

The notebook prints one ``RESULT | unit | queries | charged c | sequential s`` line per family of queries (eight
COUNTs, one per region; twelve, one per month), each in a fresh session at ε = 0.05 per query.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "people.ipynb"


def _outputs() -> str:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOK.parent)}}
    ).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors, errors
    return "\n".join(
        str(o.get("text", "")) + str(o.get("data", {}).get("text/plain", ""))
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
    )


@pytest.mark.slow
def test_people_notebook_composes_in_parallel_on_invariant_columns_only() -> None:
    text = _outputs()
    results = {}
    for line in text.splitlines():
        if line.startswith("RESULT |"):
            _, unit, label, charged, sequential = (p.strip() for p in line.split("|"))
            results[(unit, label.split(" (")[0])] = (float(charged.split()[1]), float(sequential.split()[1]))
    assert len(results) == 4, results
    eps = 0.05
    region, month = "one COUNT per region", "one COUNT per month"
    # row level: both families are disjoint on the domain: one query's cost each
    assert results[("row", region)] == (pytest.approx(eps), pytest.approx(8 * eps))
    assert results[("row", month)] == (pytest.approx(eps), pytest.approx(12 * eps))
    # person level: regions (invariant) still compose in parallel; months (varying) fall back to sequential
    assert results[("person", region)][0] == pytest.approx(eps)
    assert results[("person", month)][0] == pytest.approx(12 * eps)
    assert "one person (patient_id), at most 40 rows each" in text
