"""Issue 28: the per-query work outside the overlap engine, cut without changing what is released.

Each rewrite is checked against the definition it replaces (brute force) or for the property it must keep:
:func:`dpmagic.query.outputs.in_region` against membership in :meth:`Query.region_keys`; the progress ticker
(:mod:`dpmagic.session.progress`) runs on one shared thread and still never ticks after its block;
:func:`~dpmagic.aggregates.exactsum.exact_cell_sums` sums small values in one ``bincount``, exactly.
"""

from __future__ import annotations

import itertools
import math
import threading

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlglot import exp

from dpmagic.aggregates.exactsum import exact_cell_sums
from dpmagic.domain.schema import Schema
from dpmagic.query.groups import norm_sql
from dpmagic.query.outputs import in_region
from dpmagic.query.sql import parse_query
from dpmagic.session import progress as progress_mod
from dpmagic.session.progress import Ticker

SCHEMA = Schema.from_dict(
    {
        "table": "t",
        "columns": {
            "age": {"type": "int", "lower": 0, "upper": 10},
            "sex": {"type": "categorical", "values": ["F", "M"]},
            "grade": {"type": "categorical", "values": [1, 2, 3]},
            "city": {"type": "categorical", "values": ["a", "b", "c"]},
        },
    }
)
VALUES = {"sex": ["F", "M"], "grade": [1, 2, 3], "city": ["a", "b", "c"]}


def _literal(v: object) -> str:
    return f"'{v}'" if isinstance(v, str) else str(v)


def _in_region_by_definition(query, df: pd.DataFrame) -> pd.DataFrame:
    """The definition: a row stays when its key (NaN read as None) is one of :meth:`Query.region_keys`."""
    if not query.groups:
        return df
    keep = set(query.region_keys())
    mask = [
        tuple(None if isinstance(v, float) and math.isnan(v) else v for v in row) in keep
        for row in df[list(query.group_by)].itertuples(index=False)
    ]
    return df.loc[mask].reset_index(drop=True)


@settings(max_examples=200, deadline=None)
@given(
    groups=st.lists(st.sampled_from(sorted(VALUES)), min_size=1, max_size=3, unique=True),
    subsets=st.fixed_dictionaries({c: st.lists(st.sampled_from(v), unique=True) for c, v in VALUES.items()}),
    empty=st.booleans(),
    nan_rows=st.integers(0, 2),
)
def test_in_region_is_membership_in_the_region_keys(
    groups: list[str], subsets: dict[str, list[object]], empty: bool, nan_rows: int
) -> None:
    """Exact against the definition on every frame of declared keys (plus NULL-group rows, NaN or None), for
    WHERE regions that keep some, all or none of each column's values, or are empty (``age < 0``)."""
    conds = [f"{c} IN ({', '.join(_literal(v) for v in vs)})" for c, vs in subsets.items() if vs]
    if empty:
        conds.append("age < 0")
    where = f" WHERE {' AND '.join(conds)}" if conds else ""
    q = parse_query(f"SELECT {', '.join(groups)}, COUNT(*) FROM t{where} GROUP BY {', '.join(groups)}", SCHEMA)
    keys = list(itertools.product(*[VALUES[g] for g in groups]))
    frame: dict[str, list[object]] = {g: [k[i] for k in keys] for i, g in enumerate(groups)}
    for j in range(nan_rows):  # the NULL group: NaN or None in the frame, None in the region
        for g in groups:
            frame[g].append(math.nan if j == 0 else None)
    frame["count"] = list(np.arange(len(frame[groups[0]]), dtype=float))
    df = pd.DataFrame(frame)
    got = in_region(q, df)
    want = _in_region_by_definition(q, df)
    pd.testing.assert_frame_equal(got, want)


def test_tickers_share_one_thread(monkeypatch) -> None:
    """Entering a ticker starts no thread of its own (it was about 0.4 ms of every query): one clock thread, at
    most started once, serves every ticker."""
    started: list[str] = []
    start = threading.Thread.start

    def counting(self: threading.Thread) -> None:
        started.append(self.name)
        start(self)

    monkeypatch.setattr(threading.Thread, "start", counting)
    for _ in range(50):
        with Ticker(lambda _s: None, delay=3600.0):
            pass
    assert len(started) <= 1


def test_several_tickers_tick_at_once() -> None:
    """Two tickers running at the same time both tick (on the shared thread).  False-failure probability: none
    unless a tick waits more than 10 s for the clock thread."""
    first, second = threading.Event(), threading.Event()
    with (
        Ticker(lambda _s: first.set(), delay=0.0, every=0.001),
        Ticker(lambda _s: second.set(), delay=0.0, every=0.001),
    ):
        assert first.wait(10.0) and second.wait(10.0)


def test_leaving_a_ticker_waits_for_its_tick_in_flight() -> None:
    """A tick running when the block ends finishes before the block is left, and none follows: nothing is shown
    after the step ended (the join of the former per-ticker thread)."""
    order: list[str] = []
    in_tick, proceed = threading.Event(), threading.Event()

    def slow(_s: float) -> None:
        in_tick.set()
        proceed.wait(10.0)
        order.append("tick")

    t = Ticker(slow, delay=0.0, every=0.001)
    with t:
        assert in_tick.wait(10.0)
        threading.Timer(0.05, proceed.set).start()  # the tick is still running when the block ends
    order.append("left")
    ticks = t.ticks
    threading.Event().wait(0.05)
    assert order[-1] == "left" and order.count("tick") == ticks and t.ticks == ticks


