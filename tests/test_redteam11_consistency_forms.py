"""Red team, session 11: the consistent estimates' linear model matches what each query form actually released.

At a very large ε every noise is 0 except with a negligible probability, so the raw releases are the exact answers;
a wrong coefficient, a wrong region or an invented identity would then move a consistent value away from its raw
one (the projection only moves values that violate an identity it believes in).  Forms: GROUP BY keys the WHERE
excludes (drawn, not shown), centred sums with centres that depend on the WHERE box, an analyst's clamp beside the
declared bounds, a clamp disjoint from the WHERE box, JOINs with a public lookup (INNER and LEFT: the NULL group),
CTE and FROM-subquery forms, conditional aggregates (common and different conditions), a scalar subquery, VAR's centred sums of squares, both neighbouring
relations and both noise families.

False-failure probability: OpenDP's noise is not seeded, so each run is random.  Every COUNT, SUM and centred-sum
value is non-zero noise with probability at most 2e^(−1/b) (discrete Laplace of scale b) or 2e^(−1/(2σ²)) (discrete
Gaussian, σ ≤ 1/2); the test first asserts, from the public scales alone, that the sum of these over all released
values is ≤ 1e-9 (so all of them are exact with probability ≥ 1 − 1e-9).  The sums of squares (VAR) keep noise
of a few units; their inconsistency moves the other values by their variance ratio times it, which is below
1e-30 here, far inside the 1e-6 tolerance.  The false-failure probability is therefore ≤ 1e-9 per case.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

import dpmagic
from dpmagic.domain.schema import Schema
from dpmagic.noise.calibration import Noise

SCHEMA = Schema.of(
    {
        "dataset": "forms",
        "table": "t",
        "columns": {
            "region": {"type": "int", "lower": 1, "upper": 6},
            "age": {"type": "int", "lower": 0, "upper": 90},
            "sex": {"type": "categorical", "values": ["F", "M"]},
        },
        "public_tables": {
            "regions": {
                "key": "code",
                "rows": [
                    {"code": 1, "name": "North", "zone": "A"},
                    {"code": 2, "name": "North", "zone": "B"},
                    {"code": 3, "name": "South", "zone": "A"},
                ],
            }
        },
    }
)
QUERIES = [
    "SELECT COUNT(*) FROM t",
    "SELECT region, COUNT(*) FROM t GROUP BY region",
    "SELECT r.name, COUNT(*) FROM t LEFT JOIN regions r ON t.region = r.code GROUP BY r.name",
    "SELECT r.name, COUNT(*), SUM(age), AVG(age) FROM t JOIN regions r ON t.region = r.code WHERE r.zone = 'A' "
    "GROUP BY r.name",
    "SELECT AVG(age), VAR(age) FROM t WHERE region = 3",
    "SELECT AVG(age), VAR(age) FROM t",
    "SELECT AVG(age), VAR(age) FROM t WHERE age < 40",
    "SELECT AVG(age), VAR(age) FROM t WHERE age >= 40",
    "WITH x AS (SELECT * FROM t WHERE age > 40) SELECT COUNT(*) FROM x",
    "SELECT COUNT(*) FROM (SELECT * FROM t WHERE age <= 40) sub",
    "SELECT age, COUNT(*) FROM t WHERE age BETWEEN 20 AND 25 GROUP BY age",
    "SELECT sex, COUNT(*), SUM(age) FROM t WHERE sex = 'M' GROUP BY sex",
    "SELECT SUM(CASE WHEN sex = 'F' THEN age ELSE 0 END), COUNT(CASE WHEN sex = 'F' THEN 1 END) FROM t",
    "SELECT SUM(LEAST(GREATEST(age, 20), 30)) FROM t",
    "SELECT SUM(LEAST(GREATEST(age, 20), 30)), COUNT(*) FROM t WHERE age >= 50",
    "SELECT SUM(LEAST(GREATEST(age, 20), 30)) FROM t WHERE age < 50",
    "SELECT AVG(LEAST(GREATEST(age, 20), 30)) FROM t WHERE age >= 50",
    "SELECT COUNT(*) FROM t WHERE age > (SELECT AVG(age) FROM t)",
    "SELECT COUNT(*) FILTER (WHERE sex = 'M'), COUNT(*) FILTER (WHERE sex = 'F') FROM t",
]


def _nonzero_bound(noise: Noise) -> float:
    """An upper bound of P(noise ≠ 0) per value."""
    if noise.kind == "discrete_laplace":
        return 2.0 * math.exp(-1.0 / noise.scale)
    assert noise.kind == "discrete_gaussian" and noise.scale <= 0.5
    return 2.0 * math.exp(-1.0 / (2.0 * noise.scale**2)) / (1.0 - math.exp(-1.0 / (2.0 * noise.scale**2)))


def _first_order_noises(s: dpmagic.Session) -> list[Noise]:
    """The noise law of every released COUNT, raw SUM and centred-sum value of the session (one per cell)."""
    out: list[Noise] = []
    for r in s.results:
        d = r.drawn
        laws = ([d.count[1]] if d.count is not None else []) + [n for _, n in d.raw.values()]
        laws += [p.total.noise for _, _, p in d.centred.values()]
        out += laws * r.query.n_cells
    return out


@pytest.fixture(scope="module")
def data() -> pd.DataFrame:
    rng = np.random.default_rng(11)
    return pd.DataFrame(
        {
            "region": rng.integers(1, 7, 3000),
            "age": rng.integers(0, 91, 3000),
            "sex": rng.choice(["F", "M"], 3000),
        }
    )


@pytest.mark.parametrize(
    ("budget", "cost", "neighbors"),
    [
        ("epsilon=1000000.0", {"epsilon": 20000.0}, "add-remove"),
        ("epsilon=1000000.0", {"epsilon": 20000.0}, "replace"),
        ("rho=100000000000.0", {"rho": 1000000000.0}, "add-remove"),
    ],
)
def test_consistent_equals_raw_when_noise_vanishes(
    data: pd.DataFrame, budget: str, cost: dict[str, float], neighbors: str
) -> None:
    s = dpmagic.Session(data, SCHEMA, budget, neighbors=neighbors)
    for sql in QUERIES:
        s.query(sql, **cost)
    assert sum(_nonzero_bound(n) for n in _first_order_noises(s)) <= 1e-9
    table = s.consistent()
    assert table.attrs["dp_notes"] == []  # every form above is included
    assert table.attrs["dependencies"] >= 10
    assert len(table) >= 35
    tol = 1e-6 * (1.0 + table["raw"].abs())
    assert ((table["consistent"] - table["raw"]).abs() <= tol).all()
    counts = table[table["statistic"] == "COUNT(*)"]
    first = counts[counts["query"] == counts["query"].min()]
    assert float(first["raw"].iloc[0]) == len(data)
    by_region = counts[counts["query"] == sorted(counts["query"].unique())[1]]
    truth = data["region"].value_counts().sort_index()
    assert by_region["raw"].tolist() == [float(x) for x in truth.tolist()]
