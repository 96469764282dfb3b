"""Int columns beyond 2^53: exact integer keys in every layer (audit issue 10, item 2).

Int intervals used to be encoded with float cut keys, so above 2^53 ``hi + 1.0 == hi`` and the last value of
every interval vanished from the accountant while the backend still counted it.  These tests pin the three
views — the sets layer (``Box.contains_row``), the overlap engine (its column store) and the pandas backend —
to agree on every value, and the exact maximum overlap to equal brute force.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpmagic import Session
from dpmagic.backends.pandas import PandasBackend
from dpmagic.domain.schema import CategoricalColumn, NumericColumn, Schema
from dpmagic.domain.sets import Box, Interval, IntervalSet, box_from_json, box_to_json
from dpmagic.errors import BudgetExceededError, DataValidationError, SchemaError
from dpmagic.overlap.engine import OverlapEngine
from dpmagic.query.sql import parse_query

I64_MIN, I64_MAX = -(2**63), 2**63 - 1
T = 1_700_000_000_000_000_001  # a nanosecond timestamp that is not a double


def _ts_schema() -> Schema:
    return Schema.from_dict(
        {
            "table": "events",
            "columns": {
                "ts": {"type": "int", "lower": 1_600_000_000_000_000_000, "upper": 1_800_000_000_000_000_000},
                "kind": {"type": "categorical", "values": ["a", "b"]},
            },
        }
    )


def _ts_frame() -> pd.DataFrame:
    ts = [T, T - 1, T + 1, T + 2, 1_650_000_000_000_000_000, T]
    return pd.DataFrame({"ts": np.array(ts, dtype=np.int64), "kind": ["a", "b", "a", "b", "a", "b"]})


def test_attack_point_or_disjoint_decoy_is_refused_the_second_time() -> None:
    s = Session(_ts_frame(), _ts_schema(), "epsilon=1")
    sql = f"SELECT COUNT(*) FROM events WHERE ts = {T} OR ts BETWEEN {T + 1000} AND {T + 2000}"
    s.query(sql, epsilon=1.0)
    decoy = f"SELECT COUNT(*) FROM events WHERE ts = {T} OR ts BETWEEN {T + 3000} AND {T + 4000}"
    with pytest.raises(BudgetExceededError):
        s.query(decoy, epsilon=1.0)
    assert s.spent == pytest.approx(1.0)


def test_point_query_on_nanosecond_timestamps_counts_exactly() -> None:
    df = _ts_frame()
    schema = _ts_schema()
    q = parse_query(f"SELECT COUNT(*) FROM events WHERE ts = {T}", schema)
    (iv,) = q.where.get("ts").intervals  # type: ignore[union-attr]
    assert (iv.lo, iv.hi) == (T, T) and isinstance(iv.lo, int)
    backend = PandasBackend(schema.validate(df), schema)
    assert int(backend.evaluate(q).counts[0]) == 2
    s = Session(df, schema, "epsilon=1")
    r = s.query(f"SELECT COUNT(*) FROM events WHERE ts = {T}", epsilon=0.5)
    assert len(r.df) == 1
    assert s.accountant.engine.load_at({"ts": T, "kind": "a"}) == pytest.approx(0.5)
    assert s.accountant.engine.load_at({"ts": T + 1, "kind": "a"}) == 0.0
    assert s.accountant.engine.load_at({"ts": T - 1, "kind": "a"}) == 0.0


def test_validation_keeps_int64_values_exact() -> None:
    df = _ts_frame()
    out = _ts_schema().validate(df)
    assert out["ts"].dtype == np.int64
    assert out["ts"].tolist() == df["ts"].tolist()


def test_validation_clamps_and_checks_int_values_exactly() -> None:
    schema = _ts_schema()
    lo, hi = schema["ts"].lower, schema["ts"].upper  # type: ignore[union-attr]
    df = pd.DataFrame({"ts": np.array([lo - 1, T, hi + 1], dtype=np.int64), "kind": ["a", "a", "b"]})
    with pytest.raises(DataValidationError, match="2 value"):  # the count: only with the custodian's diagnostics
        schema.validate(df, diagnostics=True)
    with pytest.raises(DataValidationError, match="outside its declared bounds"):
        schema.validate(df)
    assert schema.validate(df, out_of_range="clamp")["ts"].tolist() == [lo, T, hi]
    big = pd.DataFrame({"ts": np.array([T, 2**64 - 1], dtype=np.uint64), "kind": ["a", "b"]})
    assert schema.validate(big, out_of_range="clamp")["ts"].tolist() == [T, hi]
    floats = pd.DataFrame({"ts": [1.7e18, 1e30], "kind": ["a", "b"]})
    assert schema.validate(floats, out_of_range="clamp")["ts"].tolist() == [1_700_000_000_000_000_000, hi]
    with pytest.raises(DataValidationError, match="fractional"):
        schema.validate(pd.DataFrame({"ts": [1.7e18, 0.5], "kind": ["a", "b"]}), out_of_range="clamp")


def test_int_bounds_outside_int64_are_refused() -> None:
    with pytest.raises(SchemaError, match="int64"):
        NumericColumn("x", "int", 0, 2**63)
    with pytest.raises(SchemaError, match="int64"):
        NumericColumn("x", "int", -(2**63) - 1, 0)
    with pytest.raises(SchemaError, match="int64"):
        NumericColumn("x", "int", 0, 1e19)
    c = NumericColumn("x", "int", I64_MIN, I64_MAX)  # the whole int64 range is fine
    assert isinstance(c.lower, int) and c.upper == I64_MAX


def test_json_round_trip_keeps_ints_exact() -> None:
    col = NumericColumn("ts", "int", 0, I64_MAX)
    schema = Schema({"ts": col})
    box = Box({"ts": IntervalSet.of(col, [Interval(T, T), Interval(2**62 + 1, 2**62 + 3)])})
    back = box_from_json(box_to_json(box), schema)
    assert back == box
    assert [(iv.lo, iv.hi) for iv in back.get("ts").intervals] == [(T, T), (2**62 + 1, 2**62 + 3)]  # type: ignore[union-attr]


def test_float_literal_on_int_column_rounds_inward() -> None:
    schema = _ts_schema()
    q = parse_query("SELECT COUNT(*) FROM events WHERE ts > 1.7e18", schema)
    (iv,) = q.where.get("ts").intervals  # type: ignore[union-attr]
    assert iv.lo == 1_700_000_000_000_000_001


# ---------------------------------------------------------------------------------------------------------
# property: sets, engine and backend agree on every value; exact max overlap = brute force

# centres whose domains give every key dtype of the store: float64 (|keys| <= 2^53, also right at the edge),
# int64 (beyond 2^53) and object (touching the int64 limits)
_CENTRES = [0, 2**53 - 7, -(2**53), 2**53, -(2**53) - 1, 2**62, -(2**62), I64_MAX, I64_MIN, 1_700_000_000_000_000_000]


@st.composite
def _instances(draw):  # type: ignore[no-untyped-def]
    c = draw(st.sampled_from(_CENTRES))
    lo = max(I64_MIN, c - draw(st.integers(0, 6)))
    hi = min(I64_MAX, c + draw(st.integers(0, 6)))
    lo, hi = min(lo, hi), max(lo, hi)
    col = NumericColumn("x", "int", lo, hi)
    cat = CategoricalColumn("g", ("u", "v"))
    schema = Schema({"x": col, "g": cat})
    off = st.integers(-3, 3)
    boxes = []
    for _ in range(draw(st.integers(1, 5))):
        ivs = []
        for _ in range(draw(st.integers(1, 3))):
            a, b = sorted((c + draw(off) * draw(st.sampled_from([1, 2])), c + draw(off)))
            ivs.append(Interval(a, b, draw(st.booleans()), draw(st.booleans())))
        cons: dict = {"x": IntervalSet.of(col, ivs)}
        if draw(st.booleans()):
            from dpmagic.domain.sets import CategorySet

            cons["g"] = CategorySet.of_values(cat, [draw(st.sampled_from(["u", "v"]))])
        boxes.append(Box(cons))
    weights = [draw(st.sampled_from([0.25, 0.5, 1.0])) for _ in boxes]
    return schema, boxes, weights


@settings(max_examples=250, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(_instances())
def test_views_agree_near_int64_limits(inst) -> None:  # type: ignore[no-untyped-def]
    schema, boxes, weights = inst
    col = schema["x"]
    probes = list(range(col.lower, col.upper + 1))
    rows = [{"x": v, "g": g} for v, g in itertools.product(probes, ["u", "v"])]
    df = pd.DataFrame({"x": np.array([r["x"] for r in rows], dtype=np.int64), "g": [r["g"] for r in rows]})
    backend = PandasBackend(schema.validate(df), schema)
    eng = OverlapEngine(schema)
    eng.extend(boxes, weights)
    loads = []
    store_masks = [eng.store.contains_mask(r) for r in rows]
    for q, b in enumerate(boxes):
        mask = backend.mask(b)
        store_mask = [bool(m[q]) for m in store_masks]
        sets_mask = [b.contains_row(r) for r in rows]
        assert mask.tolist() == sets_mask == store_mask
    for r in rows:
        brute = math.fsum(w for b, w in zip(boxes, weights) if b.contains_row(r))
        assert eng.load_at(r) == pytest.approx(brute)
        loads.append(brute)
    # pairwise overlap agrees with "some probe row lies in both"
    ids = np.arange(len(boxes))
    pw = eng.store.pairwise(ids)
    for i, j in itertools.product(range(len(boxes)), repeat=2):
        both = any(boxes[i].contains_row(r) and boxes[j].contains_row(r) for r in rows)
        assert bool(pw[i, j]) == both == boxes[i].overlaps(boxes[j])
    res = eng.overlap()
    assert res.exact
    assert res.upper == pytest.approx(max(loads))
    assert res.lower == pytest.approx(max(loads))
    whole = eng.max_load_over(Box({}))
    assert whole.upper == pytest.approx(max(loads))


def test_int_categories_beyond_2_53_stay_distinct() -> None:
    schema = Schema({"c": CategoricalColumn("c", (T, T + 1, T + 2))})
    col = schema["c"]
    assert [col.index_of(v) for v in (T, T + 1, T + 2, np.int64(T + 1))] == [0, 1, 2, 1]  # type: ignore[union-attr]
    assert col.index_of(float(T)) is None  # the double nearest T is another number
    df = schema.validate(pd.DataFrame({"c": np.array([T, T + 1, T + 1, T + 2], dtype=np.int64)}))
    assert df["c"].tolist() == [T, T + 1, T + 1, T + 2]
    backend = PandasBackend(df, schema)
    for sql in (f"c = {T + 1}", f"c BETWEEN {T + 1} AND {T + 1}", f"c IN ({T + 1})"):
        q = parse_query(f"SELECT COUNT(*) FROM t WHERE {sql}", schema)
        assert q.where.get("c").values == [T + 1]  # type: ignore[union-attr]
        assert int(backend.evaluate(q).counts[0]) == 2


def test_sum_sensitivities_of_huge_int_bounds_round_up() -> None:
    for lo, hi in ((0, 2**53 + 1), (-(2**62) - 1, 5), (I64_MIN, I64_MAX), (T, T + 3)):
        c = NumericColumn("x", "int", lo, hi)
        assert c.max_abs >= max(abs(lo), abs(hi)) and c.width >= hi - lo  # exact int >= double comparisons


def test_store_key_dtypes() -> None:
    from dpmagic.overlap.encoding import _NumStore

    def dtype(lo: int, hi: int) -> object:
        return _NumStore(NumericColumn("x", "int", lo, hi), 0, 0).dtype

    assert dtype(1, 5000) is np.float64 and dtype(-(2**53), 2**53 - 1) is np.float64
    assert dtype(0, 2**53) is np.int64 and dtype(-(2**53) - 1, 0) is np.int64
    assert dtype(1_600_000_000_000_000_000, 1_800_000_000_000_000_000) is np.int64
    assert dtype(0, I64_MAX) is object and dtype(I64_MIN, 0) is object and dtype(0, I64_MAX - 1) is object
    assert dtype(I64_MIN + 1, I64_MAX - 2) is np.int64
