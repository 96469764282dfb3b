"""SELECTs of GROUP BY keys alone (issue 29): the declared keys inside the WHERE region, public and free.

The answer comes from the schema and the query only: checked against a brute force over the declared domain
(a key is listed iff some domain point in the WHERE box has it), with nothing charged, nothing recorded and
no backend read, through the Python API and a real IPython shell."""

from __future__ import annotations

import itertools
from typing import Any

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from IPython.core.interactiveshell import InteractiveShell
from tests_support import DATA, run_cell

from dpmagic import Session
from dpmagic.domain.schema import Schema
from dpmagic.errors import UnsupportedQueryError
from dpmagic.session.results import PublicResult

SMALL = Schema.from_dict(
    {
        "table": "t",
        "columns": {
            "a": {"type": "categorical", "values": ["x", "y", "z"]},
            "b": {"type": "int", "lower": 0, "upper": 5},
            "c": {"type": "categorical", "values": [1, 2]},
        },
    }
)


class _NoRead:
    """A backend stand-in that fails on any read: a public answer must never reach it."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the backend was used ({name}) for a public answer")


def small_session() -> Session:
    df = pd.DataFrame({"a": ["x", "y"], "b": [1, 4], "c": [1, 2]})
    s = Session(df, SMALL, budget=1.0)
    s.backend = _NoRead()  # type: ignore[assignment]
    return s


def brute_keys(where: str, group: list[str]) -> list[tuple[Any, ...]]:
    """Keys with some declared domain point satisfying ``where`` (a Python predicate), in declared order."""
    domain = {"a": ["x", "y", "z"], "b": list(range(6)), "c": [1, 2]}
    pred = eval(f"lambda a, b, c: {where}")  # noqa: S307 - test-generated predicates only
    keep = {
        tuple(p[g] for g in group)
        for p in (dict(zip("abc", v)) for v in itertools.product(*domain.values()))
        if pred(**p)
    }
    return [k for k in itertools.product(*[domain[g] for g in group]) if k in keep]


CONDS = [
    ("b >= 3", "b >= 3"),
    ("a IN ('x', 'z')", "a in ('x', 'z')"),
    ("b BETWEEN 1 AND 2 AND c = 2", "1 <= b <= 2 and c == 2"),
    ("a <> 'y' AND b < 2", "a != 'y' and b < 2"),
    ("b > 9", "b > 9"),
    ("NOT (a = 'x')", "not (a == 'x')"),
]


@settings(max_examples=40, deadline=None)
@given(cond=st.sampled_from(CONDS), group=st.sampled_from([["a"], ["b"], ["a", "b"], ["c", "a"], ["b", "c"]]))
def test_public_keys_are_the_declared_keys_inside_the_region(cond: tuple[str, str], group: list[str]) -> None:
    s = small_session()
    sql_cond, py_cond = cond
    r = s.query(f"SELECT {', '.join(group)} FROM t WHERE {sql_cond} GROUP BY {', '.join(group)}")
    assert isinstance(r, PublicResult)
    got = [tuple(row) for row in r.df[group].itertuples(index=False)]
    assert got == brute_keys(py_cond, group)
    assert s.spent == 0.0 and len(s.accountant) == 0 and s.ledger_frame().empty


def test_aliases_order_and_limit_apply_to_public_keys() -> None:
    s = small_session()
    r = s.query("SELECT c AS code, a FROM t WHERE b < 3 GROUP BY c, a ORDER BY c DESC LIMIT 4")
    assert list(r.df.columns) == ["code", "a"]
    assert [tuple(x) for x in r.df.itertuples(index=False)] == [(2, "x"), (2, "y"), (2, "z"), (1, "x")]
    assert "nothing was charged" in r.summary()
    binned = s.query("SELECT FLOOR(b / 2) * 2 AS lo FROM t WHERE b >= 2 GROUP BY FLOOR(b / 2) * 2")
    assert list(binned.df["lo"]) == [2, 4]
    assert isinstance(s.preview("SELECT a FROM t GROUP BY a"), PublicResult)  # a dry run is the free answer


def test_public_keys_refusals_name_the_problem() -> None:
    s = small_session()
    with pytest.raises(UnsupportedQueryError, match="HAVING needs an aggregate"):
        s.query("SELECT a FROM t GROUP BY a HAVING a = 'x'")
    with pytest.raises(UnsupportedQueryError, match="row-level SELECTs"):
        s.query("SELECT a FROM t")
    assert s.spent == 0.0 and len(s.accountant) == 0
    with pytest.raises(UnsupportedQueryError, match="row-level query"):
        s.query("SELECT * FROM t")


def test_public_keys_through_the_magic(ip: InteractiveShell) -> None:
    df = pd.read_csv(DATA / "pums.csv")
    ip.user_ns.update(pums=df, pums_schema=str(DATA / "pums.schema.json"))
    res, cap = run_cell(ip, "%dpsession pums --schema pums_schema --budget epsilon=1.0 --ledger memory")
    assert res.success, cap.stderr
    res, cap = run_cell(
        ip, "%%dpquery\nSELECT sex AS gender, educ FROM pums WHERE educ > 13 GROUP BY sex, educ ORDER BY sex DESC"
    )
    assert res.success, cap.stderr
    out = res.result
    assert isinstance(out, PublicResult) and len(out.df) == 6 and list(out.df["gender"]) == [1, 1, 1, 0, 0, 0]
    assert "warning" not in cap.stderr
    res, cap = run_cell(ip, "%%dpquery\nSELECT educ FROM pums WHERE educ > 20 GROUP BY educ")
    assert res.success and len(res.result.df) == 0 and "pure noise" not in cap.stderr
    res, cap = run_cell(ip, "%dpbudget")
    assert res.success