def test_the_clock_restarts_in_a_fresh_state(monkeypatch) -> None:
    """A fresh clock (as after a fork) starts its thread again on first use and ticks."""
    monkeypatch.setattr(progress_mod, "_CLOCK", progress_mod._Clock())
    seen = threading.Event()
    with Ticker(lambda _s: seen.set(), delay=0.0, every=0.001):
        assert seen.wait(10.0)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    n=st.integers(0, 40),
    scale=st.integers(0, 62),
    slack=st.sampled_from([None, -1, 0, 1, 2**20]),
    data=st.data(),
)
def test_exact_cell_sums_on_both_sides_of_the_one_bincount_bound(
    n: int, scale: int, slack: int | None, data: st.DataObject
) -> None:
    """Exact against Python integers with no bound (the 21-bit limbs), a bound at or above max |v| (one
    ``bincount`` while rows × bound < 2⁵³, limbs beyond), and a bound the values break (−1: limbs, still exact):
    magnitudes up to 2^scale, so that both paths and their boundary are drawn."""
    top = 2**scale
    values = data.draw(st.lists(st.integers(-top, min(top, 2**63 - 1)), min_size=n, max_size=n))
    cells = data.draw(st.lists(st.integers(0, 4), min_size=n, max_size=n))  # 4: the discarded bin
    bound = None if slack is None or not values else max(0, max(abs(v) for v in values) + slack)
    got = exact_cell_sums(np.array(cells, dtype=np.int64), np.array(values, dtype=np.int64), 4, bound)
    assert got == [sum(v for c, v in zip(cells, values, strict=True) if c == k) for k in range(4)]


def test_exact_cell_sums_just_below_and_above_the_bound() -> None:
    """At rows × bound = 2⁵³ − 4 (one ``bincount``) and 2⁵³ (limbs), and with −2⁶³: every sum exact."""
    for values, bound in (
        ([2**51 - 1] * 4, 2**51 - 1),  # 4 × (2⁵¹ − 1) = 2⁵³ − 4: one bincount, its largest sum 2⁵² − 2 exact
        ([2**51 - 1, -(2**51) + 1, 2**51 - 1, 2**51 - 1], 2**51 - 1),
        ([2**51] * 4, 2**51),  # 4 × 2⁵¹ = 2⁵³: limbs
        ([-(2**51)] * 4, 2**51),
        ([-(2**63), 2**63 - 1, 5], None),
        ([3, -7, 11], 11),
        ([3, -7, 11], 5),  # a bound the values break: limbs
    ):
        cells = [0, 1, 0, 1][: len(values)]
        got = exact_cell_sums(np.array(cells, dtype=np.int64), np.array(values, dtype=np.int64), 2, bound)
        assert got == [sum(v for c, v in zip(cells, values, strict=True) if c == k) for k in range(2)]


def test_the_one_bincount_path_is_chosen_from_the_bound_not_the_values(monkeypatch) -> None:
    """The same bound and table size take the same path whatever the values (the work does not depend on the rows,
    docs/threat-model.md); only the bound decides."""
    calls: list[int] = []
    real = np.bincount

    def counting(*a: object, **k: object) -> np.ndarray:
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(np, "bincount", counting)
    cells = np.array([0, 1, 0, 1], dtype=np.int64)
    for values in ([0, 0, 0, 0], [1000, -1000, 1000, 5], [1, 2, 3, 4]):
        calls.clear()
        exact_cell_sums(cells, np.array(values, dtype=np.int64), 2, 1000)
        assert len(calls) == 1
        calls.clear()
        exact_cell_sums(cells, np.array(values, dtype=np.int64), 2, 2**51)  # 4 × 2⁵¹ = 2⁵³: limbs
        assert len(calls) == 3


_NAMES = st.text(st.sampled_from("abcXYZ_09 -\"'`[]é."), min_size=1, max_size=8)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(parts=st.lists(st.tuples(_NAMES, st.booleans()), min_size=1, max_size=4))
def test_norm_sql_of_a_column_is_sqlglots(parts: list[tuple[str, bool]]) -> None:
    """A plain column's normalised SQL (written once per spelling) is exactly sqlglot's, for any names, quoted or
    not, with up to catalog.db.table qualifiers; a comment or any other node is generated as it is."""
    keys = ("this", "table", "db", "catalog")
    col = exp.Column(**{k: exp.Identifier(this=n, quoted=q) for k, (n, q) in zip(keys, parts)})
    assert norm_sql(col) == col.sql().lower()
    assert norm_sql(col) == norm_sql(col.copy())  # the second time from the cache
    commented = col.copy()
    commented.add_comments(["note"])
    assert norm_sql(commented) == commented.sql().lower()
    expr = exp.Floor(this=exp.Div(this=col.copy(), expression=exp.Literal.number(5)))
    assert norm_sql(expr) == expr.sql().lower()
