"""The conformance suite (``conformance.py``) for every backend — pandas, DuckDB, Spark (marked ``spark``) and the
toy row-list backend (``toy_backend.py``) — and every registered aggregate unit plus the toy one
(``toy_aggregate.py``, registered here only)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import duckdb
import numpy as np
import pandas as pd
import pytest
from conformance import (
    CASES,
    check_bind_errors,
    check_corpus_cells,
    check_refuses_nothing_valid,
    check_unit_person_sensitivity,
    check_unit_plan_reads_no_data,
    check_unit_release_covers,
    check_unit_sensitivity,
    check_work_independent_of_box,
    patched,
    plan_query,
    unit_query,
)
from toy_aggregate import SumSquaresUnit
from toy_backend import ToyBackend

import dpmagic.aggregates.exactsum as exactsum
from dpmagic.aggregates.registry import UnknownAggregateError, register, registered, unit_for, unregister
from dpmagic.backends.bind import backend_for
from dpmagic.backends.engine import EngineBackend
from dpmagic.backends.pandas import PandasBackend
from dpmagic.releases.backend import Backend


def _duckdb(df: pd.DataFrame, schema) -> Backend:
    con = duckdb.connect()
    con.register("src", df)
    return backend_for((con, "src"), schema)


def _pandas(df: pd.DataFrame, schema) -> Backend:
    return backend_for(df, schema)


def _toy(df: pd.DataFrame, schema) -> Backend:
    return ToyBackend(df, schema)


@contextlib.contextmanager
def _engine_trace(backend: Backend) -> Iterator[list]:
    """Statements run and rows each returned (the aggregate rows: one per group, whatever the box holds)."""
    assert isinstance(backend, EngineBackend)
    got: list = []

    def wrap(old):
        def run(stmt):
            rows = old(stmt)
            got.append(len(rows))
            return rows

        return run

    with patched(backend, "_run", wrap):
        yield got


@contextlib.contextmanager
def _pandas_trace(backend: Backend) -> Iterator[list]:
    """Rows summed by every exact per-cell sum (every row of the frame, rows outside the box in the discarded bin)."""
    import dpmagic.aggregates.variance as centred  # the centred sums of AVG / VAR / STDDEV (moments)
    import dpmagic.backends.pandas as module

    got: list = []
    with (
        patched(module, "exact_cell_sums", lambda old: lambda c, v, n, *b: got.append(len(c)) or old(c, v, n, *b)),
        patched(exactsum, "exact_cell_sums", lambda old: lambda c, v, n, *b: got.append(len(c)) or old(c, v, n, *b)),
        patched(centred, "exact_cell_sums", lambda old: lambda c, v, n, *b: got.append(len(c)) or old(c, v, n, *b)),
    ):
        yield got


@contextlib.contextmanager
def _toy_trace(backend: Backend) -> Iterator[list]:
    assert isinstance(backend, ToyBackend)
    got: list = []
    before = backend.rows_walked
    yield got
    got.append(backend.rows_walked - before)


BACKENDS = {
    "pandas": (_pandas, _pandas_trace),
    "duckdb": (_duckdb, _engine_trace),
    "toy": (_toy, _toy_trace),
}


def test_every_backend_is_a_backend() -> None:
    for name, (bind, _) in BACKENDS.items():
        from conformance import GOOD, SMALL

        assert isinstance(bind(GOOD, SMALL), Backend), name
    assert issubclass(PandasBackend, Backend) and issubclass(EngineBackend, Backend)


@pytest.mark.parametrize("name", list(BACKENDS))
def test_backend_corpus_cells(name: str) -> None:
    check_corpus_cells(BACKENDS[name][0], CASES if name != "toy" else CASES[::4], at_least=25)


@pytest.mark.parametrize("name", list(BACKENDS))
def test_backend_bind_errors(name: str) -> None:
    check_bind_errors(BACKENDS[name][0])


@pytest.mark.parametrize("name", list(BACKENDS))
def test_backend_check_refuses_nothing_valid(name: str) -> None:
    check_refuses_nothing_valid(BACKENDS[name][0])


@pytest.mark.parametrize("name", list(BACKENDS))
def test_backend_work_independent_of_box(name: str) -> None:
    bind, trace = BACKENDS[name]
    check_work_independent_of_box(bind, trace)


@pytest.fixture(scope="module")
def spark_bind(spark):
    def bind(df: pd.DataFrame, schema) -> Backend:
        sdf = spark.createDataFrame(df) if len(df) else spark.createDataFrame(df, schema=None)
        return backend_for(sdf, schema)

    return bind


@pytest.mark.spark
def test_spark_conformance(spark_bind) -> None:
    """The suite on Spark, kept cheap: every third corpus case, the bad frames, the structural check."""
    check_corpus_cells(spark_bind, CASES[::3], at_least=35)
    check_bind_errors(spark_bind)
    check_work_independent_of_box(spark_bind, _engine_trace)


# ---- aggregate units ----------------------------------------------------------------------------------------
#: every registered kind → the SELECT items that ask it on conformance.TINY (the non-basic ones; COUNT / SUM /
#: AVG are checked by test_sensitivity.py and test_aggregate_sensitivity.py through the shared path)
UNITS = {
    "count_distinct": "COUNT(DISTINCT x) AS d",
    "var": "VAR(x) AS v, VAR(CLAMP(f, 0, 1)) AS w",
    "stddev": "STDDEV(f) AS v",
    "quantile": "MEDIAN(x) AS m, MAX(f) AS hi",
}


def test_every_registered_kind_is_in_the_suite() -> None:
    kinds = {k for k, u in registered().items() if not u.basic}
    assert kinds == set(UNITS)


def test_unknown_kind_is_an_error_never_a_fall_through() -> None:
    with pytest.raises(UnknownAggregateError, match="no aggregate unit is registered for 'nope'"):
        unit_for("nope")
    q = unit_query("SUM(x) AS s", "", "", None)
    from dataclasses import replace

    from dpmagic.accountant.currency import CURRENCIES
    from dpmagic.releases.plan import plan_noise

    bad = replace(q, aggregates=(replace(q.aggregates[0], func="nope"),))
    with pytest.raises(UnknownAggregateError):
        plan_noise(bad, bad_schema(), CURRENCIES["pure"], 1.0)


def bad_schema():
    from conformance import TINY

    return TINY


@pytest.mark.parametrize("kind", list(UNITS))
def test_unit_sensitivity_brute_force(kind: str) -> None:
    checked = check_unit_sensitivity(kind, UNITS[kind])
    assert checked > 0  # a quantile: its interval histogram (the pick's cost is OpenDP's privacy map)


@pytest.mark.parametrize("kind", list(UNITS))
def test_unit_person_sensitivity_brute_force(kind: str) -> None:
    """The same check at person level (a schema with ``privacy_unit`` {id, max_rows: 2}): every neighbouring pair
    of data sets of ≤ 2 persons (add/remove one person, replace one person)."""
    checked = check_unit_person_sensitivity(kind, UNITS[kind])
    assert checked > 0


@pytest.mark.parametrize("kind", list(UNITS))
def test_unit_plan_reads_no_data(kind: str) -> None:
    check_unit_plan_reads_no_data(kind, UNITS[kind])


def test_count_distinct_release_covers() -> None:
    check_unit_release_covers("count_distinct", UNITS["count_distinct"], lambda d: d["x"].nunique())


@pytest.fixture
def toy_unit():
    unit = register(SumSquaresUnit())
    yield unit
    unregister(unit.kind)


def test_toy_aggregate_passes_the_suite(toy_unit) -> None:
    select = "SUM(CLAMP(x, -1, 1)) AS s"
    assert check_unit_sensitivity("sumsq", select) > 0
    assert check_unit_sensitivity("sumsq", "SUM(x) AS s") > 0
    assert check_unit_person_sensitivity("sumsq", select) > 0
    check_unit_plan_reads_no_data("sumsq", select)
    check_unit_release_covers("sumsq", "SUM(x) AS s", lambda d: float((d["x"] ** 2).sum()))


def test_toy_aggregate_on_every_backend(toy_unit) -> None:
    """The toy unit's inputs are the same on pandas, DuckDB and the toy backend (its declared SQL, read back)."""
    from dataclasses import replace

    from conformance import GOOD, SMALL, assert_same_cells

    q, _, _ = plan_query("SELECT g, SUM(x) AS s FROM t WHERE x >= 1 GROUP BY g", SMALL)
    q = replace(q, aggregates=tuple(replace(a, func="sumsq") for a in q.aggregates))
    from dpmagic.accountant.currency import CURRENCIES
    from dpmagic.releases.plan import plan_noise, units_of

    plan = plan_noise(q, SMALL, CURRENCIES["pure"], 1.0)
    ref = _pandas(GOOD, SMALL).evaluate(q, units_of(plan), extended=plan.extra)
    assert ref.extra["s"] == [49, 9, 100]  # x in {7} for a, {3} for b, {10} for c
    for bind in (_duckdb, _toy):
        assert_same_cells(ref, bind(GOOD, SMALL).evaluate(q, units_of(plan), extended=plan.extra))
    assert np.isfinite(toy_unit.halfwidth(plan.extra["s"]))


