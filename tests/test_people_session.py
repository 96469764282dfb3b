"""A realistic person-level session (issue 26): 200 mixed queries on a generated claims table (benchmarks/claims.py).

* the charged bound is the smallest of the three proven person-level bounds, computed here independently
  (:class:`dpmagic.overlap.OverlapEngine` on the boxes projected on the id and invariant columns; K′ × the
  row-level γ of the full boxes; Σw), and at most half of sequential composition;
* truncation keeps exactly min(n, K) claims of a patient with n claims (no per-group bound), so the table
  shrinks by Σ max(0, n − K) and no query's box gains a row;
* every COUNT's noise is calibrated to the declared bound (scale K/ε: one patient moves a count by at most K;
  COUNT(DISTINCT patient_id): 1/ε), and the released intervals hold the truncated table's exact counts as often
  as they say (a binomial bound with false-failure probability below 1e-9).
"""

from __future__ import annotations

import numpy as np
import pytest
from claims import claims, claims_schema, rows_per_patient, session_queries
from scipy.stats import binom

from dpmagic import Session
from dpmagic.domain.sets import Box
from dpmagic.overlap import OverlapEngine

K = 40
EPS = 0.05
ROWS = 20_000


pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def session() -> tuple[Session, Session, list[dict], list]:
    df = claims(ROWS, seed=3)
    person = Session(df, claims_schema(K), "epsilon=100", ledger=None)
    rows = Session(df, claims_schema(None), "epsilon=100", ledger=None)
    qs = session_queries(200, seed=1)
    results = [person.query(q["sql"], epsilon=EPS) for q in qs]
    return person, rows, qs, results


def _gamma(schema, boxes) -> float:
    eng = OverlapEngine(schema, time_limit=30)
    eng.extend(boxes, np.full(len(boxes), EPS))
    b = eng.bounds()
    assert b.overlap.exact
    return float(b.overlap.upper)


def test_charged_is_the_least_person_bound_and_at_most_half_of_sequential(session) -> None:
    person, _, qs, _ = session
    unit = person.schema.person_unit
    boxes = [person.parse(q["sql"]).coverage for q in qs]
    sep = set(unit.separating)
    projected = _gamma(person.schema, [Box({c: s for c, s in b.constraints.items() if c in sep}) for b in boxes])
    rows_bound = unit.kept_rows * _gamma(person.schema, boxes)
    sequential = EPS * len(qs)
    b = person.bounds()
    assert b.sequential == pytest.approx(sequential)
    assert b.charged == pytest.approx(min(projected, rows_bound, sequential))
    assert b.charged <= sequential / 2
    assert sum(q["invariant"] for q in qs) >= sum(q["varying"] for q in qs)


def test_truncation_keeps_min_n_K_rows_per_patient(session) -> None:
    person, rows, qs, _ = session
    n = rows_per_patient(claims(ROWS, seed=3))
    kept = int(np.minimum(n.to_numpy(), K).sum())
    count = "SELECT COUNT(*) AS n FROM claims"
    assert int(rows.backend.evaluate(rows.parse(count)).counts.sum()) == ROWS
    assert int(person.backend.evaluate(person.parse(count)).counts.sum()) == kept < ROWS
    for q in qs[:50]:
        sql = count + (f" WHERE {q['where']}" if q["where"] else "")
        before = int(rows.backend.evaluate(rows.parse(sql)).counts.sum())
        after = int(person.backend.evaluate(person.parse(sql)).counts.sum())
        assert 0 <= before - after <= ROWS - kept


def test_noise_follows_the_declared_bounds(session) -> None:
    person, _, qs, results = session
    covered = cells = 0
    for q, res in zip(qs, results, strict=True):
        if q["kind"] == "count distinct":
            assert [v.scale * v.granularity for v in res.noise.values()] in ([], [pytest.approx(1 / EPS)])
        if q["kind"] not in ("count", "group by"):
            continue
        (noise,) = res.noise.values()
        assert noise.scale * noise.granularity == pytest.approx(K / EPS)  # one patient moves a count by ≤ K
        exact = person.backend.evaluate(res.query).counts
        df = res.df
        covered += int(((df["n_ci_low"].to_numpy() <= exact) & (exact <= df["n_ci_high"].to_numpy())).sum())
        cells += len(exact)
    # each cell's 95% interval misses with probability ≤ 0.05, independently (fresh noise per cell); fail only if
    # more miss than a Binomial(cells, 0.05) exceeds with probability < 1e-9
    assert cells > 100
    assert cells - covered <= binom.isf(1e-9, cells, 0.05)
