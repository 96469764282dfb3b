"""The scoped branch and bound's cost per node (issue 28, session 13): replay captured searches with two versions of
:mod:`dpmagic.overlap.scoped` and check that they search identically.

    python benchmarks/bench_scoped_nodes.py capture OUT.pkl [N] [KEEP]
    python benchmarks/bench_scoped_nodes.py replay OUT.pkl OLD_SCOPED.py [--md results/bench_scoped_nodes.md]

``capture`` runs the held-out dense session (:func:`workloads.dense_analyst_log` ``(N, seed=5, variant="heldout")``
on Adult, through :meth:`Session.query`, the engine as :mod:`bench_session` sets it up, after the same untimed
warm-up) and keeps the ``KEEP`` (default 200) slowest *fresh* calls of :func:`~dpmagic.overlap.scoped.scoped_search`
(resumed ones are skipped: their state is not replayable) with their arguments (problem, incumbent, target, terms,
rounding) and deadline budget.

``replay`` runs each captured search to completion (a deadline of 10 minutes: no timeouts) with the module at
``OLD_SCOPED.py`` (e.g. ``git show main:dpmagic/overlap/scoped.py > /tmp/scoped_main.py``) and with the installed
:mod:`dpmagic.overlap.scoped`, alternating which goes first, asserts identical ``(atoms, upper, exact)``, node
counts and split calls / cuts, and reports per instance the nodes and CPU seconds (``time.process_time``) of
both, and the totals.
"""

from __future__ import annotations

import heapq
import importlib.util
import math
import os
import pickle
import platform
import sys
import time
from types import ModuleType
from typing import Any

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_HERE, os.path.dirname(_HERE)]  # the benchmarks and this checkout's dpmagic

REPLAY_DEADLINE_S = 600.0


def capture(out: str, n: int = 1000, keep: int = 200) -> None:
    import bench_session as bs
    from workloads import dense_analyst_log

    import dpmagic.overlap.portfolio as pf

    heap: list[tuple[float, int, bytes]] = []  # the ``keep`` slowest, pickled at once (the arguments are frozen)
    orig = pf.scoped_search
    count = [0, 0]

    def wrapped(prob: Any, deadline: float, rnd: Any, incumbent: float, target: float = math.inf, terms: Any = None,
                state: Any = None) -> Any:  # fmt: skip
        resumed = state is not None and "search" in state
        t0 = time.perf_counter()
        c0 = time.process_time()
        r = orig(prob, deadline, rnd, incumbent, target, terms, state)
        cpu = time.process_time() - c0
        count[0] += 1
        if resumed:
            return r
        count[1] += 1
        rec = dict(prob=prob, budget=deadline - t0, rnd=rnd, incumbent=incumbent, target=target, terms=terms,
                   cpu=cpu, upper=r[1], exact=r[2], tag=r[3])  # fmt: skip
        item = (cpu, count[0], pickle.dumps(rec))
        if len(heap) < keep:
            heapq.heappush(heap, item)
        elif cpu > heap[0][0]:
            heapq.heapreplace(heap, item)
        return r

    pf.scoped_search = wrapped
    df, schema = bs._adult()
    warm = bs._session(df, schema)
    for sql, eps in dense_analyst_log(5, seed=999, schema=schema, variant="heldout"):
        warm.query(sql, epsilon=eps, fresh=True)
    count[:] = [0, 0]
    heap.clear()
    s = bs._session(df, schema)
    bs._dense_engine(s.accountant.engine)
    for sql, eps in dense_analyst_log(n, seed=5, schema=schema, variant="heldout"):
        s.query(sql, epsilon=eps, fresh=True)
    recs = [pickle.loads(b) for _, _, b in sorted(heap, reverse=True)]
    with open(out, "wb") as f:
        pickle.dump(recs, f)
    print(f"{count[0]} scoped searches ({count[1]} fresh); kept the {len(recs)} slowest fresh ones, "
          f"{sum(r['cpu'] for r in recs):.2f} CPU s, {sum(not r['exact'] for r in recs)} timed out")  # fmt: skip


