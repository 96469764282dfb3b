"""The second held-out dense family of issue 28 (benchmarks/workloads.py ``dense_drilldown_log``): deterministic,
of the shape its docstring states, parsed against the declared schema, and answered through a Session."""

from __future__ import annotations

import re

import pytest
from workloads import DRILLDOWN_VARIANTS, dense_drilldown_log, drilldown_schema, pums_data

from dpmagic import Session, load_adult
from dpmagic.query.sql import parse_query

VARIANTS = tuple(DRILLDOWN_VARIANTS)


def _where(sql: str) -> str:
    m = re.search(r" WHERE (.*?)(?: GROUP BY |$)", sql)
    return m.group(1) if m else ""


@pytest.mark.parametrize("variant", VARIANTS)
def test_deterministic_and_seeded(variant: str) -> None:
    a = dense_drilldown_log(60, seed=3, variant=variant)
    assert a == dense_drilldown_log(60, seed=3, variant=variant)
    assert a != dense_drilldown_log(60, seed=4, variant=variant)
    assert dense_drilldown_log(30, seed=3, variant=variant) == a[:30]  # a prefix of a longer session


@pytest.mark.parametrize("variant", VARIANTS)
def test_shape_as_documented(variant: str) -> None:
    schema = drilldown_schema(variant)
    spec = DRILLDOWN_VARIANTS[variant]
    log = dense_drilldown_log(300, seed=1, variant=variant)
    drills = 0
    for i, (sql, eps) in enumerate(log):
        assert 0.01 <= eps <= 0.1
        q = parse_query(sql, schema)
        assert 1 <= len(q.where.constraints) <= spec["max_depth"]  # 1-4 predicates on distinct columns
        assert len(q.group_by) <= 2
        if i and _where(sql).startswith(_where(log[i - 1][0]) + " AND "):
            drills += 1
    # a drill-down session: many statements add one predicate to the previous one, the others back out
    assert 0.2 * len(log) <= drills <= 0.8 * len(log)
    # non-round cut points: the first numeric column sees many distinct endpoints
    num = spec["nums"][0]
    cuts = {int(x) for sql, _ in log for x in re.findall(re.escape(num) + r" (?:<=|>=|<|>|BETWEEN) (\d+)", sql)}
    assert len(cuts) >= 20
    assert any(c % 5 for c in cuts)


@pytest.mark.parametrize("variant", VARIANTS)
def test_runs_through_a_session(variant: str) -> None:
    df, schema = pums_data() if DRILLDOWN_VARIANTS[variant]["table"] == "pums" else load_adult()
    s = Session(df, schema, "epsilon=100000", default_cost=1.0)
    for sql, eps in dense_drilldown_log(20, seed=7, schema=schema, variant=variant):
        r = s.query(sql, epsilon=eps, fresh=True)
        ov = r.charge.bounds.overlap
        assert 0 < ov.lower <= ov.upper
