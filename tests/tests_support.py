"""Helpers shared by tests (not a test module)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dpmagic import Session
from dpmagic.domain.schema import CategoricalColumn, NumericColumn, Schema
from dpmagic.domain.sets import Box, CategorySet, IntervalSet

#: the shipped data sets (adult, pums): the one path every test uses
DATA = Path(__file__).resolve().parents[1] / "dpmagic" / "data"


def load_table(name: str) -> tuple[pd.DataFrame, Schema]:
    """A shipped table (``adult`` or ``pums``): a fresh DataFrame and its declared schema."""
    return pd.read_csv(DATA / f"{name}.csv"), Schema.from_json(DATA / f"{name}.schema.json")


def pums_session(budget: str, **kwargs) -> Session:
    df, schema = load_table("pums")
    return Session(df, schema, budget, **kwargs)


def uniform_boxes(t: int, m: int = 10, kmin: int = 2, kmax: int = 4, seed: int = 0) -> tuple[Schema, list[Box]]:
    """Seed 000 §7.1 style instances (m categorical columns with kmin..kmax values, random subsets)."""
    rng = np.random.default_rng(seed)
    cols = {f"a{j}": CategoricalColumn(f"a{j}", tuple(range(int(rng.integers(kmin, kmax + 1))))) for j in range(m)}
    sch = Schema(cols)
    names = list(cols)
    out = []
    for _ in range(t):
        cons = {}
        for name in rng.choice(names, int(rng.integers(1, m + 1)), replace=False):
            col = cols[str(name)]
            vals = rng.choice(col.size, int(rng.integers(1, col.size + 1)), replace=False)
            cons[str(name)] = CategorySet.of_indices(col, vals)
        out.append(Box(cons))
    return sch, out


def run_cell(ip: Any, code: str) -> tuple[Any, Any]:
    """Run ``code`` in a real IPython shell, capturing what it prints: (ExecutionResult, captured output)."""
    from IPython.utils.capture import capture_output

    with capture_output() as cap:
        result = ip.run_cell(code, store_history=False)
    return result, cap


def brute_batch_sensitivity(boxes: Sequence[Box], rows: Iterable[dict[str, Any]]) -> tuple[int, int]:
    """The (add/remove, replace-one) L1 sensitivity of the COUNT(*) queries over ``boxes``, by brute force.

    popSet(r) = the boxes containing row r (:meth:`Box.contains_row`, the definition of membership).  Adding or
    removing r changes the answers by the indicator of popSet(r): max |popSet(r)|.  Replacing r by r' changes
    them by +1 on popSet(r') minus popSet(r) and −1 on the converse: max |popSet(r) △ popSet(r')| (Inan,
    Gursoy, Saygin, "Sensitivity analysis for non-interactive differential privacy: bounds and efficient
    algorithms", IEEE TDSC, doi:10.1109/TDSC.2017.2734664, Th. 2).  With unit weights each L2 value is the
    square root of the L1 value.  Exact when ``rows`` meets every atom of the domain (:func:`oracle_rows`).
    """
    pops = {frozenset(j for j, b in enumerate(boxes) if not b.is_empty() and b.contains_row(r)) for r in rows}
    return max(len(p) for p in pops), max(len(p ^ q) for p in pops for q in pops)


def oracle_values(schema: Schema, name: str, boxes: Sequence[Box], exhaustive: int = 64) -> list[Any]:
    """Values of column ``name`` that meet every set of values no box distinguishes (so a true oracle).

    * categorical: every declared value;
    * int: every value when the domain has at most ``exhaustive`` of them (e.g. a small domain shifted by
      2^60), else — membership only changes where an interval starts or ends, so every run of integers with
      one membership starts at the lower bound, at some interval's ``lo`` or at some ``hi + 1`` — those
      points and their integer neighbours, as exact Python ints;
    * float (taken as the reals, as :mod:`dpmagic.domain.sets` does): the distinct interval ends and bounds, their
      neighbouring doubles (``math.nextafter``), and the exact midpoint (a :class:`~fractions.Fraction`,
      never rounded nor overflowed) of every gap between consecutive ends — membership is constant on each
      open gap, and Python compares a Fraction with a double exactly.

    A column no box constrains gets one value (it changes no popSet).
    """
    col = schema[name]
    sets = [vs for b in boxes if (vs := b.constraints.get(name)) is not None]
    if isinstance(col, CategoricalColumn):
        return list(col.values) if sets else [col.values[0]]
    assert isinstance(col, NumericColumn)
    ends: set[Any] = set()
    for vs in sets:
        assert isinstance(vs, IntervalSet)
        for iv in vs.intervals:
            ends.update((iv.lo, iv.hi))
    if col.is_int:
        lo, hi = int(col.lower), int(col.upper)
        if not sets:
            return [lo]
        if hi - lo < exhaustive:
            return list(range(lo, hi + 1))
        pts = {lo, hi} | {int(e) + d for e in ends for d in (-1, 0, 1)}
        return sorted(p for p in pts if lo <= p <= hi)
    lo_f, hi_f = float(col.lower), float(col.upper)
    if not sets:
        return [lo_f]
    ps = sorted({lo_f, hi_f} | {float(e) for e in ends})
    near = {math.nextafter(p, d) for p in ps for d in (-math.inf, math.inf)}
    mids = [(Fraction(a) + Fraction(b)) / 2 for a, b in itertools.pairwise(ps)]
    return sorted(ps + [v for v in near if lo_f <= v <= hi_f] + mids)


def oracle_rows(schema: Schema, boxes: Sequence[Box]) -> list[dict[str, Any]]:
    """Every combination of :func:`oracle_values` over the schema's columns: rows meeting every atom."""
    names = list(schema.columns)
    per = [oracle_values(schema, n, boxes) for n in names]
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*per)]