def _load(path: str, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # (dataclasses look their module up)
    spec.loader.exec_module(mod)
    return mod


def _run(mod: ModuleType, r: dict[str, Any]) -> tuple[tuple[Any, ...], int, float]:
    """One search to completion as :func:`scoped_search` runs it: (result, nodes, CPU seconds)."""
    c0 = time.process_time()
    s = mod._Search(r["prob"], time.perf_counter() + REPLAY_DEADLINE_S, r["incumbent"], r["target"], r["rnd"].slack,
                    r["terms"])  # fmt: skip
    if s.k == 0:
        total = float(s.w.sum())
        if total > s.best:
            s.best, s.best_x = total, []
    else:
        s.run()
    cpu = time.process_time() - c0
    upper = r["rnd"].up(s.best)
    atoms = {} if s.best_x is None else {r["prob"].columns[i].name: int(s.best_x[p]) for p, i in enumerate(s.order)}
    return (atoms, upper, s.done, s.stopped, s.split_calls, s.split_cuts), s.nodes, cpu


def replay(path: str, old_path: str, md: str | None = None) -> None:
    import dpmagic.overlap.scoped as new

    old = _load(old_path, "scoped_old")
    with open(path, "rb") as f:
        recs = pickle.load(f)
    rows = []
    tot_old = tot_new = 0.0
    nodes_tot = 0
    for i, r in enumerate(recs):
        if i % 2 == 0:
            ro, no, co = _run(old, r)
            rn, nn, cn = _run(new, r)
        else:
            rn, nn, cn = _run(new, r)
            ro, no, co = _run(old, r)
        assert ro == rn, (i, ro, rn)
        assert no == nn, (i, no, nn)
        rows.append((i, r["prob"].n, len(r["prob"].columns), no, co, cn, ro[4]))
        tot_old += co
        tot_new += cn
        nodes_tot += no
    load = os.getloadavg()
    lines = [
        "# Scoped branch and bound: CPU per node (issue 28, session 13)",
        "",
        f"Machine: {os.cpu_count()} cores (shared), {platform.processor() or platform.machine()},"
        f" Python {platform.python_version()}, numpy {__import__('numpy').__version__}; load average after "
        f"{load[0]:.2f}, {load[1]:.2f}, {load[2]:.2f}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        "",
        f"{len(recs)} captured searches (the slowest fresh `scoped_search` calls of the held-out dense session, "
        "1,000 queries, seed 5), each replayed to completion with the old module and the new one (alternating "
        "which runs first); identical atoms, upper bound, exactness, node count and split calls / cuts asserted "
        "for every one.  CPU = `time.process_time`.",
        "",
        f"**Total: {nodes_tot:,} nodes; CPU old {tot_old:.2f} s, new {tot_new:.2f} s "
        f"({tot_old / tot_new:.2f}× less); per node {1e6 * tot_old / max(nodes_tot, 1):.1f} → "
        f"{1e6 * tot_new / max(nodes_tot, 1):.1f} µs.**",
        "",
        "| # | queries | columns | nodes | split calls | old CPU ms | new CPU ms | old/new |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for i, nq, m, nodes, co, cn, sc in rows:
        lines.append(
            f"| {i} | {nq} | {m} | {nodes} | {sc} | {1e3 * co:.1f} | {1e3 * cn:.1f} | {co / max(cn, 1e-9):.2f} |"
        )
    text = "\n".join(lines) + "\n"
    print("\n".join(lines[:8]))
    if md:
        with open(md, "w") as f:
            f.write(text)


if __name__ == "__main__":
    if sys.argv[1] == "capture":
        capture(sys.argv[2], *(int(a) for a in sys.argv[3:5]))
    elif sys.argv[1] == "replay":
        replay(sys.argv[2], sys.argv[3], sys.argv[5] if len(sys.argv) > 5 and sys.argv[4] == "--md" else None)
    else:
        raise SystemExit(__doc__)
