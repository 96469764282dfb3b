"""The claims generator of benchmarks/claims.py (issue 26): seeded, skewed, invariant demographics, a valid schema."""

from __future__ import annotations

import numpy as np
import pandas as pd
from claims import BLOCK_PATIENTS, INVARIANT, claims, claims_schema, rows_per_patient

from dpmagic import Session
from dpmagic.domain.schema import Schema
from dpmagic.domain.unit import PersonUnit


def test_seeded_and_exact_size() -> None:
    a, b = claims(30_000, seed=5), claims(30_000, seed=5)
    pd.testing.assert_frame_equal(a, b)
    assert len(a) == 30_000 and len(claims(7)) == 7
    assert not claims(30_000, seed=6).equals(a)


def test_same_patients_whatever_the_size() -> None:
    """A larger table holds the smaller one's whole patients (fixed blocks of patients, each its own generator)."""
    small, large = claims(20_000), claims(BLOCK_PATIENTS * 12)
    whole, big = rows_per_patient(small), rows_per_patient(large)
    ids = whole.index[whole.index < whole.index.max()]  # the last patient may be cut
    assert (big.loc[ids] == whole.loc[ids]).all()


def test_skewed_rows_and_invariant_demographics() -> None:
    df = claims(200_000)
    n = rows_per_patient(df)
    assert n.min() >= 1 and n.median() < n.mean()  # right-skewed
    assert 0.01 < (n > 40).mean() < 0.10 and n.max() > 100  # some patients beyond K = 40, a long tail
    per = df.groupby("patient_id", observed=True)[list(INVARIANT)].nunique()
    assert (per == 1).all().all()  # demographics constant within a patient
    assert df.groupby("patient_id")["day"].nunique().max() > 1  # dates vary
    # month is the month of day (2025: not a leap year)
    days = pd.to_datetime("2025-01-01") + pd.to_timedelta(df["day"] - 1, unit="D")
    assert (days.dt.month.to_numpy() == df["month"].to_numpy()).all()


def test_schema_person_and_row_level_bind() -> None:
    df = claims(5_000)
    person = Schema.from_dict(claims_schema(40, per_group={"diagnosis": {"max_groups": 3, "max_rows": 10}}))
    unit = person.person_unit
    assert isinstance(unit, PersonUnit) and unit.id == "patient_id" and unit.invariant == INVARIANT
    assert unit.kept_rows == 30
    row = Schema.from_dict(claims_schema(None))
    assert row.person_unit is None and row.unit_label == "one row"
    assert row.dataset != person.dataset
    s = Session(df, row, "epsilon=1", ledger=None)  # the generated rows satisfy the declared domain
    assert len(s.backend.df) == len(df)
    assert np.isfinite(df["amount"]).all()


def test_session_queries_mostly_on_invariant_columns() -> None:
    from claims import session_queries

    from dpmagic.query.sql import parse_query

    qs = session_queries(200, seed=0)
    assert session_queries(200, seed=0) == qs and len(qs) == 200
    assert len({q["sql"] for q in qs}) == 200  # distinct: none answered from the cache
    assert {q["kind"] for q in qs} == {"count", "sum", "avg", "group by", "count distinct"}
    inv, var = sum(q["invariant"] for q in qs), sum(q["varying"] for q in qs)
    assert inv >= var and all(q["invariant"] + q["varying"] >= 1 for q in qs)
    schema = Schema.from_dict(claims_schema())
    for q in qs:
        parse_query(q["sql"], schema)  # every statement is in dpmagic's SQL subset
