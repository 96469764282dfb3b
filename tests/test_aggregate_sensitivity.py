"""Brute force of the SQL branch's releases against every neighbouring data set of a tiny domain.

Covers what :mod:`tests.test_sensitivity` does not: SUM / AVG of an analyst-clamped column
(``SUM(CLAMP(x, a, b))``), numeric (binned) GROUP BY cells, an exact WHERE filter that is not a box (OR across
columns: charged and calibrated over its bounding box), and the units of :mod:`dpmagic.aggregates` —
VAR / STDDEV (three exact integer sums: count, centred sum, centred sum of squares; quantised on float
columns) and COUNT(DISTINCT).

For every release the noise is calibrated to (``Noise.calibrated`` on the released grid of ``Noise.factor``
units), the largest L1 (pure ε), L2 (ρ-zCDP) and per-cell change with the number of changed cells (μ-GDP) over
all neighbouring pairs — add/remove one row: (D, D + x), |D| ≤ 1; replace one row: (D + x, D + x′), |D| ≤ 1 —
must be covered.  Each row's contribution to each cell is computed here from the query's meaning (Python
predicates, bins and clamps written out by hand), and checked against the backend's exact per-cell sums over
the whole domain.  COUNT(DISTINCT), which is not a sum, is checked on random data sets (hypothesis,
derandomised) with all their neighbours.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests_support import assert_covered as _covered

from dpmagic.accountant.currency import CURRENCIES
from dpmagic.aggregates import variance
from dpmagic.backends.pandas import PandasBackend
from dpmagic.domain.schema import Schema
from dpmagic.query.sql import parse_query
from dpmagic.releases.plan import plan_noise, units_of

TINY = Schema.from_dict(
    {
        "table": "t",
        "columns": {
            "g": {"type": "categorical", "values": ["a", "b", "c"]},
            "x": {"type": "int", "lower": -2, "upper": 3},
            "f": {"type": "float", "lower": -1.5, "upper": 2.5},
        },
    }
)
F_VALUES = (-1.5, -0.25, 0.0, 1.0, 2.5)
ROWS = [{"g": g, "x": x, "f": f} for g, x, f in itertools.product(("a", "b", "c"), range(-2, 4), F_VALUES)]
FRAME = pd.DataFrame(ROWS)

#: WHERE clause → the rows it selects (written out independently of the parser)
WHERES = {
    "": lambda r: True,
    "WHERE g IN ('a', 'b')": lambda r: r["g"] in ("a", "b"),
    "WHERE x >= 1": lambda r: r["x"] >= 1,
    "WHERE f >= 0": lambda r: r["f"] >= 0,
    "WHERE g = 'a' OR x >= 2": lambda r: r["g"] == "a" or r["x"] >= 2,  # an exact filter: not a box
    "WHERE x > 5": lambda r: False,
}
#: GROUP BY expression → a row's key (None: no GROUP BY)
GROUPS = {
    "": None,
    "g": lambda r: r["g"],
    "FLOOR(x / 2)": lambda r: math.trunc(r["x"] / 2),  # int / int truncates (SQLite): {-2}, {-1, 0, 1}, {2, 3}
    "FLOOR(f)": lambda r: math.floor(r["f"]),  # float bins
}
COST = {"pure": 0.7, "zcdp": 0.3, "gdp": 0.9}


def _query(select: str, where: str, group: str):
    gb = f" GROUP BY {group}" if group else ""
    key = f"{group} AS k, " if group else ""
    return parse_query(f"SELECT {key}{select} FROM t {where}{gb}", TINY)


def _cell_of(q, where: str, group: str) -> list[int]:
    """Each domain row's cell (len(cells) for rows outside the filter)."""
    labels = [k[0] for k in itertools.product(*[g.labels for g in q.groups])] if group else [None]
    n = len(labels)
    out = []
    for r in ROWS:
        if not WHERES[where](r):
            out.append(n)
        else:
            out.append(labels.index(GROUPS[group](r)) if group else 0)
    return out


def _contrib(cell: list[int], n_cells: int, values: list[int]) -> np.ndarray:
    out = np.zeros((len(ROWS), n_cells), dtype=np.int64)
    for i, (c, v) in enumerate(zip(cell, values, strict=True)):
        if c < n_cells:
            out[i, c] = v
    return out


