"""Red-team findings against the person-level privacy unit (issue 26).  Each test states a way one person's
true privacy loss can exceed what the accountant charges, or a release's true sensitivity can exceed the
calibrated one; each FAILS on the code it was written against (branch redteam26, base 61a61ff).

No statistical test: every assertion is exact (no false-failure probability)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from dpmagic import Session
from dpmagic.errors import DPMagicError

COLUMNS: dict[str, Any] = {
    "pid": {"type": "int", "lower": 0, "upper": 9},
    "wave": {"type": "int", "lower": 1, "upper": 3},
    "amt": {"type": "float", "lower": 0.0, "upper": 10.0},
}


def schema(unit: dict[str, Any]) -> dict[str, Any]:
    return {"table": "t", "dataset": "panel", "privacy_unit": unit, "columns": COLUMNS}


def panel() -> pd.DataFrame:
    """Three persons, each with one row in each of three waves (a panel)."""
    rows = [(p, w, float(p + w)) for p in range(3) for w in (1, 2, 3)]
    return pd.DataFrame(rows, columns=list(COLUMNS)).astype({"pid": "int64", "wave": "int64", "amt": "float64"})


# ---- finding 1: the ledger does not pin the privacy unit -------------------------------------------------------
# The ledger key and the binding check (dpmagic.accountant.binding.open_binding) use the domain fingerprint, which
# leaves `privacy_unit` out as free text.  At person level it is not free text: the recorded charges are replayed
# with the *current* unit's K′ and separating columns, so re-binding the same data set with a smaller max_rows, an
# extra invariant column (mode "first"), another salt, or a row-level unit re-interprets the earlier releases.
@pytest.mark.parametrize(
    "second",
    [
        {"id": "pid", "max_rows": 1},  # K′ 3 → 1: K′·γ of the replayed charges is γ
        {"id": "pid", "max_rows": 3, "invariant": ["wave"], "invariant_mode": "first"},  # wave now "separates"
    ],
    ids=["smaller-max_rows", "new-invariant-first"],
)
def test_rebinding_with_another_unit_cannot_reinterpret_recorded_charges(tmp_path: Path, second) -> None:
    """Session 1 (K = 3, no invariant) releases one ε = 1 query per wave: the panel's every person is touched by
    all three, so one person's loss is 3 = the budget.  A second session on the same ledger and data set with an
    edited unit must either be refused at binding or still charge ≥ 3 (so refuse any further query); it is
    accepted and charges 1, and admits more releases about the same persons."""
    ledger = tmp_path / "ledger.sqlite"
    df = panel()
    first = Session(df, schema({"id": "pid", "max_rows": 3}), "epsilon=3", ledger=ledger)
    for w in (1, 2, 3):
        first.query(f"SELECT COUNT(*) FROM t WHERE wave = {w}", epsilon=1.0)
    assert first.accountant.charged_weight == pytest.approx(3.0)  # every person is in all three waves
    try:
        again = Session(df, schema(second), "epsilon=3", ledger=ledger)
    except DPMagicError:
        return  # refused at binding: sound
    # accepted: it must still know that one person has lost 3 (the true loss of every person of the panel)
    assert again.accountant.charged_weight >= 3.0 - 1e-9, (
        f"the re-bound session charges {again.accountant.charged_weight} for releases that cost each person 3"
    )


def test_rebinding_with_the_same_unit_continues_its_budget(tmp_path: Path) -> None:
    """The fix keeps the ordinary case: the same person unit (keys in another order) binds again and continues."""
    ledger = tmp_path / "l.sqlite"
    unit = {"id": "pid", "max_rows": 3, "invariant": [], "salt": "s"}
    s1 = Session(panel(), schema(unit), budget=3.0, ledger=str(ledger))
    s1.query("SELECT COUNT(*) FROM t WHERE wave = 1", epsilon=1.0)
    again = {"salt": "s", "invariant": [], "max_rows": 3, "id": "pid"}
    s2 = Session(panel(), schema(again), budget=3.0, ledger=str(ledger))
    assert s2.accountant.charged_weight == pytest.approx(1.0)
    with pytest.raises(DPMagicError, match="another privacy unit"):
        Session(panel(), schema("one row"), budget=3.0, ledger=str(ledger))