# ---- the shared quantities (issue 32): AVG's centred sum, through the same brute-force checks -------------------
SHARED = {
    "avg": "AVG(x) AS a, AVG(CLAMP(f, 0, 1)) AS b",
    "var": "VAR(x) AS v, STDDEV(x) AS s, VAR_POP(CLAMP(f, 0, 1)) AS w",
}


@pytest.mark.parametrize("kind", ["avg"])
def test_centred_sum_sensitivity_brute_force(kind: str) -> None:
    """AVG's releases (the count and the centred sum Σ(x − c)) cover the brute-force change, both relations, all
    three definitions, with and without WHERE / GROUP BY (:func:`conformance.check_unit_sensitivity`)."""
    assert check_unit_sensitivity(kind, SHARED[kind]) > 0


@pytest.mark.parametrize("kind", ["avg"])
def test_centred_sum_person_sensitivity_brute_force(kind: str) -> None:
    assert check_unit_person_sensitivity(kind, SHARED[kind]) > 0


def test_centred_answers_cover_at_negligible_noise() -> None:
    check_unit_release_covers("avg", "AVG(x) AS a", lambda d: float(d["x"].mean()))
    check_unit_release_covers("var", "VAR(x) AS v", lambda d: float(d["x"].var(ddof=1)))
    check_unit_release_covers("stddev", "STDDEV(x) AS v", lambda d: float(d["x"].std(ddof=1)))
    check_unit_plan_reads_no_data("var", SHARED["var"].replace("STDDEV(x) AS s, ", ""))
