"""Held-out-style check: 40 queries written in the style of a peer's PUMS test corpus (our own writing).

Counts how many dpmagic answers and how many it refuses (with the message), at a large budget.  Run:
``PYTHONPATH=$PWD python benchmarks/sql_peer_style.py`` → ``benchmarks/results/sql_peer_style.txt`` (the
refusal's hint after it).  Its sequel, 38 shapes an analyst writes on Adult checked against SQLite:
``benchmarks/sql_adult_shapes.py``.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

import dpmagic
from dpmagic.errors import DPMagicError

DATA = Path(dpmagic.__file__).parent / "data"
QUERIES = [
    "SELECT COUNT(*) AS c FROM PUMS.PUMS",
    "SELECT SUM(age) AS s, COUNT(*) AS c FROM PUMS.PUMS",
    "SELECT AVG(income) FROM PUMS.PUMS GROUP BY sex",
    "SELECT sex, AVG(age) AS age FROM PUMS.PUMS GROUP BY sex ORDER BY sex",
    "SELECT married, COUNT(*) AS n FROM PUMS.PUMS GROUP BY married HAVING COUNT(*) > 100",
    "SELECT TOP 5 age, COUNT(*) AS n FROM PUMS.PUMS GROUP BY age ORDER BY n DESC",
    "SELECT age, COUNT(*) FROM PUMS.PUMS GROUP BY age ORDER BY age LIMIT 10",
    "SELECT educ, AVG(income) AS inc FROM PUMS.PUMS GROUP BY educ ORDER BY inc DESC",
    "SELECT COUNT(DISTINCT educ) AS d FROM PUMS.PUMS",
    "SELECT race, COUNT(DISTINCT age) FROM PUMS.PUMS GROUP BY race",
    "SELECT VAR(age) FROM PUMS.PUMS",
    "SELECT married, VAR(income) AS v FROM PUMS.PUMS GROUP BY married",
    "SELECT STDDEV(age) AS sd, AVG(age) AS a FROM PUMS.PUMS",
    "SELECT CAST(SUM(income) AS FLOAT) / COUNT(*) AS mean_income FROM PUMS.PUMS",
    "SELECT (SUM(age)) AS total FROM PUMS.PUMS",
    "SELECT SUM(age) / COUNT(age) AS a FROM PUMS.PUMS GROUP BY married",
    "SELECT 2 * AVG(age) AS twice FROM PUMS.PUMS",
    "SELECT 1 AS one, COUNT(*) FROM PUMS.PUMS",
    "SELECT COUNT(*) FROM PUMS.PUMS WHERE age > 30 AND sex = 1",
    "SELECT COUNT(*) FROM PUMS.PUMS WHERE married = TRUE",
    "SELECT COUNT(*) FROM PUMS.PUMS WHERE sex = 0 OR educ > 10",
    "SELECT COUNT(*) FROM PUMS.PUMS WHERE age IS NULL",
    "SELECT COUNT(*) FROM PUMS.PUMS WHERE CAST(age AS INT) BETWEEN 20 AND 30",
    "SELECT CASE WHEN age < 40 THEN 'young' ELSE 'old' END AS band, COUNT(*) FROM PUMS.PUMS GROUP BY band",
    "SELECT FLOOR(age / 10) * 10 AS decade, AVG(income) FROM PUMS.PUMS GROUP BY decade ORDER BY decade",
    "SELECT educ, sex, COUNT(*) AS n FROM PUMS.PUMS GROUP BY educ, sex HAVING n > 20 ORDER BY educ, sex",
    "SELECT PERCENTILE_CONT(0.5) WITHIN GROUP (ORDER BY income) AS med FROM PUMS.PUMS",
    "SELECT MEDIAN(age) FROM PUMS.PUMS GROUP BY sex",
    "SELECT SUM(LEAST(GREATEST(income, 0), 100000)) AS s FROM PUMS.PUMS",
    "SELECT AVG(CLAMP(income, 0, 60000)) FROM PUMS.PUMS GROUP BY race",
    "SELECT COUNT(*) AS n, race FROM PUMS GROUP BY race ORDER BY n",
    "SELECT TOP 3 race, SUM(income) AS s FROM PUMS GROUP BY race ORDER BY s DESC",
    "SELECT ROUND(AVG(age), 1) AS a FROM PUMS",
    "SELECT sex AS s, COUNT(*) AS c FROM PUMS.PUMS GROUP BY sex",
    # expected refusals
    "SELECT age FROM PUMS.PUMS",
    "SELECT MIN(age), MAX(age) FROM PUMS.PUMS",
    "SELECT COUNT(*) FROM PUMS.PUMS p JOIN PUMS.PUMS q ON p.age = q.age",
    "SELECT AVG(c) FROM (SELECT sex, COUNT(*) AS c FROM PUMS.PUMS GROUP BY sex) AS t",
    "SELECT income, COUNT(*) FROM PUMS.PUMS GROUP BY income",
    'SELECT COUNT(*) FROM PUMS.PUMS WHERE sex = "1"',
]


def main() -> None:
    df = pd.read_csv(DATA / "pums.csv")
    s = dpmagic.Session(df, DATA / "pums.schema.json", "epsilon=1e9")
    lines, answered = [], 0
    for q in QUERIES:
        try:
            r = s.query(q, epsilon=1.0)
            answered += 1
            lines.append(f"ANSWERED ({len(r.df)} rows)  {q}")
        except DPMagicError as exc:
            hint = f" (hint: {exc.hint})" if exc.hint else ""
            lines.append(f"REFUSED  {q}\n          -> {exc}{hint}")
    head = f"{answered} of {len(QUERIES)} answered, {len(QUERIES) - answered} refused"
    out = Path(__file__).parent / "results" / "sql_peer_style.txt"
    out.parent.mkdir(exist_ok=True)
    out.write_text(head + "\n" + "\n".join(lines) + "\n")
    print(head)


if __name__ == "__main__":
    main()