BASIC = [
    "COUNT(*) AS n, SUM(CLAMP(x, -1, 2)) AS s, AVG(CLAMP(f, 0, 1)) AS a",
    "SUM(x) AS s, AVG(LEAST(GREATEST(x, 1), 2)) AS a, SUM(CLAMP(f, -1, 0.5)) AS sf",
]
CASES = list(itertools.product(["pure", "zcdp", "gdp"], [False, True], WHERES, GROUPS))


@pytest.mark.parametrize("definition, replace_one, where, group", CASES)
@pytest.mark.parametrize("select", BASIC)
def test_clamped_sums_bins_and_filters(definition, replace_one, where, group, select) -> None:
    """COUNT, raw (clamped) SUM and AVG's centred SUM releases, over binned GROUP BY cells and exact filters."""
    q = _query(select, where, group)
    plan = plan_noise(q, TINY, CURRENCIES[definition], COST[definition], replace_one=replace_one)
    cell = _cell_of(q, where, group)
    n_cells = q.n_cells
    exact = PandasBackend(FRAME, TINY).evaluate(q, units_of(plan), extended=plan.extra)
    releases = [(None, plan.count)] if plan.count is not None else []
    for agg in q.aggregates:
        if agg.sum_key in plan.sums and (agg.sum_key, plan.sums[agg.sum_key]) not in releases:
            releases.append((agg, plan.sums[agg.sum_key]))
    for agg, noise in releases:
        if agg is None:
            values = [1] * len(ROWS)
            backend = exact.counts.tolist()
        else:
            a, b = agg.clamp if agg.clamp is not None else (TINY[agg.column].lower, TINY[agg.column].upper)
            clipped = [min(max(r[agg.column], a), b) for r in ROWS]
            values = [int(v) if agg.column == "x" else int(np.rint(v / noise.unit)) for v in clipped]
            backend = exact.sums[agg.sum_key]
        contrib = _contrib(cell, n_cells, values)
        assert contrib.sum(axis=0).tolist() == list(backend)  # the backend sums exactly these contributions
        _covered(noise, contrib, definition, replace_one)
    assert set(plan.moments) == {a.sum_key for a in q.aggregates if a.func == "avg"}
    for mp in plan.moments.values():
        _check_centred(mp.agg, mp.plan, cell, n_cells, exact.extra[mp.key], definition, replace_one)


def _check_centred(agg, p, cell, n_cells, exact, definition, replace_one) -> None:
    """The count, centred sum and (if planned) centred sum of squares of ``agg``'s column: each row's value
    clamped into the box's range [p.lo, p.hi], centred on p.c (quantised on float columns), summed exactly by the
    backend and covered by its noise."""
    ys = [min(max(r[agg.column], p.lo), p.hi) - p.c for r in ROWS]  # clamped into the box's range, centred
    if agg.column == "x":
        assert all(float(y).is_integer() for y in ys)
        s_vals = [int(y) for y in ys]
        q_vals = [int(y) ** 2 for y in ys]
    else:
        s_vals = [int(np.rint(y / p.total.noise.unit)) for y in ys]
        q_vals = [] if p.squares is None else [int(np.rint(y * y / p.squares.noise.unit)) for y in ys]
    parts = [(p.count, [1] * len(ROWS), "n"), (p.total.noise, s_vals, "s")]
    if p.squares is not None:
        parts.append((p.squares.noise, q_vals, "q"))
    for noise, values, key in parts:
        contrib = _contrib(cell, n_cells, values)
        assert contrib.sum(axis=0).tolist() == list(exact[key])
        _covered(noise, contrib, definition, replace_one)


VAR_SELECTS = ["VAR(x) AS v", "STDDEV(f) AS v", "VAR(CLAMP(x, -1, 2)) AS v", "VAR_POP(CLAMP(f, 0, 1)) AS v"]


@pytest.mark.parametrize("definition, replace_one, where, group", CASES)
@pytest.mark.parametrize("select", VAR_SELECTS)
def test_variance_releases(definition, replace_one, where, group, select) -> None:
    """VAR / STDDEV: count, centred sum and centred sum of squares, each an exact integer release."""
    q = _query(select, where, group)
    plan = plan_noise(q, TINY, CURRENCIES[definition], COST[definition], replace_one=replace_one)
    agg = q.aggregates[0]
    mp = plan.moments[agg.sum_key]
    cell = _cell_of(q, where, group)
    exact = PandasBackend(FRAME, TINY).evaluate(q, units_of(plan), extended=plan.extra).extra[mp.key]
    _check_centred(agg, mp.plan, cell, q.n_cells, exact, definition, replace_one)


