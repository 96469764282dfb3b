"""`dpmagic overlap`: the docs/design.md §3.2 contract."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dpmagic.presentation.cli import main

SCHEMA = {
    "table": "census",
    "columns": {
        "Postcode": {"type": "categorical", "values": ["A", "B", "C"]},
        "Native": {"type": "categorical", "values": ["Y", "N"]},
        "age": {"type": "int", "lower": 0, "upper": 100},
    },
}
EXAMPLE_3 = """
-- Smith et al. 2022, Example 3
SELECT COUNT(*) FROM t WHERE Postcode = 'A' AND Native = 'Y';
SELECT COUNT(*) FROM t WHERE Postcode IN ('A', 'B');
SELECT COUNT(*) FROM t WHERE Postcode IN ('A', 'C') AND Native = 'N';
SELECT COUNT(*) FROM t WHERE Native = 'Y';
SELECT COUNT(*) FROM t WHERE Postcode = 'C';
SELECT COUNT(*) FROM t WHERE Postcode = 'B' AND Native = 'N';
"""


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(SCHEMA))
    queries = tmp_path / "q.sql"
    queries.write_text(EXAMPLE_3)
    return schema, queries


def run(args: list[str], capsys) -> tuple[int, str, str]:
    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_example_3_json(files, capsys) -> None:
    schema, queries = files
    code, out, err = run(["overlap", "--schema", str(schema), str(queries), "--json"], capsys)
    assert code == 0, err
    result = json.loads(out)
    assert result["queries"] == 6 and result["sequential"] == 6.0
    mo = result["max_overlap"]
    assert mo["value"] == mo["upper"] == mo["lower"] == 3.0 and mo["exact"] is True
    assert result["clique"]["value"] >= 3.0 and result["chromatic"]["value"] >= result["clique"]["value"]
    assert result["utility_gain"] == pytest.approx(0.5)
    assert isinstance(result["seconds"], float)
    # the witness row really is covered by 3 queries
    from dpmagic.domain.schema import Schema
    from dpmagic.query import parse_query

    s = Schema.from_dict(SCHEMA)
    boxes = [parse_query(q, s).where for q in EXAMPLE_3.split(";") if "SELECT" in q]
    assert sum(b.contains_row(mo["witness"]) for b in boxes) == 3


def test_example_2_and_weights_jsonl(tmp_path: Path, files, capsys) -> None:
    schema, _ = files
    q = tmp_path / "q.jsonl"
    lines = [
        {"sql": "SELECT COUNT(*) FROM t WHERE Postcode = 'A' AND Native = 'Y'", "weight": 0.5},
        {"sql": "SELECT COUNT(*) FROM t WHERE Postcode IN ('A', 'B')", "weight": 0.25},
        {"sql": "SELECT COUNT(*) FROM t WHERE Postcode = 'B' AND Native = 'N'", "weight": 1.0},
    ]
    q.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    code, out, _ = run(["overlap", "--schema", str(schema), str(q), "--json"], capsys)
    result = json.loads(out)
    assert code == 0
    assert result["sequential"] == pytest.approx(1.75)
    assert result["max_overlap"]["upper"] == pytest.approx(1.25)  # Example 2: γ = 2 queries, weighted


def test_table_output(files, capsys) -> None:
    schema, queries = files
    code, out, _ = run(["overlap", "--schema", str(schema), str(queries)], capsys)
    assert code == 0
    assert "maximum overlap γ" in out and "utility gain" in out and "50.0%" in out


def test_replace_neighbours_reports_interval(files, capsys) -> None:
    schema, queries = files
    code, out, _ = run(["overlap", "--schema", str(schema), str(queries), "--json", "--neighbors", "replace"], capsys)
    result = json.loads(out)
    mo = result["max_overlap"]
    assert mo["exact"] and 3.0 <= mo["lower"] == mo["upper"] <= 6.0
    # brute force over all pairs of rows of the (small) domain
    from itertools import product

    from dpmagic.domain.schema import Schema
    from dpmagic.query import parse_query

    s = Schema.from_dict(SCHEMA)
    boxes = [parse_query(q, s).where for q in EXAMPLE_3.split(";") if "SELECT" in q]
    rows = [{"Postcode": p, "Native": n, "age": 0} for p, n in product("ABC", "YN")]
    brute = max(sum(b.contains_row(x) or b.contains_row(y) for b in boxes) for x in rows for y in rows if x != y)
    assert mo["upper"] == brute


@pytest.mark.parametrize(
    "content, suffix, fragment",
    [
        ("SELECT COUNT(*) FROM t WHERE Postcode = 'A';\nSELECT COUNT(*) FROM t WHERE Zip = 3;", ".sql", "statement 2"),
        ("SELECT COUNT(*) FROM t WHERE age > 3 OR Native = age;", ".sql", "several columns"),
        ('{"sql": "SELECT COUNT(*) FROM t", "weight": -1}\n', ".jsonl", "line 1: weight"),
        ("{not json\n", ".jsonl", "not valid JSON"),
        ('{"weight": 1}\n', ".jsonl", "string 'sql'"),
    ],
)
def test_bad_queries_exit_2_with_one_line(tmp_path: Path, files, capsys, content, suffix, fragment) -> None:
    schema, _ = files
    q = tmp_path / f"bad{suffix}"
    q.write_text(content)
    code, out, err = run(["overlap", "--schema", str(schema), str(q), "--json"], capsys)
    assert code == 2 and out == ""
    assert fragment in err and len(err.strip().splitlines()) == 1


def test_bad_schema_exit_2(tmp_path: Path, files, capsys) -> None:
    _, queries = files
    bad = tmp_path / "bad.json"
    bad.write_text('{"columns": {"x": {"type": "nope"}}}')
    code, _, err = run(["overlap", "--schema", str(bad), str(queries)], capsys)
    assert code == 2 and "unknown type" in err


def test_console_script_entry_point(files) -> None:
    schema, queries = files
    proc = subprocess.run(
        [sys.executable, "-m", "dpmagic.presentation.cli", "overlap", "--schema", str(schema), str(queries), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["max_overlap"]["value"] == 3.0


# -- issue 30: the ledger commands -------------------------------------------------------------------------


@pytest.fixture
def ledger_file(tmp_path: Path, adult) -> Path:
    """A ledger with three charges (0.1 + 0.05 = 0.15000000000000002 charged after the second, sequential)."""
    from dpmagic import Session

    path = tmp_path / "ledger.sqlite"
    s = Session(*adult, "epsilon=1", ledger=path, bound="sequential")
    numbers = [
        s.query(sql, epsilon=eps).number
        for sql, eps in [
            ("SELECT COUNT(*) FROM adult WHERE age < 30", 0.1),
            ("SELECT COUNT(*) FROM adult WHERE age >= 30", 0.05),
            ("SELECT COUNT(*) FROM adult WHERE sex = 'Male'", 0.1),
        ]
    ]
    assert numbers == [1, 2, 3]  # what the notebook shows
    assert [e.id for e in s.accountant.entries()] != numbers  # ledger event ids differ
    s.ledger.close()
    return path


def test_ledger_show_numbers_queries_as_the_notebook_does(ledger_file: Path, capsys) -> None:
    code, out, err = run(["ledger", "show", str(ledger_file)], capsys)
    assert code == 0, err
    shown = [line.split()[0] for line in out.splitlines() if line.startswith("  #")]
    assert shown == ["#1", "#2", "#3"]
    assert "3 counted queries" in out


def test_html_export_rounds_for_display_only_and_numbers_like_the_notebook(ledger_file: Path, capsys) -> None:
    code, out, _ = run(["ledger", "export", str(ledger_file), "--format", "html"], capsys)
    assert code == 0
    assert "0.15000000000000002" not in out and "<td>0.15</td>" in out
    assert "<th>#</th>" in out and "<tr><td>1</td>" in out and "<tr><td>3</td>" in out
    code, out, _ = run(["ledger", "export", str(ledger_file), "--format", "json"], capsys)
    rows = json.loads(out)
    assert rows[1]["charged_after"] == 0.1 + 0.05  # the data exports keep the exact values
    assert [r["number"] for r in rows] == [1, 2, 3]


@pytest.mark.parametrize("content", [b"hello, not a ledger\n", b""])
def test_ledger_commands_on_a_file_that_is_not_a_ledger(tmp_path: Path, capsys, content: bytes) -> None:
    import sqlite3

    text = tmp_path / "notes.txt"
    text.write_bytes(content)
    other = tmp_path / "other.sqlite"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE t (a)")
    conn.commit()
    conn.close()
    before = other.read_bytes()
    for path in (text, other):
        for args in (["show", str(path)], ["export", str(path), "--format", "html"]):
            code, out, err = run(["ledger", *args], capsys)
            assert code == 2 and out == ""
            assert err.startswith(f"dpmagic ledger: {path} is not a dpmagic ledger (")
            assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert other.read_bytes() == before  # nothing was added to someone else's sqlite file
    assert text.read_bytes() == content


def test_ledger_show_into_a_closed_pipe_is_quiet(ledger_file: Path) -> None:
    import os

    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before anything is written (as `| head` after its lines)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "dpmagic.presentation.cli", "ledger", "show", str(ledger_file)],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert "BrokenPipeError" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr == "" and proc.returncode == 141
