"""The conformance suite (scikit-learn's ``parametrize_with_checks`` idea): checks any backend and any aggregate
unit must pass.  Helpers, not a test module: ``test_conformance.py`` runs them for pandas, DuckDB, Spark, the toy
backend (``toy_backend.py``), every registered aggregate and the toy aggregate (``toy_aggregate.py``).

Backends (each check takes ``bind(df, schema) -> Backend``, binding a pandas frame through the backend's own
source — a DuckDB relation, a Spark DataFrame, …):

* :func:`check_corpus_cells` — the shared SQL corpus (``sql_corpus.py``) gives exact ``Cells`` equal to the pandas
  reference (counts, integer sums, every unit's inputs);
* :func:`check_bind_errors` — the same error class and message as pandas on bad data (out of bounds, undeclared
  category, NULL, wrong type);
* :func:`check_refuses_nothing_valid` — ``check`` (before the charge) refuses no valid corpus query;
* :func:`check_work_independent_of_box` — structural: the same work trace (statements, rows walked) for an empty
  and a full box.

Aggregate units (a kind and the SELECT items that ask it):

* :func:`check_unit_sensitivity` — every integer release's calibration covers the brute-force change over every
  neighbouring pair of data sets of ≤ 2 rows of a tiny domain, under both relations and all three definitions;
* :func:`check_unit_person_sensitivity` — the same at person level (a ``privacy_unit`` of ≤ 2 rows per person):
  every pair of data sets of ≤ 2 persons that differ by adding, removing or replacing one person;
* :func:`check_unit_plan_reads_no_data` — planning touches no backend;
* :func:`check_unit_release_covers` — at a negligible noise the 95% interval covers the exact value.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pandas as pd
from sql_corpus import CASES
from tests_support import DATA, assert_change_covered

from dpmagic.accountant.currency import CURRENCIES, parse_budget
from dpmagic.aggregates.moments import MomentPlan
from dpmagic.aggregates.registry import unit_for
from dpmagic.backends.pandas import PandasBackend
from dpmagic.domain.schema import Schema
from dpmagic.errors import DPMagicError
from dpmagic.query.sql import parse_query
from dpmagic.releases.backend import Backend
from dpmagic.releases.cells import Cells
from dpmagic.releases.plan import plan_noise, release, units_of
from dpmagic.releases.query import QueryMechanism

Bind = Callable[[pd.DataFrame, Schema], Backend]
CURRENCY = parse_budget("epsilon=1e6").currency


def load(table: str) -> tuple[pd.DataFrame, Schema]:
    return pd.read_csv(DATA / f"{table}.csv"), Schema.from_json(DATA / f"{table}.schema.json")


def plan_query(sql: str, schema: Schema):
    """(query, units, unit plans) of ``sql`` at ε = 1e6 (add/remove), as the session plans it."""
    q = parse_query(sql, schema, tables=None)
    mech = QueryMechanism(q, schema, CURRENCY, 1.0, replace_one=False)
    return q, units_of(mech.plan), mech.plan.extra


def supported(sql: str, schema: Schema):
    try:
        return plan_query(sql, schema)
    except DPMagicError:
        return None


def assert_same_cells(a: Cells, b: Cells) -> None:
    assert a.keys == b.keys
    assert a.counts.tolist() == b.counts.tolist()
    assert a.sums == b.sums
    assert set(a.extra) == set(b.extra)
    for k, va in a.extra.items():
        vb = b.extra[k]
        if isinstance(va, dict):  # VAR / STDDEV: exact n, S, Q
            assert {x: list(map(int, v)) for x, v in va.items()} == {x: list(map(int, v)) for x, v in vb.items()}
        else:  # COUNT(DISTINCT), a quantile's histogram, a toy unit's vector: the same array
            assert np.asarray(va).shape == np.asarray(vb).shape
            assert np.asarray(va).tolist() == np.asarray(vb).tolist()


# ---- backends ----------------------------------------------------------------------------------------------
def check_corpus_cells(bind: Bind, cases=CASES, *, at_least: int = 1) -> int:
    """Every supported corpus case: exact Cells equal to the pandas reference; returns how many ran."""
    ran = 0
    backends: dict[str, tuple[Backend, Backend, Schema]] = {}
    for table, sql, _ in cases:
        if table not in backends:
            df, schema = load(table)
            backends[table] = (PandasBackend(schema.validate(df), schema), bind(df, schema), schema)
        ref, other, schema = backends[table]
        planned = supported(sql, schema)
        if planned is None:
            continue
        q, units, extra = planned
        assert_same_cells(ref.evaluate(q, units, extended=extra), other.evaluate(q, units, extended=extra))
        ran += 1
    assert ran >= at_least, ran
    return ran


def check_refuses_nothing_valid(bind: Bind, cases=CASES) -> None:
    """``check`` (before the charge, public information only) accepts every valid corpus query."""
    backends: dict[str, tuple[Backend, Schema]] = {}
    for table, sql, _ in cases:
        if table not in backends:
            df, schema = load(table)
            backends[table] = (bind(df, schema), schema)
        backend, schema = backends[table]
        planned = supported(sql, schema)
        if planned is not None:
            backend.check(planned[0], planned[2])


SMALL = Schema.from_dict(
    {
        "table": "t",
        "columns": {
            "g": {"type": "categorical", "values": ["a", "b", "c"]},
            "x": {"type": "int", "lower": 0, "upper": 10},
            "f": {"type": "float", "lower": -1.0, "upper": 1.0},
        },
    }
)
GOOD = pd.DataFrame({"g": ["a", "b", "c", "a"], "x": [0, 3, 10, 7], "f": [0.5, -1.0, 1.0, 0.25]})


def bad_frames() -> dict[str, pd.DataFrame]:
    out = {}
    f = GOOD.copy()
    f.loc[1, "x"] = 11
    out["out of bounds"] = f
    f = GOOD.copy()
    f.loc[2, "g"] = "z"
    out["undeclared category"] = f
    f = GOOD.copy().astype({"x": "float64"})
    f.loc[0, "x"] = np.nan
    out["null"] = f
    f = GOOD.copy().astype({"x": "object"})
    f["x"] = ["p", "q", "r", "s"]
    out["wrong type"] = f
    return out


def _error(fn: Callable[[], Any]) -> tuple[type, str]:
    try:
        fn()
    except DPMagicError as e:
        return type(e), str(e)
    raise AssertionError("no error")


def check_bind_errors(bind: Bind) -> None:
    """The same error (class and message) as pandas on every kind of bad data; good data binds."""
    bind(GOOD, SMALL)
    for name, df in bad_frames().items():
        want = _error(lambda df=df: PandasBackend(SMALL.validate(df), SMALL))
        assert _error(lambda df=df: bind(df, SMALL)) == want, name


EMPTY_AND_FULL = (
    "SELECT g, COUNT(*) AS n, SUM(x) AS s, AVG(f) AS a, COUNT(DISTINCT x) AS d, VAR(x) AS v, MEDIAN(x) AS m "
    "FROM t WHERE x > {lo} GROUP BY g"
)


def check_work_independent_of_box(bind: Bind, trace: Callable[[Backend], contextlib.AbstractContextManager]) -> None:
    """Structural: the work ``trace`` records (statements run and rows returned, rows walked, …) is the same for
    a box holding every row and for an empty one."""
    backend = bind(GOOD, SMALL)
    traces = []
    for lo in (-1, 10):  # every row; no row (x ≤ 10)
        q, units, extra = plan_query(EMPTY_AND_FULL.format(lo=lo), SMALL)
        with trace(backend) as got:
            backend.evaluate(q, units, extended=extra)
        traces.append(list(got))
    assert traces[0] == traces[1] and traces[0], traces


@contextlib.contextmanager
def patched(obj: Any, name: str, wrap: Callable[[Any], Any]) -> Iterator[None]:
    old = getattr(obj, name)
    setattr(obj, name, wrap(old))
    try:
        yield
    finally:
        setattr(obj, name, old)


# ---- aggregate units ---------------------------------------------------------------------------------------
TINY = Schema.from_dict(
    {
        "table": "t",
        "columns": {
            "g": {"type": "categorical", "values": ["a", "b"]},
            "x": {"type": "int", "lower": -1, "upper": 2},
            "f": {"type": "float", "lower": -0.5, "upper": 1.5},
        },
    }
)
TINY_ROWS = [{"g": g, "x": x, "f": f} for g, x, f in itertools.product("ab", range(-1, 3), (-0.5, 1.5))]
WHERES = ["", "WHERE x >= 1", "WHERE g = 'a' OR x >= 1"]
GROUPS = ["", "g"]
COSTS = {"pure": 0.7, "zcdp": 0.3, "gdp": 0.9}


def unit_query(select: str, where: str, group: str, kind: str | None = None):
    """The query ``SELECT [g,] <select> FROM t <where> [GROUP BY g]`` on :data:`TINY`; with ``kind``, its one
    aggregate retargeted to that kind (a registered unit the parser does not know, e.g. the toy one)."""
    key, gb = ("g, ", " GROUP BY g") if group else ("", "")
    q = parse_query(f"SELECT {key}{select} FROM t {where}{gb}", TINY)
    if kind is not None:
        q = dataclasses.replace(q, aggregates=tuple(dataclasses.replace(a, func=kind) for a in q.aggregates))
    return q


def _integer_releases(q, plan, rows: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """The exact integer vectors of every unit release of ``plan`` on the data set ``rows`` (pandas reference)."""
    frame = pd.DataFrame(rows, columns=list(TINY.columns)).astype({"x": "int64", "f": "float64"})
    cells = PandasBackend(frame, TINY).evaluate(q, units_of(plan), extended=plan.extra)
    out = {}
    for alias, u in plan.extra.items():
        for name, v in u.unit.integer_releases(u, cells.extra[alias]).items():
            out[f"{alias}:{name}"] = np.asarray(v, dtype=np.int64)
    return out


def check_unit_sensitivity(kind: str, select: str, *, wheres=WHERES, groups=GROUPS) -> int:
    """Every integer release's noise covers the brute-force change (L1 / L2 / L∞ and cells on the noise's grid)
    over every neighbouring pair of data sets of ≤ 2 rows of :data:`TINY`, for both relations and all three
    definitions; returns the number of releases checked (0 for a unit without integer releases)."""
    checked = 0
    n = len(TINY_ROWS)
    for where, group in itertools.product(wheres, groups):
        q = unit_query(select, where, group, kind)
        assert all(a.func == kind for a in q.aggregates)
        for definition, replace_one in itertools.product(("pure", "zcdp", "gdp"), (False, True)):
            try:
                plan = plan_noise(q, TINY, CURRENCIES[definition], COSTS[definition], replace_one=replace_one)
            except DPMagicError:  # a definition the unit refuses (e.g. a quantile under GDP): refused before data
                continue
            noises = {f"{alias}:{k}": v for alias, u in plan.extra.items() for k, v in u.unit.sensitivities(u).items()}
            if not noises:
                continue
            small = [[]] + [[i] for i in range(n)]  # every D with |D| ≤ 1
            vec = {tuple(d): _integer_releases(q, plan, [TINY_ROWS[i] for i in d]) for d in small}
            plus = {
                (tuple(d), x): _integer_releases(q, plan, [TINY_ROWS[i] for i in [*d, x]])
                for d in small
                for x in range(n)
            }
            for name, noise in noises.items():
                k = noise.factor

                def grid(a: np.ndarray, k: int = k) -> np.ndarray:  # ⌊a/k + 1/2⌋, as the release rounds
                    return (2 * a + k) // (2 * k)

                diffs = []
                for d in small:
                    with_x = np.array([grid(plus[(tuple(d), x)][name]) for x in range(n)])
                    if replace_one:
                        diffs.append((with_x[:, None, :] - with_x[None, :, :]).reshape(-1, with_x.shape[1]))
                    else:
                        diffs.append(with_x - grid(vec[tuple(d)][name]))
                a = np.abs(np.vstack(diffs)).astype(float)
                l1, l2 = float(a.sum(axis=1).max()), float(np.sqrt((a**2).sum(axis=1)).max())
                linf, cells = float(a.max()), int((a > 0).sum(axis=1).max())
                assert_change_covered(noise, l1, l2, linf, cells, definition)
                checked += 1
    return checked


#: :data:`TINY` at person level (``pid``, at most K = 2 rows per person), and the row-level schema its brute force
#: evaluates many data sets at once on (``ds``: the data set's number, a GROUP BY key)
PERSON_TINY = Schema.from_dict(
    {
        "table": "t",
        "privacy_unit": {"id": "pid", "max_rows": 2},
        "columns": {"pid": {"type": "int", "lower": 0, "upper": 10**6}, **TINY.to_dict()["columns"]},
    }
)
#: the persons' rows: x ∈ {−1, 0, 2} (both ends, and 0 for VAR's squares and distinct values), f at both ends
PERSON_ROWS = [r for r in TINY_ROWS if r["x"] != 1]


def _person_data_sets() -> tuple[list[tuple[int, ...]], list[tuple[tuple[int, ...], ...]]]:
    """Every person (a multiset of ≤ 2 rows of :data:`PERSON_ROWS`) and every data set of ≤ 2 persons with at most
    one person in the base: [()] + [(P,)] + [(B, P)] (B = () for the base ∅)."""
    people = [p for k in (1, 2) for p in itertools.combinations_with_replacement(range(len(PERSON_ROWS)), k)]
    bases: list[tuple[int, ...]] = [(), *people]
    sets = [tuple(b for b in (base,) if b) for base in bases]
    sets += [(*((base,) if base else ()), p) for base in bases if base for p in people]
    return people, sets


def _releases_per_set(q, plan, sets: list[tuple[tuple[int, ...], ...]]) -> dict[str, np.ndarray]:
    """Each data set's exact integer releases (by release name: data sets × cells of ``q``): pandas evaluations of
    ``q`` grouped by the data set as well (≤ 4,000 data sets each, within the cell limit), with the person-level
    unit plans of ``plan``."""
    keys = (
        PandasBackend(pd.DataFrame(columns=list(PERSON_TINY.columns)), PERSON_TINY)
        .evaluate(q, units_of(plan), extended=plan.extra)
        .keys
    )
    out: dict[str, list[np.ndarray]] = {}
    chunk = 4000
    for start in range(0, len(sets), chunk):
        part = sets[start : start + chunk]
        rows, ds = [], []
        for j, s in enumerate(part):
            for person in s:
                rows += [PERSON_ROWS[i] for i in person]
                ds += [j] * len(person)
        cols = {"ds": {"type": "categorical", "values": list(range(chunk))}, **TINY.to_dict()["columns"]}
        schema = Schema.from_dict({"table": "t", "columns": cols})
        frame = pd.DataFrame(rows, columns=list(TINY.columns)).assign(ds=ds).astype({"x": "int64", "f": "float64"})
        sql = q.text.replace("SELECT ", "SELECT ds, ", 1)
        sql = sql.replace("GROUP BY g", "GROUP BY ds, g") if q.groups else f"{sql} GROUP BY ds"
        eq = parse_query(sql, schema)
        eq = dataclasses.replace(
            eq, aggregates=tuple(dataclasses.replace(a, func=b.func) for a, b in zip(eq.aggregates, q.aggregates))
        )
        cells = PandasBackend(frame, schema).evaluate(eq, units_of(plan), extended=plan.extra)
        at = {k: i for i, k in enumerate(cells.keys)}
        # (data set, cell of q) → the evaluated cell, or the extra last entry (0) when the box excludes the cell
        idx = np.array([[at.get((j, *k), len(cells.keys)) for k in keys] for j in range(len(part))], dtype=np.int64)
        for alias, u in plan.extra.items():
            for name, v in u.unit.integer_releases(u, cells.extra[alias]).items():
                # a release of w entries per cell (a quantile's interval histogram: cells × bins, cell-major)
                arr = np.asarray(v, dtype=np.int64).reshape(len(cells.keys), -1)
                vec = np.vstack([arr, np.zeros((1, arr.shape[1]), dtype=np.int64)])
                out.setdefault(f"{alias}:{name}", []).append(vec[idx].reshape(len(part), -1))
    return {name: np.vstack(parts) for name, parts in out.items()}


#: the person-level check's WHERE clauses (kept few: it evaluates ~8,000 data sets per plan): the whole domain
#: and an exact filter that is not a box
PERSON_WHERES = ["", "WHERE g = 'a' OR x >= 1"]


def check_unit_person_sensitivity(kind: str, select: str, *, wheres=PERSON_WHERES, groups=GROUPS) -> int:
    """:func:`check_unit_sensitivity` at person level (docs/people.md §2): on :data:`PERSON_TINY` (≤ 2 rows per
    person), every integer release's noise covers the brute-force change over every neighbouring pair — add or
    remove a person P to a data set of ≤ 1 person; replace P by P′ beside ≤ 1 other person — for both relations and
    all three definitions; returns the number of releases checked."""
    people, sets = _person_data_sets()
    at = {s: j for j, s in enumerate(sets)}
    bases: list[tuple[tuple[int, ...], ...]] = [(), *((p,) for p in people)]
    checked = 0
    for where, group in itertools.product(wheres, groups):
        key, gb = ("g, ", " GROUP BY g") if group else ("", "")
        q = parse_query(f"SELECT {key}{select} FROM t {where}{gb}", PERSON_TINY)
        q = dataclasses.replace(q, aggregates=tuple(dataclasses.replace(a, func=kind) for a in q.aggregates))
        for definition, replace_one in itertools.product(("pure", "zcdp", "gdp"), (False, True)):
            try:
                plan = plan_noise(q, PERSON_TINY, CURRENCIES[definition], COSTS[definition], replace_one=replace_one)
            except DPMagicError:
                continue
            noises = {f"{alias}:{k}": v for alias, u in plan.extra.items() for k, v in u.unit.sensitivities(u).items()}
            if not noises:
                continue
            rel = _releases_per_set(q, plan, sets)  # per plan: a unit's exact inputs may depend on it (VAR's centre)
            for name, noise in noises.items():
                k = noise.factor
                r = (2 * rel[name] + k) // (2 * k)  # the release's grid, data sets × cells
                diffs = []
                for b in bases:
                    with_p = r[[at[(*b, p)] for p in people]]
                    if replace_one:
                        diffs.append((with_p[:, None, :] - with_p[None, :, :]).reshape(-1, with_p.shape[1]))
                    else:
                        diffs.append(with_p - r[at[b]])
                a = np.abs(np.vstack(diffs)).astype(float)
                l1, l2 = float(a.sum(axis=1).max()), float(np.sqrt((a**2).sum(axis=1)).max())
                try:
                    assert_change_covered(noise, l1, l2, float(a.max()), int((a > 0).sum(axis=1).max()), definition)
                except AssertionError as e:
                    raise AssertionError((where, group, name, definition, replace_one, *e.args)) from None
                checked += 1
    return checked


def check_unit_plan_reads_no_data(kind: str, select: str) -> None:
    """Planning touches no backend (every evaluate raises while it plans), and is deterministic."""

    def refuse(*_: Any, **__: Any) -> Any:
        raise AssertionError("the plan read data")

    q = unit_query(select, "WHERE x >= 0", "g", kind)
    with patched(PandasBackend, "evaluate", lambda _old: refuse):
        a = plan_noise(q, TINY, CURRENCIES["pure"], 1.0)
        b = plan_noise(q, TINY, CURRENCIES["pure"], 1.0)
    assert {k: u.describe() for k, u in a.extra.items()} == {k: u.describe() for k, u in b.extra.items()}
    # an aggregate with releases of its own is planned under its alias; one computed from the shared quantities
    # (AVG, VAR, STDDEV: dpmagic.aggregates.moments) through its column's centred plan
    own = {agg.alias for agg in q.aggregates if not unit_for(agg.func).quantities}
    assert {k for k, u in a.extra.items() if not isinstance(u, MomentPlan)} == own
    for agg in q.aggregates:
        if "s" in unit_for(agg.func).quantities:
            assert a.extra[a.moments[agg.sum_key].key] is a.moments[agg.sum_key]


def check_unit_release_covers(kind: str, select: str, exact_value: Callable[[pd.DataFrame], float]) -> None:
    """At ε = 10⁶ per release the 95% interval covers the exact value in every cell (a unit stating no interval
    returns NaN bounds, skipped).  The integer noise is a discrete Laplace of scale ≤ Δ/10⁶: it is non-zero with
    probability below 2·exp(−10⁶/Δ) per cell, so the check never flakes."""
    frame = pd.DataFrame(TINY_ROWS * 3).astype({"x": "int64"})
    q = unit_query(select, "", "g", kind)
    plan = plan_noise(q, TINY, CURRENCIES["pure"], 1e6)
    cells = PandasBackend(frame, TINY).evaluate(q, units_of(plan), extended=plan.extra)
    df = release(q, cells, plan, TINY)
    for agg in q.aggregates:
        alias = agg.alias
        v, lo, hi = (df[c].to_numpy(dtype=float) for c in (alias, f"{alias}_ci_low", f"{alias}_ci_high"))
        for i, key in enumerate(cells.keys):
            if np.isnan(lo[i]):
                continue
            want = exact_value(frame[frame["g"] == key[0]])
            assert lo[i] <= want <= hi[i], (alias, key, v[i], lo[i], hi[i], want)
