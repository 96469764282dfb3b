"""What the analyst sees at person level (issue 26, part A; docs/people.md §4), through a real IPython shell.

The budget texts speak of one person's worst case and show the unit; a query that is disjoint from earlier ones
only on a column that varies within a person says so and why.
"""

from __future__ import annotations

import pandas as pd
import pytest
from IPython.core.interactiveshell import InteractiveShell
from tests_support import run_cell as run

from dpmagic.domain.schema import Schema
from dpmagic.presentation.magics import current_session

PANEL = {
    "table": "panel",
    "privacy_unit": {"id": "pid", "max_rows": 2, "invariant": ["sex"]},
    "columns": {
        "pid": {"type": "int", "lower": 0, "upper": 1000},
        "sex": {"type": "categorical", "values": ["F", "M"]},
        "wave": {"type": "int", "lower": 1, "upper": 3},
    },
}


@pytest.fixture
def panel(ip: InteractiveShell) -> InteractiveShell:
    rows = [{"pid": p, "sex": "F" if p % 2 else "M", "wave": w} for p in range(40) for w in (1, 2, 3)]
    ip.user_ns.update(panel=pd.DataFrame(rows), panel_schema=Schema.from_dict(PANEL))
    result, cap = run(ip, "%dpsession panel --schema panel_schema --budget epsilon=4 --ledger memory")
    assert result.success, cap.stderr
    assert "privacy unit: one person (pid), at most 2 rows each" in cap.stdout
    return ip


def test_dry_run_says_why_a_wave_query_does_not_compose_in_parallel(panel: InteractiveShell) -> None:
    run(panel, "%%dpquery --epsilon 1\nSELECT COUNT(*) FROM panel WHERE wave = 1\n")
    result, cap = run(panel, "%%dpquery --dry-run --epsilon 1\nSELECT COUNT(*) FROM panel WHERE wave = 2\n")
    assert result.success, cap.stderr
    text = repr(result.result)
    assert "one person's worst case after it" in text and "worst-case row" not in text
    assert "only on non-invariant column 'wave': a person may have rows on both sides" in text
    assert current_session().spent == pytest.approx(1.0)  # a dry run spends nothing


def test_query_summary_names_the_fallback_to_k_rows(panel: InteractiveShell) -> None:
    for w in (1, 2):
        run(panel, f"%%dpquery --epsilon 1\nSELECT COUNT(*) FROM panel WHERE wave = {w}\n")
    result, cap = run(panel, "%%dpquery --epsilon 1\nSELECT COUNT(*) FROM panel WHERE wave = 3\n")
    assert result.success, cap.stderr
    summary = result.result.summary()
    assert "person: 2×exact" in summary and "charged as 2 × one row's worst case" in summary
    assert current_session().spent == pytest.approx(2.0)  # K′·γ = 2 < Σ = 3


def test_sex_queries_compose_in_parallel_and_the_budget_speaks_of_people(panel: InteractiveShell) -> None:
    run(panel, "%%dpquery --epsilon 1\nSELECT COUNT(*) FROM panel WHERE sex = 'F'\n")
    result, cap = run(panel, "%%dpquery --epsilon 1\nSELECT COUNT(*) FROM panel WHERE sex = 'M'\n")
    assert "rows on both sides" not in result.result.summary()
    assert current_session().spent == pytest.approx(1.0)
    result, cap = run(panel, "%dpbudget")
    text = cap.outputs[0].data["text/plain"]
    assert "privacy unit" in text and "one person (pid), at most 2 rows each" in text
    assert "one person's worst case" in text and "worst-case row" not in text
    assert "one person, by invariant columns" in text
    html = cap.outputs[0].data["text/html"]
    assert "one person's worst case" in html and "privacy unit: one person (pid)" in html
    result, cap = run(panel, "s = %dpbudget --json")
    s = panel.user_ns["s"]
    assert s["bounds"]["person"]["charged_by"] == "projection" and s["bounds"]["unit"].startswith("one person")


def test_epsilon_max_takes_what_one_persons_worst_case_leaves(panel: InteractiveShell) -> None:
    run(panel, "%%dpquery --epsilon 1\nSELECT COUNT(*) FROM panel WHERE wave = 1\n")
    result, cap = run(panel, "%%dpquery --epsilon max\nSELECT COUNT(*) FROM panel WHERE sex = 'F'\n")
    assert result.success, cap.stderr
    # projection: a person is in wave 1 and is F: 1 + w ≤ 4; K′·γ: 2·(1 + w) ≤ 4; Σ: 1 + w ≤ 4 → w = 3
    assert current_session().spent == pytest.approx(4.0)
    # the other sex is a disjoint set of people: it can still get 3 (4 − wave 1's 1)
    result, cap = run(panel, "%%dpquery --epsilon max\nSELECT COUNT(*) FROM panel WHERE sex = 'M'\n")
    assert result.success, cap.stderr
    assert current_session().spent == pytest.approx(4.0)
    result, cap = run(panel, "%%dpquery --epsilon 0.5\nSELECT COUNT(*) FROM panel WHERE wave = 2\n")
    out = cap.stderr + cap.stdout
    assert "refused" in out and "one person's worst-case privacy loss" in out


def test_ci_refusal_is_about_one_person(panel: InteractiveShell) -> None:
    run(panel, "%%dpquery --epsilon 3.5\nSELECT COUNT(*) FROM panel\n")
    result, cap = run(panel, "%%dpquery --ci 0.01\nSELECT COUNT(*) FROM panel WHERE wave = 1\n")
    out = cap.stderr + cap.stdout
    assert "refused" in out and "one person's worst case" in out
