"""Realistic shapes an analyst writes on Adult (our own writing, issue 29): answered, refused (with the message), or
wrong — each answer checked against SQLite's exact evaluation of the same SQL at ε = 10⁹ per query (the discrete
noise is then 0 except with negligible probability).

A dpmagic answer lists every declared GROUP BY key inside the WHERE region; a key SQLite does not list (it holds no
row) must hold 0 (COUNT / SUM) or NaN (AVG, a ratio).  Interval columns are not compared (they are checked to
contain the value).  Run: ``python benchmarks/sql_adult_shapes.py`` → ``benchmarks/results/sql_adult_shapes.txt``.
"""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path
from typing import Any

import pandas as pd

import dpmagic
from dpmagic.errors import DPMagicError

DATA = Path(dpmagic.__file__).parent / "data"

#: (dpmagic SQL, SQLite SQL when it differs: None = the same text)
SHAPES: list[tuple[str, str | None]] = [
    ("SELECT COUNT (*) AS n FROM adult", None),
    ("SELECT sex, COUNT(*) AS n, AVG(age) AS a FROM adult GROUP BY sex", None),
    ('SELECT race, AVG("hours-per-week") AS h FROM adult GROUP BY race ORDER BY h DESC', None),
    ("SELECT class, COUNT(*) AS n FROM adult WHERE age BETWEEN 25 AND 54 GROUP BY class", None),
    (
        "SELECT sex, SUM(CASE WHEN class = '>50K' THEN 1 ELSE 0 END) * 1.0 / COUNT(*) AS rich FROM adult GROUP BY sex",
        None,
    ),
    (
        "SELECT education, COUNT(*) FILTER (WHERE class = '>50K') * 100.0 / COUNT(*) AS pct FROM adult "
        "GROUP BY education",
        "SELECT education, SUM(class = '>50K') * 100.0 / COUNT(*) AS pct FROM adult GROUP BY education",
    ),
    ('SELECT SUM("capital-gain" - "capital-loss") AS net FROM adult', None),
    ('SELECT sex, AVG("hours-per-week" * 52) AS yearly FROM adult GROUP BY sex', None),
    ('SELECT AVG(age + "education-num") AS s FROM adult', None),
    ('SELECT SUM("capital-gain") * 1.0 / COUNT(*) AS mean_gain FROM adult', None),
    ("SELECT FLOOR(age / 10) * 10 AS decade, COUNT(*) AS n FROM adult GROUP BY decade ORDER BY decade", None),
    (
        "SELECT CASE WHEN age < 30 THEN 'young' WHEN age < 60 THEN 'middle' ELSE 'old' END AS band, COUNT(*) AS n "
        "FROM adult GROUP BY band",
        None,
    ),
    (
        'WITH workers AS (SELECT * FROM adult WHERE "hours-per-week" >= 35) SELECT sex, COUNT(*) AS n '
        "FROM workers GROUP BY sex",
        None,
    ),
    ("SELECT COUNT(*) AS n FROM (SELECT * FROM adult WHERE age > 60) AS t", None),
    ("SELECT sex, COUNT(*) AS n FROM adult WHERE \"marital-status\" IN ('Divorced', 'Separated') GROUP BY sex", None),
    ("SELECT COUNT(*) AS n FROM adult WHERE occupation LIKE 'Prof%'", None),
    (
        "SELECT COUNT(*) AS n FROM adult WHERE \"education-num\" = '13'",
        'SELECT COUNT(*) AS n FROM adult WHERE "education-num" = 13',
    ),
    (
        "SELECT sex, COUNT(*) FILTER (WHERE age < 30) AS young, COUNT(*) FILTER (WHERE age >= 60) AS old "
        "FROM adult GROUP BY sex",
        "SELECT sex, SUM(age < 30) AS young, SUM(age >= 60) AS old FROM adult GROUP BY sex",
    ),
    (
        "SELECT COUNT(*) FILTER (WHERE sex = 'Female') * 1.0 / COUNT(*) AS share FROM adult",
        "SELECT SUM(sex = 'Female') * 1.0 / COUNT(*) AS share FROM adult",
    ),
    ("SELECT relationship, COUNT(*) AS n FROM adult GROUP BY relationship HAVING COUNT(*) > 1000", None),
    ("SELECT workclass, COUNT(*) AS n FROM adult GROUP BY workclass ORDER BY n DESC LIMIT 3", None),
    ("SELECT ROUND(AVG(age), 1) AS a FROM adult", None),
    # released values are not integers, so / divides them as reals (SQLite would truncate int / int)
    (
        "SELECT COUNT(*) AS n, SUM(age) AS s, SUM(age) / COUNT(*) AS m FROM adult",
        "SELECT COUNT(*) AS n, SUM(age) AS s, SUM(age) * 1.0 / COUNT(*) AS m FROM adult",
    ),
    ("SELECT sex, race, COUNT(*) AS n FROM adult GROUP BY sex, race", None),
    ("SELECT COUNT(*) AS n FROM adult WHERE NOT (sex = 'Male' AND age < 30)", None),
    ('SELECT COUNT(*) AS n FROM adult WHERE age > 40 OR "hours-per-week" > 50', None),
    ('SELECT SUM(2 * "hours-per-week" - 1) AS s FROM adult', None),
    ("SELECT PI() * COUNT(*) AS p FROM adult", "SELECT 3.141592653589793 * COUNT(*) AS p FROM adult"),
    ("SELECT COUNT(*) AS n FROM adult WHERE age > (SELECT AVG(age) FROM adult)", None),
    ("SELECT sex FROM adult GROUP BY sex", None),
    (
        "SELECT sex, SUM(CASE WHEN age < 30 THEN 1 WHEN age < 60 THEN 2 ELSE 3 END) AS score FROM adult GROUP BY sex",
        None,
    ),
    (
        'SELECT SUM(CASE WHEN "hours-per-week" > 40 THEN "hours-per-week" - 40 ELSE 0 END) AS overtime FROM adult',
        None,
    ),
    (
        "SELECT race, COUNT(*) FILTER (WHERE class = '>50K') AS rich, COUNT(*) AS n FROM adult GROUP BY race",
        "SELECT race, SUM(class = '>50K') AS rich, COUNT(*) AS n FROM adult GROUP BY race",
    ),
    # expected refusals
    ('SELECT AVG(age * "hours-per-week") AS x FROM adult', None),
    ('SELECT sex, AVG(ABS("hours-per-week" - 40)) AS dev FROM adult GROUP BY sex', None),
    (
        'SELECT SUM(GREATEST("capital-gain" - "capital-loss", 0)) AS net_pos FROM adult',
        'SELECT SUM(MAX("capital-gain" - "capital-loss", 0)) AS net_pos FROM adult',
    ),
    (
        'SELECT workclass, SUM(CASE WHEN "hours-per-week" > 40 THEN "hours-per-week" - 40 ELSE 0 END) AS overtime '
        "FROM adult GROUP BY workclass",
        None,
    ),
    ("SELECT fnlwgt, COUNT(*) AS n FROM adult GROUP BY fnlwgt", None),
]


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, str) or isinstance(b, str):
        return str(a) == str(b)
    if a is None or b is None:
        return (a is None or (isinstance(a, float) and math.isnan(a))) and (
            b is None or (isinstance(b, float) and math.isnan(b))
        )
    return math.isclose(float(a), float(b), rel_tol=1e-6, abs_tol=1e-6)