def audit_gap_batch(table: str = "t") -> tuple[dict[str, Any], list[str]]:
    """Issue 24's batch (a schema dict and 15 statements): on an int column spanning int64, a box excluding the
    gap 2^60 … 2^60+20 and two points inside the gap, each 5 times.  Add/remove: 5; replace-one: 10 (a row
    moving from the box to a point changes 10 answers) — while doubles see the gap's values as 2^60 or 2^60+32.
    """
    off, i64 = 2**60, 2**63 - 1
    schema = {"table": table, "columns": {"x": {"type": "int", "lower": -i64, "upper": i64}}}
    box = f"SELECT COUNT(*) FROM {table} WHERE x NOT BETWEEN {off} AND {off + 20}"
    p1, p2 = (f"SELECT COUNT(*) FROM {table} WHERE x = {off + d}" for d in (10, 15))
    return schema, [box] * 5 + [p1] * 5 + [p2] * 5


DECISION_GROUPS = ["A", "B", "C", "D", "E"]
#: a decision-query fixture (tests/test_decision_session.py, tests/test_release_path.py)
DECISION_SCHEMA = {
    "table": "t",
    "columns": {
        "g": {"type": "categorical", "values": DECISION_GROUPS},
        "r": {"type": "categorical", "values": ["N", "S"]},
        "x": {"type": "int", "lower": 0, "upper": 10},
        "f": {"type": "float", "lower": 0.0, "upper": 1.0},
    },
}
# per region: A (1000 rows, x=9) satisfies; B (1000, x=0) fails SUM; C (100, x=9) fails COUNT; D none; E (1000, x=10)
DECISION_SPEC = {"A": (1000, 9), "B": (1000, 0), "C": (100, 9), "E": (1000, 10)}
DECISION_SQL = (
    "SELECT g, COUNT(*) FROM t WHERE r = '{r}' GROUP BY g HAVING (COUNT(*) > 700 AND SUM(x) > 6000) OR SUM(x) > 9500"
)


def decision_frame() -> pd.DataFrame:
    rows = [(g, r, x, 0.5) for r in ("N", "S") for g, (n, x) in DECISION_SPEC.items() for _ in range(n)]
    return pd.DataFrame(rows, columns=["g", "r", "x", "f"])


def brute_change(contrib: np.ndarray, k: int, replace_one: bool) -> tuple[float, float, float, int]:
    """max L1, L2, L∞ and number of changed cells over every neighbouring pair of data sets of ≤ 2 rows.

    ``contrib[r, c]``: what domain row r adds to cell c of an exact sum release; the release rounds to a grid of
    ``k`` units (⌊a/k + 1/2⌋).  Add/remove: (D, D + x), |D| ≤ 1; replace: (D + x, D + x′), |D| ≤ 1."""
    zero = np.zeros((1, contrib.shape[1]), dtype=np.int64)
    contrib = np.unique(contrib, axis=0)  # rows with the same contribution give the same pairs
    bases = np.unique(np.vstack([zero, contrib]), axis=0)  # answers of every data set D with |D| ≤ 1

    def grid(a: np.ndarray) -> np.ndarray:  # ⌊a/k + 1/2⌋, exactly as the release rounds
        return (2 * a + k) // (2 * k)

    l1 = l2 = linf = 0.0
    cells = 0
    for b in bases:
        with_x = grid(b + contrib)  # D + x for every row x
        diff = with_x[:, None, :] - with_x[None, :, :] if replace_one else (with_x - grid(b))[:, None, :]
        a = np.abs(diff).astype(float)
        l1 = max(l1, float(a.sum(axis=2).max()))
        l2 = max(l2, float(np.sqrt((a**2).sum(axis=2)).max()))
        linf = max(linf, float(a.max()))
        cells = max(cells, int((a > 0).sum(axis=2).max()))
    return l1, l2, linf, cells


