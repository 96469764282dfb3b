"""`dpmagic overlap --sensitivity`: batch L1/L2 sensitivity of a query file, checked by brute force."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pytest
from tests_support import audit_gap_batch, brute_batch_sensitivity, oracle_rows

from dpmagic.domain.schema import Schema
from dpmagic.presentation.cli import main
from dpmagic.query.sql import parse_query

SCHEMA = {
    "table": "t",
    "columns": {
        "c": {"type": "categorical", "values": ["A", "B", "C"]},
        "d": {"type": "categorical", "values": ["Y", "N"]},
        "age": {"type": "int", "lower": 0, "upper": 5},
    },
}
QUERIES = """
SELECT COUNT(*) FROM t WHERE c = 'A' AND d = 'Y';
SELECT COUNT(*) FROM t WHERE c IN ('A', 'B');
SELECT COUNT(*) FROM t WHERE age BETWEEN 1 AND 3;
SELECT COUNT(*) FROM t WHERE age >= 3 AND d = 'N';
SELECT COUNT(*) FROM t WHERE c = 'C'
"""
PREDICATES = [
    lambda c, d, a: c == "A" and d == "Y",
    lambda c, d, a: c in ("A", "B"),
    lambda c, d, a: 1 <= a <= 3,
    lambda c, d, a: a >= 3 and d == "N",
    lambda c, d, a: c == "C",
]


def _files(tmp_path: Path, text: str, suffix: str = ".sql") -> tuple[str, str]:
    s = tmp_path / "schema.json"
    s.write_text(json.dumps(SCHEMA))
    q = tmp_path / f"q{suffix}"
    q.write_text(text)
    return str(s), str(q)


def _brute() -> tuple[int, int]:
    rows = list(itertools.product("ABC", "YN", range(6)))
    pops = [frozenset(j for j, p in enumerate(PREDICATES) if p(*r)) for r in rows]
    return max(len(p) for p in pops), max(len(a ^ b) for a in pops for b in pops)


def test_sensitivity_json_matches_brute_force(tmp_path: Path, capsys) -> None:
    schema, q = _files(tmp_path, QUERIES)
    assert main(["overlap", "--schema", schema, q, "--json", "--sensitivity"]) == 0
    out = json.loads(capsys.readouterr().out)
    rep = out["sensitivity"]
    add, rep1 = _brute()
    assert rep["queries"] == 5
    assert rep["add_remove"]["used"] == "B4"
    assert rep["add_remove"]["B4"] == {"l1": add, "l2": math.sqrt(add)}
    r = rep["replace"]
    assert r["exact"]["l1"] == rep1 and r["exact"]["l2"] == pytest.approx(math.sqrt(rep1))
    for k in ("B1", "B2", "2·B4"):  # seed 001's bounds and 2ω are upper bounds of the exact value
        assert r[k]["l1"] >= rep1
    assert r["used"] == "exact" and r[r["used"]]["l1"] == min(v["l1"] for k, v in r.items() if k != "used")
    assert out["max_overlap"]["upper"] == add  # the overlap analysis is unchanged


def test_sensitivity_table_names_the_bound_used(tmp_path: Path, capsys) -> None:
    schema, q = _files(tmp_path, QUERIES)
    assert main(["overlap", "--schema", schema, q, "--sensitivity"]) == 0
    out = capsys.readouterr().out
    assert "batch sensitivity of 5 COUNT(*) queries" in out
    assert out.count("← used (tightest proven)") == 2


def test_without_flag_no_sensitivity(tmp_path: Path, capsys) -> None:
    schema, q = _files(tmp_path, QUERIES)
    assert main(["overlap", "--schema", schema, q, "--json"]) == 0
    assert "sensitivity" not in json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("SELECT SUM(age) FROM t WHERE c = 'A'", "statement 1: --sensitivity needs SELECT COUNT(*)"),
        ("SELECT COUNT(*) FROM t; SELECT c, COUNT(*) FROM t GROUP BY c", "statement 2: --sensitivity needs"),
        ("SELECT COUNT(*) FROM t WHERE nosuch = 1", "statement 1"),
    ],
)
def test_bad_file_one_clear_error(tmp_path: Path, capsys, text: str, fragment: str) -> None:
    schema, q = _files(tmp_path, text)
    assert main(["overlap", "--schema", schema, q, "--sensitivity"]) == 2
    err = capsys.readouterr()
    assert fragment in err.err and err.err.count("\n") == 1 and err.out == ""


def test_empty_file(tmp_path: Path, capsys) -> None:
    schema, q = _files(tmp_path, "-- nothing\n")
    assert main(["overlap", "--schema", schema, q, "--json", "--sensitivity"]) == 0
    rep = json.loads(capsys.readouterr().out)["sensitivity"]
    assert rep["add_remove"]["B4"]["l1"] == 0 and rep["replace"]["exact"]["l1"] == 0


def test_sensitivity_beyond_2_53_is_exact(tmp_path: Path, capsys) -> None:
    """Issue 24: the audit's batch on an int64 column (ends near 2^60) reports replace-one L1 = 10 (brute force)."""
    schema, sql = audit_gap_batch()
    s = tmp_path / "schema.json"
    s.write_text(json.dumps(schema))
    q = tmp_path / "q.sql"
    q.write_text(";\n".join(sql))
    assert main(["overlap", "--schema", str(s), str(q), "--json", "--sensitivity"]) == 0
    rep = json.loads(capsys.readouterr().out)["sensitivity"]
    sch = Schema.from_dict(schema)
    boxes = [parse_query(x, sch).coverage for x in sql]
    add, rep1 = brute_batch_sensitivity(boxes, oracle_rows(sch, boxes))
    assert (add, rep1) == (5, 10)
    assert rep["add_remove"]["B4"]["l1"] == add
    assert rep["replace"]["used"] == "exact"
    assert rep["replace"]["exact"] == {"l1": rep1, "l2": math.sqrt(rep1)}
