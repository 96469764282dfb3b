"""Every release's declared sensitivity against brute force over all neighbouring data sets of a tiny domain.

Audit issue 10, item 1 ("Done when"): COUNT, SUM over int and float columns and AVG's two parts; with and without
GROUP BY and WHERE; under add/remove-one and replace-one neighbours; under pure ε-DP (L1, discrete Laplace),
ρ-zCDP (L2, discrete Gaussian) and μ-GDP (per-cell discrete Gaussians, μ split over the cells one step changes).

Brute force: the domain is every row of a tiny schema (3·2·6·3·5 = 540 rows; the float column takes 5 values,
its bounds among them).  The data sets are all multisets of at most 2 rows; the neighbouring pairs among them are
(D, D + x) with |D| ≤ 1 (add/remove) and (D + x, D + x′) with |D| ≤ 1 (replace).  For each pair the exact vector
the mechanism perturbs is computed directly from its definition (cells of the declared GROUP BY keys, rows in
the WHERE box, values quantised to the plan's float quantum and rounded to the plan's grid), and the largest
L1 / L2 / per-cell change and number of changed cells is compared with what the plan calibrated its noise to.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from tests_support import brute_change as _brute

from dpmagic.accountant.currency import CURRENCIES
from dpmagic.domain.schema import Schema
from dpmagic.noise.calibration import discrete_gaussian_gdp_sigma
from dpmagic.noise.sensitivity import coverage_of, patterns, release_sensitivity, value_range
from dpmagic.query.sql import parse_query
from dpmagic.releases.plan import plan_noise

TINY = Schema.from_dict(
    {
        "table": "t",
        "columns": {
            "g": {"type": "categorical", "values": ["a", "b", "c"]},
            "h": {"type": "categorical", "values": ["u", "v"]},
            "x": {"type": "int", "lower": -2, "upper": 3},
            "y": {"type": "int", "lower": 2, "upper": 4},  # max|y| > upper − lower
            "f": {"type": "float", "lower": -1.5, "upper": 2.5},
        },
    }
)
F_VALUES = (-1.5, -0.25, 0.0, 1.0, 2.5)
ROWS = [
    {"g": g, "h": h, "x": x, "y": y, "f": f}
    for g, h, x, y, f in itertools.product(("a", "b", "c"), ("u", "v"), range(-2, 4), range(2, 5), F_VALUES)
]
WHERES = [
    "",
    "WHERE g IN ('a', 'b')",
    "WHERE g = 'a'",
    "WHERE h = 'u'",
    "WHERE x >= 1",
    "WHERE x <= 0",
    "WHERE f >= 0",
    "WHERE f BETWEEN -0.25 AND 1.0 AND h = 'v'",
    "WHERE y <= 3 AND g IN ('b', 'c')",
    "WHERE x > 5",  # empty
]
GROUPS = [(), ("g",), ("g", "h")]
SELECTS = ["COUNT(*) AS n, SUM(x) AS sx, AVG(f) AS af", "SUM(f) AS sf, AVG(x) AS ax, SUM(y) AS sy"]
COST = {"pure": 0.7, "zcdp": 0.3, "gdp": 0.9}


def _contributions(q, column: str | None, unit: float, centre: float = 0) -> np.ndarray:
    """C[r, c]: what row r adds to cell c of the exact release (in the units the mechanism sums); ``centre``: the
    centred sum Σ(x − c) of AVG (issue 32)."""
    keys = list(itertools.product(*[TINY[g].values for g in q.group_by]))  # type: ignore[union-attr]
    out = np.zeros((len(ROWS), len(keys)), dtype=np.int64)
    for i, row in enumerate(ROWS):
        if not q.where.contains_row(row):
            continue
        cell = keys.index(tuple(row[g] for g in q.group_by))
        if column is None:
            out[i, cell] = 1
        elif column in ("x", "y"):
            out[i, cell] = row[column] - centre
        else:
            out[i, cell] = int(np.rint((row["f"] - centre) / unit))
    return out


CASES = list(itertools.product(["pure", "zcdp", "gdp"], [False, True], WHERES, GROUPS, SELECTS))


@pytest.mark.parametrize("definition, replace_one, where, group, select", CASES)
def test_declared_sensitivity_matches_brute_force(definition, replace_one, where, group, select) -> None:
    gb = f" GROUP BY {', '.join(group)}" if group else ""
    cols = "".join(f"{g}, " for g in group)
    q = parse_query(f"SELECT {cols}{select} FROM t {where}{gb}", TINY)
    currency = CURRENCIES[definition]
    plan = plan_noise(q, TINY, currency, COST[definition], replace_one=replace_one)
    releases = [(None, plan.count, 0, "count")] if plan.count is not None else []
    releases += [(k, v, 0, f"sum({k})") for k, v in plan.sums.items()]
    # AVG's centred sum Σ(x − c) (issue 32): c the midpoint of the box's range, every value already inside it
    releases += [(k, m.plan.total.noise, m.plan.c, f"s({k})") for k, m in plan.moments.items()]
    spent = math.fsum(currency.weight(v) for v in plan.shares.values())
    assert spent == pytest.approx(currency.weight(COST[definition]), rel=1e-9)  # the weight, split, no more
    for column, noise, centre, name in releases:
        assert noise is not None
        share = plan.shares[name]  # the error-minimising split (dpmagic.aggregates.moments.split_weights)
        contrib = _contributions(q, column, noise.unit, centre)
        # 1. The exact release's sensitivity (before any grid), as derived in dpmagic.noise.sensitivity: tight.
        to_units = None if column != "f" else (lambda v, u=noise.unit: int(np.rint(v / u)))
        if name.startswith("s("):
            lo, hi = value_range(q, TINY, column)
            a, b = lo - centre, hi - centre
            if to_units is not None:
                a, b = to_units(a), to_units(b)
            sens = patterns(a, b, coverage_of(q, TINY), replace_one=replace_one)
        else:
            sens = release_sensitivity(q, TINY, column, replace_one=replace_one, to_units=to_units)
        l1, l2, linf, cells = _brute(contrib, 1, replace_one)
        assert (sens.l1, sens.linf) == (l1, linf), (column, sens, l1, linf)
        assert sens.l2 == pytest.approx(l2, rel=1e-12)
        assert (sens.max_cells if not sens.is_zero else 0) == cells
        # 2. What the noise is calibrated to, on the grid actually released, covers every neighbouring pair.
        l1, l2, linf, cells = _brute(contrib, noise.factor, replace_one)
        d = noise.calibrated
        if definition == "pure":
            assert l1 <= d and noise.scale == pytest.approx(d / share, rel=1e-12)
            tight = l1 == d
        elif definition == "zcdp":
            assert l2 <= d * (1 + 1e-12) and noise.scale == pytest.approx(d / math.sqrt(2 * share), rel=1e-12)
            tight = l2 == pytest.approx(d, rel=1e-12)
        else:
            assert linf <= d and cells <= noise.cells
            assert noise.scale == discrete_gaussian_gdp_sigma(share / math.sqrt(noise.cells), int(d))
            tight = linf == d and cells == noise.cells
        if noise.factor == 1 and l1 > 0:  # without a grid the calibration is exactly the true sensitivity
            assert tight, (column, noise, l1, l2, linf, cells)


def test_rounding_to_a_grid_sensitivity_brute_force() -> None:
    """|⌊a/k + 1/2⌋ − ⌊b/k + 1/2⌋| ≤ ⌈|a − b|/k⌉, attained: the grid units sensitivity of a rounded release."""
    vals = np.arange(-60, 61)
    for k in range(1, 9):
        r = (2 * vals + k) // (2 * k)
        for d in range(0, 25):
            worst = max(abs(int(r[i]) - int(r[i + d])) for i in range(len(vals) - d))
            assert worst == -(-d // k)


def test_replace_one_sum_leaving_the_box_is_fully_noised() -> None:
    """Audit item 1: a column bounded [90, 100] summed over a WHERE box: the row can leave the box (Δ = 100)."""
    schema = Schema.from_dict(
        {
            "table": "t",
            "columns": {
                "g": {"type": "categorical", "values": ["a", "b"]},
                "v": {"type": "int", "lower": 90, "upper": 100},
            },
        }
    )
    q = parse_query("SELECT SUM(v) AS s FROM t WHERE g = 'a'", schema)
    for definition in ("pure", "zcdp", "gdp"):
        noise = plan_noise(q, schema, CURRENCIES[definition], 1.0, replace_one=True).sums["v"]
        assert noise.sensitivity == 100  # not upper − lower = 10 (real ε would be 10 for a charged 1)
    whole = parse_query("SELECT SUM(v) AS s FROM t", schema)
    assert plan_noise(whole, schema, CURRENCIES["pure"], 1.0, replace_one=True).sums["v"].sensitivity == 10