def _empty_cell(row: tuple[Any, ...]) -> bool:
    """A declared key SQLite does not list: its aggregates are 0 (COUNT / SUM) or NaN (a ratio)."""
    nums = [v for v in row if not isinstance(v, str)]
    return any(isinstance(v, float) and (math.isnan(v) or v == 0) for v in nums) and all(
        isinstance(v, (int, float)) and (math.isnan(v) or v == 0) or isinstance(v, str) for v in nums
    )


def check(got: pd.DataFrame, ref: list[tuple[Any, ...]], ordered: bool) -> str | None:
    """None when the answer equals SQLite's; else what differs."""
    cols = [c for c in got.columns if not str(c).endswith(("_ci_low", "_ci_high"))]
    for c in cols:
        if f"{c}_ci_low" in got.columns:
            bad = ~((got[f"{c}_ci_low"] <= got[c]) & (got[c] <= got[f"{c}_ci_high"])) & got[c].notna()
            if bad.any():
                return f"{c}: a value outside its interval"
    rows = [tuple(r) for r in got[cols].itertuples(index=False)]
    listed = [r for r in rows if any(all(_same(x, y) for x, y in zip(r, s, strict=False)) for s in ref)]
    extra = [r for r in rows if r not in listed]
    if any(not _empty_cell(r) for r in extra):
        return f"rows not in SQLite's answer: {extra[:3]}"
    if len(listed) != len(ref):
        return f"{len(listed)} rows match of SQLite's {len(ref)}"
    if ordered and not all(all(_same(x, y) for x, y in zip(r, s, strict=False)) for r, s in zip(listed, ref)):
        return "another order"
    return None


def main() -> None:
    df = pd.read_csv(DATA / "adult.csv")
    con = sqlite3.connect(":memory:")
    df.to_sql("adult", con, index=False)
    s = dpmagic.Session(df, DATA / "adult.schema.json", "epsilon=1e12")
    lines, counts = [], {"ANSWERED": 0, "REFUSED": 0, "WRONG": 0}
    for sql, lite in SHAPES:
        try:
            r = s.query(sql, epsilon=1e9)
        except DPMagicError as exc:
            counts["REFUSED"] += 1
            hint = f" (hint: {exc.hint})" if exc.hint else ""
            lines.append(f"REFUSED   {sql}\n          -> {exc}{hint}")
            continue
        ref = con.execute(lite or sql).fetchall()
        why = check(r.df, ref, "ORDER BY" in sql.upper())
        tag = "ANSWERED" if why is None else "WRONG"
        counts[tag] += 1
        lines.append(f"{tag:9} {sql}" + ("" if why is None else f"\n          -> {why}"))
    head = f"{counts['ANSWERED']} of {len(SHAPES)} answered and equal to SQLite, {counts['WRONG']} wrong, " + (
        f"{counts['REFUSED']} refused"
    )
    out = Path(__file__).parent / "results" / "sql_adult_shapes.txt"
    out.write_text(head + "\n" + "\n".join(lines) + "\n")
    print(head)


if __name__ == "__main__":
    main()