def test_variance_centre_is_the_box_midpoint() -> None:
    p = variance.plan(-2, 3, True, "pure", 1.0, _cov("WHERE x >= 1", ""), replace_one=False)
    assert (p.c, p.total.a, p.total.b) == (0, -2, 3)
    q = _query("VAR(x) AS v", "WHERE x >= 1", "")
    plan = plan_noise(q, TINY, CURRENCIES["pure"], 1.0)
    p = plan.moments["x"].plan
    assert (p.lo, p.hi, p.c) == (1, 3, 2)


def _cov(where: str, group: str):
    from dpmagic.noise.sensitivity import coverage_of

    return coverage_of(_query("COUNT(*) AS n", where, group), TINY)


def test_filter_coverage_is_never_the_whole_domain() -> None:
    """An OR across columns has the whole domain as bounding box, but rows can leave the filter."""
    q = _query("COUNT(*) AS n", "WHERE g = 'a' OR x >= 2", "")
    assert q.filter is not None and not q.where.constraints  # its bounding box is everything
    cov = _cov("WHERE g = 'a' OR x >= 2", "")
    assert not cov.whole_domain


# -- COUNT(DISTINCT): not a sum; random data sets with all their neighbours ---------------------------------

rows = st.lists(st.sampled_from(range(len(ROWS))), max_size=5)


def _distinct(data: list[int], cell: list[int], n_cells: int) -> np.ndarray:
    out = np.zeros(n_cells)
    for c in range(n_cells):
        out[c] = len({ROWS[i]["x"] for i in data if cell[i] == c})
    return out


@pytest.mark.parametrize(
    "replace_one, where, group",
    list(itertools.product([False, True], ["", "WHERE g IN ('a', 'b')", "WHERE g = 'a' OR x >= 2"], ["", "g"])),
)
@settings(max_examples=30, derandomize=True, deadline=None)
@given(data=rows)
def test_count_distinct_sensitivity(replace_one, where, group, data) -> None:
    q = _query("COUNT(DISTINCT x) AS d", where, group)
    cell = _cell_of(q, where, group)
    base = _distinct(data, cell, q.n_cells)
    if replace_one:
        nbs = [data[:i] + [r] + data[i + 1 :] for i in range(len(data)) for r in range(len(ROWS))]
    else:
        nbs = [data[:i] + data[i + 1 :] for i in range(len(data))] + [[*data, r] for r in range(len(ROWS))]
    diffs = np.array([_distinct(nb, cell, q.n_cells) - base for nb in nbs]) if nbs else np.zeros((0, q.n_cells))
    for definition in ("pure", "zcdp", "gdp"):
        noise = plan_noise(q, TINY, CURRENCIES[definition], COST[definition], replace_one=replace_one).extra["d"].plan
        if not len(diffs):
            continue
        a = np.abs(diffs)
        if definition == "pure":
            assert a.sum(axis=1).max() <= noise.calibrated
        elif definition == "zcdp":
            assert np.sqrt((a**2).sum(axis=1)).max() <= noise.calibrated * (1 + 1e-12)
        else:
            assert a.max() <= noise.calibrated and (a > 0).sum(axis=1).max() <= noise.cells


def test_count_distinct_sensitivities_are_tight_somewhere() -> None:
    """Replace-one across two GROUP BY cells moves two cells by 1 (L1 = 2), and the calibration says so."""
    q = _query("COUNT(DISTINCT x) AS d", "", "g")
    cell = _cell_of(q, "", "g")
    a, b = ROWS.index({"g": "a", "x": 0, "f": 0.0}), ROWS.index({"g": "b", "x": 0, "f": 0.0})
    moved = _distinct([b], cell, q.n_cells) - _distinct([a], cell, q.n_cells)
    assert np.abs(moved).sum() == 2.0
    noise = plan_noise(q, TINY, CURRENCIES["pure"], 1.0, replace_one=True).extra["d"].plan
    assert noise.calibrated == 2
