"""Time of ``Session.consistent()`` on a large session: 40 two-column GROUP BY queries on Adult (COUNT, SUM, AVG),
well over 1,000 measurements — the exact Gram matrix and its null space grow with the square of their number.

    python benchmarks/bench_consistency_large.py [number of queries, default 40]
"""

from __future__ import annotations

import itertools
import sys
import time

import dpmagic

CATS = ["workclass", "education", "marital-status", "relationship", "race", "sex", "class"]
AGGS = ["COUNT(*)", "COUNT(*), AVG(age)", 'SUM("hours-per-week")', 'COUNT(*), AVG("hours-per-week")']


def queries(n: int = 40) -> list[str]:
    """``n`` two-column GROUP BY queries over pairs of Adult's categorical columns, some with a WHERE box."""
    pairs = list(itertools.combinations(CATS, 2))
    out = []
    for k in range(n):
        a, b = pairs[k % len(pairs)]
        agg = AGGS[k % len(AGGS)]
        where = " WHERE age BETWEEN 25 AND 60" if k % 3 == 1 else ""
        out.append(f'SELECT "{a}", "{b}", {agg} FROM adult{where} GROUP BY "{a}", "{b}"')
    return out


def main(n: int = 40) -> float:
    df, schema = dpmagic.load_adult()
    s = dpmagic.Session(df, schema, f"epsilon={float(n)}")
    for sql in queries(n):
        s.query(sql, epsilon=1.0)
    t0 = time.perf_counter()
    table = s.consistent()
    elapsed = time.perf_counter() - t0
    print(
        f"{n} queries, {table.attrs['measurements']} measurements, {table.attrs['dependencies']} identities: "
        f"Session.consistent() {elapsed:.2f} s"
    )
    return elapsed


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 40)