def assert_change_covered(noise: Any, l1: float, l2: float, linf: float, cells: int, definition: str) -> None:
    """The noise's calibrated change covers the brute-force one: L1 (pure ε), L2 (ρ-zCDP), L∞ and the number of
    changed cells (μ-GDP, per-cell discrete Gaussians)."""
    d = noise.calibrated
    if definition == "pure":
        assert l1 <= d, (noise, l1)
    elif definition == "zcdp":
        assert l2 <= d * (1 + 1e-12), (noise, l2)
    else:
        assert linf <= d and cells <= noise.cells, (noise, linf, cells)


def assert_covered(noise: Any, contrib: np.ndarray, definition: str, replace_one: bool) -> None:
    """:func:`brute_change` of ``contrib`` on the noise's grid, covered by its calibration."""
    assert_change_covered(noise, *brute_change(contrib, noise.factor, replace_one), definition)


def bounded_persons(schema: Schema, rows: Sequence[dict[str, Any]]) -> list[tuple[int, ...]]:
    """Every person — a multiset of indices of ``rows`` (dicts with a ``g`` and an ``s`` value) — that respects
    the schema's person unit: at most ``max_rows`` rows, and on column ``g`` at most ``max_groups`` values and
    ``max_rows`` rows per value (its ``per_group`` bounds), one value of ``s`` if ``s`` is invariant."""
    unit = schema.person_unit
    assert unit is not None
    b = unit.per_group.get("g")
    out = []
    for size in range(1, unit.max_rows + 1):
        for p in itertools.combinations_with_replacement(range(len(rows)), size):
            gs = [rows[i]["g"] for i in p]
            if b is not None and b.max_groups is not None and len(set(gs)) > b.max_groups:
                continue
            if b is not None and b.max_rows is not None and max(gs.count(v) for v in set(gs)) > b.max_rows:
                continue
            if "s" in unit.invariant and len({rows[i]["s"] for i in p}) > 1:
                continue
            out.append(p)
    return out


#: the small domain of the consistency tests (3 × 2 × 4 cells): ``tiny_box`` regions and ``linear_coeffs`` over it
TINY_SCHEMA = Schema.of(
    {
        "dataset": "tiny",
        "table": "t",
        "columns": {
            "a": {"type": "categorical", "values": ["x", "y", "z"]},
            "b": {"type": "categorical", "values": ["u", "v"]},
            "v": {"type": "int", "lower": 0, "upper": 3},
        },
    }
)


def tiny_box(a: list[str] | None, b: list[str] | None, v: tuple[int, int] | None, empty: bool = False) -> Box:
    """A box of :data:`TINY_SCHEMA` (``None``: the column unconstrained; ``empty``: a region no row can be in)."""
    from dpmagic.domain.sets import Interval

    cons = {}
    if a is not None:
        cons["a"] = CategorySet.of_values(TINY_SCHEMA["a"], a)
    if b is not None:
        cons["b"] = CategorySet.of_values(TINY_SCHEMA["b"], b)
    if v is not None:
        cons["v"] = IntervalSet.of(TINY_SCHEMA["v"], [Interval(v[0], v[1])])
    box = Box(cons)
    if empty:
        box = box.intersect(Box({"a": CategorySet.of_values(TINY_SCHEMA["a"], ["x"])}))
        box = box.intersect(Box({"a": CategorySet.of_values(TINY_SCHEMA["a"], ["y"])}))
    return box


def linear_coeffs(kind: str, c: int) -> dict[str, Fraction]:
    """A measurement's coefficients on (n, sum:v, sumsq:v): count, raw sum, centred sum (centre c), centred sum of
    squares (c), and ``half`` (fractional coefficients)."""
    return {
        "count": {"n": Fraction(1)},
        "sum": {"sum:v": Fraction(1)},
        "s": {"sum:v": Fraction(1), "n": Fraction(-c)},
        "q": {"sumsq:v": Fraction(1), "sum:v": Fraction(-2 * c), "n": Fraction(c * c)},
        "half": {"sum:v": Fraction(1, 2), "n": Fraction(c, 3)},
    }[kind]
