"""A worker process for the ledger tests: binds the PUMS sample to a ledger file and runs random queries.

python tests/ledger_worker.py LEDGER SEED N [--state]   → prints one JSON line per admitted query, then a summary
"""

from __future__ import annotations

import json
import random
import sys

import pandas as pd
from tests_support import load_table

from dpmagic import BudgetExceededError, Session
from dpmagic.domain.schema import Schema

BUDGET = "epsilon=3.0"


def pums() -> tuple[pd.DataFrame, Schema]:
    return load_table("pums")


def random_query(rng: random.Random) -> tuple[str, float]:
    preds = []
    if rng.random() < 0.6:
        lo = rng.randint(0, 90)
        preds.append(f"age BETWEEN {lo} AND {lo + rng.randint(0, 40)}")
    if rng.random() < 0.5:
        preds.append(f"sex = {rng.randint(0, 1)}")
    if rng.random() < 0.4:
        preds.append(f"race IN ({', '.join(str(r) for r in rng.sample(range(1, 7), rng.randint(1, 3)))})")
    if rng.random() < 0.3:
        preds.append(f"educ >= {rng.randint(1, 16)}")
    agg = rng.choice(["COUNT(*)", "SUM(income)", "AVG(age)", "COUNT(*), SUM(age)"])
    where = (" WHERE " + " AND ".join(preds)) if preds else ""
    return f"SELECT {agg} FROM pums{where}", rng.choice([0.05, 0.1, 0.2, 0.3])


def main() -> None:
    ledger, seed, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    df, schema = pums()
    s = Session(df, schema, BUDGET, ledger=ledger)
    if "--state" in sys.argv:
        print(json.dumps({"spent": s.spent, "bounds": s.bounds_summary(), "queries": len(s.accountant)}))
        sql, eps = random_query(random.Random(seed))
        p = s.preview(sql, epsilon=eps)
        print(json.dumps({"after": p.charge.after, "before": p.charge.before, "admissible": p.admissible}))
        return
    rng = random.Random(seed)
    admitted = refused = 0
    for _ in range(n):
        sql, eps = random_query(rng)
        try:
            r = s.query(sql, epsilon=eps, fresh=True)
        except BudgetExceededError:
            refused += 1
            continue
        admitted += 1
        print(json.dumps({"entry": r.entry_id}), flush=True)
    print(json.dumps({"admitted": admitted, "refused": refused}), flush=True)


if __name__ == "__main__":
    main()
