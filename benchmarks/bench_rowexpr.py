"""SUM(a + b): the linear path (SUM(a) + SUM(b), two releases, the cost split by the planner, a union-bound
interval) against ONE release of the per-row value a + b over its interval-arithmetic range (issue 29) — the
plan dpmagic now makes for ``SUM(a + b)`` (:mod:`dpmagic.query.derived`; the linear path is kept for expressions
with a clamped term only).

Data-independent: it compares the calibrated noise (standard deviation) and the 95% interval half-width of the
two plans for a few schemas, under each definition, for add/remove and replace-one.  Runs in about a second::

    python benchmarks/bench_rowexpr.py
"""

from __future__ import annotations

import itertools
import math

import sqlglot

from dpmagic.accountant.currency import CURRENCIES
from dpmagic.domain.schema import Schema
from dpmagic.noise.calibration import calibrate
from dpmagic.noise.sensitivity import coverage_of, patterns, value_range
from dpmagic.query.rowexpr import row_expr
from dpmagic.query.sql import parse_query
from dpmagic.releases.plan import plan_noise

COST = {"pure": 1.0, "zcdp": 0.5, "gdp": 1.0}
RANGES = {
    "a, b in [0, 100]": ((0, 100), (0, 100)),
    "a in [0, 100], b in [0, 10]": ((0, 100), (0, 10)),
    "a in [0, 100], b in [-100, 0]": ((0, 100), (-100, 0)),
}


def compare(ra: tuple[int, int], rb: tuple[int, int], definition: str, replace_one: bool) -> tuple[float, ...]:
    schema = Schema.from_dict(
        {
            "table": "t",
            "columns": {
                "a": {"type": "int", "lower": ra[0], "upper": ra[1]},
                "b": {"type": "int", "lower": rb[0], "upper": rb[1]},
            },
        }
    )
    cost = COST[definition]
    q = parse_query("SELECT SUM(a) + SUM(b) AS s FROM t", schema)  # the linear path, written out
    plan = plan_noise(q, schema, CURRENCIES[definition], cost, replace_one=replace_one)
    na, nb = plan.sums["a"], plan.sums["b"]
    lin_sd = math.sqrt(na.variance + nb.variance)
    lin_hw = na.ci_halfwidth(0.975) + nb.ci_halfwidth(0.975)  # the union bound of docs/sql.md
    q1 = parse_query("SELECT SUM(a + b) AS s FROM t", schema)  # one release of the derived column a + b
    one = plan_noise(q1, schema, CURRENCIES[definition], cost, replace_one=replace_one).sums["a + b"]
    r = row_expr(sqlglot.parse_one("a + b"), schema, lambda c: value_range(q, schema, c))
    direct = calibrate(definition, cost, patterns(r.lo, r.hi, coverage_of(q, schema), replace_one=replace_one))
    assert (one.std, one.ci_halfwidth(0.95)) == (direct.std, direct.ci_halfwidth(0.95))  # the plan is that release
    return lin_sd, lin_hw, one.std, one.ci_halfwidth(0.95)


def main() -> None:
    print("| ranges | definition | relation | linear sd | linear 95% hw | one-release sd | one-release 95% hw |")
    print("|---|---|---|---|---|---|---|")
    for (name, (ra, rb)), definition, rel in itertools.product(RANGES.items(), COST, (False, True)):
        ls, lh, os_, oh = compare(ra, rb, definition, rel)
        relation = "replace-one" if rel else "add/remove"
        print(f"| {name} | {definition} | {relation} | {ls:.1f} | {lh:.1f} | {os_:.1f} | {oh:.1f} |")


if __name__ == "__main__":
    main()
