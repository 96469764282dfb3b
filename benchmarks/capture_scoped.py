"""Capture the scoped searches of a dense analyst session (issue 28) for replay: ``python benchmarks/capture_scoped.py
VARIANT SEED N OUT.pkl [MIN_MS]`` (VARIANT: one of ``DENSE_VARIANTS`` or ``DRILLDOWN_VARIANTS``).  Each search
taking more than ``MIN_MS`` (default 3) ms is pickled with its arguments (problem, incumbent, target, terms,
rounding) and its deadline budget; :func:`replay` runs them again."""

from __future__ import annotations

import math
import pickle
import sys
import time
from typing import Any

sys.path.insert(0, __file__.rsplit("/", 1)[0])


def capture(variant: str, seed: int, n: int, out: str, min_ms: float = 3.0) -> None:
    from workloads import DRILLDOWN_VARIANTS, dense_analyst_log, dense_drilldown_log, pums_data

    import dpmagic.overlap.portfolio as pf
    from dpmagic import Session, load_adult

    rec: list[dict[str, Any]] = []
    orig = pf.scoped_search

    def wrapped(prob: Any, deadline: float, rnd: Any, incumbent: float, target: float = math.inf, terms: Any = None,
                state: Any = None) -> Any:  # fmt: skip
        resumed = state is not None and "search" in state
        t0 = time.perf_counter()
        r = orig(prob, deadline, rnd, incumbent, target, terms, state)
        dt = time.perf_counter() - t0
        if dt * 1e3 > min_ms and not resumed:
            rec.append(dict(prob=prob, budget=deadline - t0, rnd=rnd, incumbent=incumbent, target=target,
                            terms=terms, seconds=dt, upper=r[1], exact=r[2]))  # fmt: skip
        return r

    pf.scoped_search = wrapped
    drill = variant in DRILLDOWN_VARIANTS  # the second held-out family (Adult or PUMS)
    df, schema = pums_data() if drill and DRILLDOWN_VARIANTS[variant]["table"] == "pums" else load_adult()
    log = dense_drilldown_log if drill else dense_analyst_log
    s = Session(df, schema, "epsilon=100000", default_cost=1.0)
    for _i, (sql, eps) in enumerate(log(n, seed=seed, schema=schema, variant=variant)):
        s.query(sql, epsilon=eps, fresh=True)
    with open(out, "wb") as f:
        pickle.dump(rec, f)
    print(f"{len(rec)} searches captured, {sum(r['seconds'] for r in rec):.2f} s")


def replay(path: str, cap: float | None = None) -> tuple[float, int, int]:
    """Run the captured searches again (``_Search`` only): total seconds, nodes, timed out."""
    from dpmagic.overlap.deadline import SearchTimeout
    from dpmagic.overlap.scoped import _Search

    with open(path, "rb") as f:
        rec = pickle.load(f)
    total, nodes, out = 0.0, 0, 0
    for r in rec:
        budget = r["budget"] if cap is None else cap
        t0 = time.perf_counter()
        s = _Search(r["prob"], t0 + budget, r["incumbent"], r["target"], r["rnd"].slack, r["terms"])
        try:
            s.run()
        except SearchTimeout:
            out += 1
        total += time.perf_counter() - t0
        nodes += s.nodes
    return total, nodes, out


if __name__ == "__main__":
    if sys.argv[1] == "replay":
        print(replay(sys.argv[2], float(sys.argv[3]) if len(sys.argv) > 3 else None))
    else:
        capture(
            sys.argv[1],
            int(sys.argv[2]),
            int(sys.argv[3]),
            sys.argv[4],
            float(sys.argv[5]) if len(sys.argv) > 5 else 3.0,
        )
