"""The accountant's speed on real analyst sessions (issue 11): every cell through ``Session.query``.

Sections (each runs in its own subprocess, so that its peak RSS is its own):

* ``sequential`` — a fresh session on Adult (pure ε, exact bound), ``n`` statements of
  :func:`workloads.mixed_analyst_log` answered one after another through :meth:`Session.query`; per-query
  latency by window of registered queries, whether the charged bound stayed exact (or upper/lower ≤ 1.02);
* ``prefilled`` — a session with ``N`` queries already registered (the engine bulk-loaded with the boxes of
  ``N`` statements of the same generator: a benchmark shortcut that skips N data reads), then ``k`` more
  answered through :meth:`Session.query`; per-admission latency and the peak RSS of the process;
* ``rows3m`` — Adult replicated to 3,000,000 rows; per-query latency and, for the same queries, the time of
  the exact data scan alone (``backend.evaluate``), to show which of the two dominates;
* ``cli`` — ``dpmagic overlap --json`` on 2,000 census statements, end to end (a subprocess), and
  ``python -c "import dpmagic"``;
* ``uniform`` — exact γ from scratch on uniform category sets (10 columns t = 2,000; 12 columns t = 1,000 and
  2,000; 15 columns t = 1,000);
* ``dense`` — issue 28: :func:`workloads.dense_analyst_log` (one analyst slicing 7 categorical and 4 numeric
  Adult columns) answered one after another through :meth:`Session.query`, one fresh session per tuned
  variant (:data:`DENSE_RUNS`); per query the latency and whether the charged bound is exact, and the
  *frontier*: the first query that is not answered exactly within 50 ms;
* ``heldout`` — the same for the held-out variant (parameters fixed before any tuning; measured at the end);
* ``heldout2`` — the same for a second held-out family written after the first was tuned on:
  :func:`workloads.dense_drilldown_log` (drill-down sessions, non-round cut points, wide IN / NOT IN,
  two-column GROUP BY; two Adult variants and one on the PUMS sample; :data:`HELDOUT2_RUNS`, all parameters
  fixed before the first measurement);
* ``dense_prefilled`` — ``prefilled`` on the dense generator (10,000 registered, ``k`` more answered).

    python benchmarks/bench_session.py --mode quick      # minutes; results/bench_session_quick.{md,json}
    python benchmarks/bench_session.py --mode full       # the issue's sizes; results/bench_session_full.*
    python benchmarks/bench_session.py --mode full --sections sequential --max-seconds 300 --name baseline

``--max-seconds`` caps each section's wall time (the remaining queries are skipped and the cap is reported):
it lets a slow baseline be measured at all.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import machine_info, md_table, percentile, write_results  # noqa: E402
from workloads import (  # noqa: E402
    DRILLDOWN_VARIANTS,
    census_schema,
    census_workload,
    dense_analyst_log,
    dense_drilldown_log,
    mixed_analyst_log,
    pums_data,
    uniform_schema,
    uniform_workload,
)

pc = time.perf_counter
SECTIONS = ("sequential", "prefilled", "rows3m", "cli", "uniform", "dense", "heldout", "heldout2", "dense_prefilled")
#: (variant, seed) of the dense sessions; the held-out one is its own section
DENSE_RUNS = (("dense", 1), ("dense", 2), ("dense-complements", 3), ("dense-narrow", 4))
HELDOUT_RUNS = (("heldout", 5),)
#: (variant, seed) of the second held-out family (:func:`workloads.dense_drilldown_log`), fixed before measuring
HELDOUT2_RUNS = (("drilldown", 11), ("drilldown-wide", 12), ("drilldown-pums", 13))
#: an admission is "on the frontier" while it is answered exactly within this many seconds
FRONTIER_SECONDS = 0.05
SIZES = {
    "quick": {
        "sequential": 300,
        "prefilled": 2000,
        "prefilled_k": 20,
        "rows3m": 30,
        "census": 2000,
        "unif": [(10, 1000)],
        "dense": 300,
    },
    "full": {
        "sequential": 1000,
        "prefilled": 10000,
        "prefilled_k": 100,
        "rows3m": 200,
        "census": 2000,
        "unif": [(10, 2000), (12, 1000), (12, 2000), (15, 1000)],
        "dense": 1000,
    },
}
WINDOWS = ((1, 50), (51, 100), (101, 250), (251, 500), (501, 1000), (1001, 10**9))


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _stats(xs: list[float]) -> dict[str, float]:
    if not xs:
        return {}
    return {
        "n": len(xs),
        "p50_ms": 1e3 * percentile(xs, 50),
        "p95_ms": 1e3 * percentile(xs, 95),
        "p99_ms": 1e3 * percentile(xs, 99),
        "max_ms": 1e3 * max(xs),
    }


def _exactness(result: Any) -> float:
    """upper / lower of the charged maximum overlap after this query (1.0 = exact)."""
    ov = result.charge.bounds.overlap
    if ov.exact:
        return 1.0
    return math.inf if ov.lower <= 0 else ov.upper / ov.lower


def _triple(st: dict[str, float] | None) -> str:
    """``p50 / p99 / max`` of a latency summary (ms), or a dash when it was not recorded."""
    if not st:
        return "—"
    return f"{st['p50_ms']:.1f} / {st['p99_ms']:.1f} / {st['max_ms']:.0f}"


def _adult(rows: int | None = None) -> tuple[Any, Any]:
    import pandas as pd

    import dpmagic

    df, schema = dpmagic.load_adult()
    if rows is not None and rows > len(df):
        reps = -(-rows // len(df))
        df = pd.concat([df] * reps, ignore_index=True).iloc[:rows].reset_index(drop=True)
    return df, schema


def _session(df: Any, schema: Any) -> Any:
    from dpmagic import Session

    return Session(df, schema, "epsilon=100000", default_cost=1.0)


def run_sequential(n: int, max_s: float) -> dict[str, Any]:
    df, schema = _adult()
    s = _session(df, schema)
    sqls = mixed_analyst_log(n, seed=11, schema=schema)
    lat: list[float] = []
    cpu: list[float] = []
    ratios: list[float] = []
    t_end = pc() + max_s
    for sql in sqls:
        t0, c0 = pc(), time.process_time()
        r = s.query(sql, epsilon=1.0, fresh=True)
        lat.append(pc() - t0)
        cpu.append(time.process_time() - c0)
        ratios.append(_exactness(r))
        if pc() > t_end:
            break
    windows = {}
    for lo, hi in WINDOWS:
        part = lat[lo - 1 : hi]
        if part:
            windows[f"{lo}-{min(hi, len(lat))}"] = _stats(part)
    return {
        "asked": n,
        "answered": len(lat),
        "capped": len(lat) < n,
        "all": _stats(lat),
        "cpu": _stats(cpu),
        "windows": windows,
        "loadavg_after": list(os.getloadavg()),
        "worst_upper_over_lower": max(ratios) if ratios else None,
        "exact_share": sum(1 for x in ratios if x == 1.0) / max(1, len(ratios)),
        "total_s": sum(lat),
        "peak_rss_mb": _rss_mb(),
    }


def _dense_engine(eng: Any) -> str:
    """``DPMAGIC_BENCH_DENSE_PLAN=1``: the engine's opt-in dense configuration (HiGHS after a graph probe on dense
    instances, quick / hard region limits 0.05 / 0.6 s), as measured in ``bench_session_issue28.md``."""
    if os.environ.get("DPMAGIC_BENCH_DENSE_PLAN") != "1":
        return "defaults"
    from dpmagic.overlap import PortfolioConfig

    eng.solver = PortfolioConfig(milp_dense_vars=1500)
    eng.quick_time_limit, eng.hard_time_limit = 0.05, 0.6
    return "dense plan (milp_dense_vars=1500, quick 0.05 s, hard 0.6 s)"


def _drilldown_data(variant: str) -> tuple[Any, Any]:
    """The rows and declared schema of a drill-down variant (Adult or the PUMS sample)."""
    return pums_data() if DRILLDOWN_VARIANTS[variant]["table"] == "pums" else _adult()


def run_dense(
    n: int,
    runs: tuple[tuple[str, int], ...],
    max_s: float,
    log: Any = dense_analyst_log,
    data: Any = None,
) -> dict[str, Any]:
    """Dense analyst sessions (issue 28), one fresh session per (variant, seed); ``max_s`` caps each.

    ``log(n, seed=, schema=, variant=)`` generates the (statement, ε) pairs; ``data(variant)`` gives the rows
    and schema of a variant (default: Adult for all).  Each dataset gets one untimed warm-up session first."""
    data = data or (lambda _variant: _adult())
    warmed: set[tuple[int, tuple[str, ...]]] = set()
    out: dict[str, Any] = {}
    for variant, seed in runs:
        df, schema = data(variant)
        if (len(df), tuple(df.columns)) not in warmed:
            warmed.add((len(df), tuple(df.columns)))
            warm = _session(df, schema)
            for sql, eps in log(5, seed=999, schema=schema, variant=variant):
                warm.query(sql, epsilon=eps, fresh=True)  # imports and first-call costs, outside the timed runs
            del warm
            _worker_settled()
        s = _session(df, schema)
        eng = s.accountant.engine
        config = _dense_engine(eng)
        spent = [0.0]

        def timed(f: Any, spent: list[float] = spent) -> Any:
            def g(*a: Any, **k: Any) -> Any:
                t = pc()
                try:
                    return f(*a, **k)
                finally:
                    spent[0] += pc() - t

            return g

        eng.admit, eng.commit = timed(eng.admit), timed(eng.commit)  # the accountant's share of each query
        lat: list[float] = []
        acc: list[float] = []
        cpu: list[float] = []
        ratios: list[float] = []
        t_end = pc() + max_s
        for sql, eps in log(n, seed=seed, schema=schema, variant=variant):
            spent[0] = 0.0
            t0, c0 = pc(), time.process_time()
            r = s.query(sql, epsilon=eps, fresh=True)
            lat.append(pc() - t0)
            cpu.append(time.process_time() - c0)
            acc.append(spent[0])
            ratios.append(_exactness(r))
            if pc() > t_end:
                break
        bad = [i for i, (x, q) in enumerate(zip(lat, ratios)) if x > FRONTIER_SECONDS or q != 1.0]
        bad_set = set(bad)
        sustained = next((i for i in bad if sum(1 for j in range(i, i + 50) if j in bad_set) > 5), len(lat))
        eng_bad = [i for i, (x, q) in enumerate(zip(acc, ratios)) if x > FRONTIER_SECONDS or q != 1.0]
        windows = {}
        for lo, hi in WINDOWS:
            part = lat[lo - 1 : hi]
            if part:
                windows[f"{lo}-{min(hi, len(lat))}"] = _stats(part)
        out[f"{variant}/seed{seed}"] = {
            "asked": n,
            "answered": len(lat),
            "capped": len(lat) < n,
            "engine_config": config,
            "frontier": bad[0] if bad else len(lat),
            "frontier_engine": eng_bad[0] if eng_bad else len(lat),
            "frontier_sustained": sustained,
            "engine": _stats(acc),
            "cpu": _stats(cpu),
            "first_inexact": next((i for i, q in enumerate(ratios) if q != 1.0), None),
            "first_over_50ms": next((i for i, x in enumerate(lat) if x > FRONTIER_SECONDS), None),
            "over_50ms": sum(1 for x in lat if x > 0.05),
            "over_100ms": sum(1 for x in lat if x > 0.1),
            "over_1s": sum(1 for x in lat if x > 1.0),
            "all": _stats(lat),
            "windows": windows,
            "worst_upper_over_lower": max(ratios) if ratios else None,
            "exact_share": sum(1 for x in ratios if x == 1.0) / max(1, len(ratios)),
            "loadavg_after": list(os.getloadavg()),
        }
        # drop this session before the next variant (session 17: the timing wrappers' reference cycle kept each one
        # alive, and its pump went on sending the shared worker its pending terms while the next variant ran)
        vars(eng).pop("admit", None)
        vars(eng).pop("commit", None)
        del s, eng
        r = None
        _worker_settled()
    out["peak_rss_mb"] = _rss_mb()
    return out


def _worker_settled() -> None:
    """Collect the dropped sessions, then wait (untimed, at most 30 s; not for a broken worker) for the shared
    background worker's task in flight, so that the next session gets the worker to itself."""
    import gc

    from dpmagic.overlap.background import default_solver

    gc.collect()
    bg = default_solver()
    t_end = pc() + 30.0
    while bg is not None and not bg.broken and not bg.idle() and pc() < t_end:
        time.sleep(0.05)


def run_dense_prefilled(n: int, k: int, max_s: float) -> dict[str, Any]:
    """``k`` dense statements answered with ``n`` dense statements already registered (bulk-loaded)."""
    from dpmagic.query.sql import parse_query

    df, schema = _adult()
    s = _session(df, schema)
    log = dense_analyst_log(n + k, seed=21, schema=schema, variant="dense")
    boxes = [parse_query(q, schema).coverage for q, _ in log[:n]]
    t0 = pc()
    eng = s.accountant.engine
    config = _dense_engine(eng)
    eng.extend(boxes, [e for _, e in log[:n]])  # benchmark shortcut, as ``prefilled``
    s.accountant._entry_ids.extend([-1] * n)
    eng.bounds()
    prefill_s = pc() - t0
    rss_after_prefill = _rss_mb()
    lat: list[float] = []
    ratios: list[float] = []
    t_end = pc() + max_s
    for sql, eps in log[n:]:
        t1 = pc()
        r = s.query(sql, epsilon=eps, fresh=True)
        lat.append(pc() - t1)
        ratios.append(_exactness(r))
        if pc() > t_end:
            break
    return {
        "registered": n,
        "asked": k,
        "answered": len(lat),
        "capped": len(lat) < k,
        "prefill_s": prefill_s,
        "admission": _stats(lat),
        "worst_upper_over_lower": max(ratios) if ratios else None,
        "rss_after_prefill_mb": rss_after_prefill,
        "loadavg_after": list(os.getloadavg()),
        "peak_rss_mb": _rss_mb(),
        "engine_config": config,
    }


def run_prefilled(n: int, k: int, max_s: float) -> dict[str, Any]:
    from dpmagic.query.sql import parse_query

    df, schema = _adult()
    s = _session(df, schema)
    sqls = mixed_analyst_log(n + k, seed=12, schema=schema)
    boxes = [parse_query(q, schema).coverage for q in sqls[:n]]
    t0 = pc()
    eng = s.accountant.engine
    eng.extend(boxes, [1.0] * n)  # benchmark shortcut: n registered queries without n data reads
    s.accountant._entry_ids.extend([-1] * n)  # ... and without ledger entries (placeholder ids)
    eng.bounds()
    prefill_s = pc() - t0
    rss_after_prefill = _rss_mb()
    lat: list[float] = []
    ratios: list[float] = []
    t_end = pc() + max_s
    for sql in sqls[n:]:
        t1 = pc()
        r = s.query(sql, epsilon=1.0, fresh=True)
        lat.append(pc() - t1)
        ratios.append(_exactness(r))
        if pc() > t_end:
            break
    return {
        "registered": n,
        "asked": k,
        "answered": len(lat),
        "capped": len(lat) < k,
        "prefill_s": prefill_s,
        "admission": _stats(lat),
        "worst_upper_over_lower": max(ratios) if ratios else None,
        "rss_after_prefill_mb": rss_after_prefill,
        "loadavg_after": list(os.getloadavg()),
        "peak_rss_mb": _rss_mb(),
    }


def run_rows3m(k: int, max_s: float) -> dict[str, Any]:
    t0 = pc()
    df, schema = _adult(3_000_000)
    load_s = pc() - t0
    t0 = pc()
    s = _session(df, schema)
    bind_s = pc() - t0
    sqls = mixed_analyst_log(k, seed=13, schema=schema)
    lat: list[float] = []
    scan: list[float] = []
    t_end = pc() + max_s
    for sql in sqls:
        t1 = pc()
        s.query(sql, epsilon=1.0, fresh=True)
        lat.append(pc() - t1)
        q = s.parse(sql)
        t2 = pc()
        s.backend.evaluate(q)  # the exact scan alone (benchmark only; nothing is released)
        scan.append(pc() - t2)
        if pc() > t_end:
            break
    return {
        "rows": len(df),
        "answered": len(lat),
        "capped": len(lat) < k,
        "load_s": load_s,
        "bind_s": bind_s,
        "query": _stats(lat),
        "scan_only": _stats(scan),
        "scan_share_p50": (percentile(scan, 50) / percentile(lat, 50)) if lat else None,
        "accounting_and_rest": _stats([max(0.0, a - b) for a, b in zip(lat, scan)]),
        "loadavg_after": list(os.getloadavg()),
        "peak_rss_mb": _rss_mb(),
    }


def _timed_runs(cmd: list[str], env: dict[str, str], k: int) -> tuple[list[float], list[float], str]:
    """Wall and CPU seconds (user + system of the child) of ``k`` runs of ``cmd``; the last stdout."""
    wall, cpu, out = [], [], ""
    for _ in range(k):
        t0 = pc()
        ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
        wall.append(pc() - t0)
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append((ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime))
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr)
        out = proc.stdout
    return wall, cpu, out


def _summary(xs: list[float]) -> dict[str, float]:
    return {"min": min(xs), "median": sorted(xs)[len(xs) // 2]}


def run_cli(t: int) -> dict[str, Any]:
    """The CLI end to end, twice: without bytecode caches (``PYTHONDONTWRITEBYTECODE=1``, every module compiled
    from source at each start: how the earlier runs of this benchmark measured it) and with them (as an
    installed package runs: ``.pyc`` files written by a warm-up run to a temporary ``PYTHONPYCACHEPREFIX``)."""
    schema = census_schema()
    boxes = census_workload(t, 7, schema)
    from workloads import write_sql

    with tempfile.TemporaryDirectory() as tmp:
        sp = Path(tmp) / "census.schema.json"
        sp.write_text(json.dumps(schema.to_dict()))
        qp = write_sql(boxes, Path(tmp) / "census.sql", table="census")
        cli = [sys.executable, "-m", "dpmagic.presentation.cli", "overlap", "--schema", str(sp), str(qp), "--json"]
        cold = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
        warm = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        warm["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
        runs, cpu_runs, stdout = _timed_runs(cli, cold, 3)
        _timed_runs(cli, warm, 1)  # writes the bytecode caches
        wruns, wcpu, _ = _timed_runs(cli, warm, 3)
        out = json.loads(stdout)
        imp = [sys.executable, "-c", "import dpmagic"]
        imports, _, _ = _timed_runs(imp, cold, 5)
        wimports, _, _ = _timed_runs(imp, warm, 5)
        python_only, _, _ = _timed_runs([sys.executable, "-c", "pass"], cold, 5)
    return {
        "statements": t,
        "cli_s": _summary(runs),
        "cli_cpu_s": _summary(cpu_runs),
        "cli_pyc_s": _summary(wruns),
        "cli_pyc_cpu_s": _summary(wcpu),
        "cli_gamma": out.get("max_overlap"),
        "cli_reported_seconds": out.get("seconds"),
        "import_s": _summary(imports),
        "import_pyc_s": _summary(wimports),
        "python_startup_s": _summary(python_only),
        "loadavg_after": list(os.getloadavg()),
    }


def run_uniform(specs: list[tuple[int, int]], max_s: float) -> dict[str, Any]:
    from dpmagic.overlap import max_overlap

    rows = []
    for m, t in specs:
        for seed in (0, 1, 2):
            schema = uniform_schema(m, (2, 5), seed)
            boxes = uniform_workload(schema, t, seed)
            t0 = pc()
            r = max_overlap(boxes, schema=schema, time_limit=10.0)
            rows.append(
                {
                    "columns": m,
                    "t": t,
                    "seed": seed,
                    "lower": r.lower,
                    "upper": r.upper,
                    "exact": r.exact,
                    "method": r.method,
                    "seconds": pc() - t0,
                }
            )
    return {"instances": rows}


def _child(section: str, mode: str, max_s: float) -> dict[str, Any]:
    z = SIZES[mode]
    if section == "sequential":
        return run_sequential(z["sequential"], max_s)
    if section == "prefilled":
        return run_prefilled(z["prefilled"], z["prefilled_k"], max_s)
    if section == "rows3m":
        return run_rows3m(z["rows3m"], max_s)
    if section == "cli":
        return run_cli(z["census"])
    if section == "uniform":
        return run_uniform(z["unif"], max_s)
    if section == "dense":
        return run_dense(z["dense"], DENSE_RUNS, max_s)
    if section == "heldout":
        return run_dense(z["dense"], HELDOUT_RUNS, max_s)
    if section == "heldout2":
        return run_dense(z["dense"], HELDOUT2_RUNS, max_s, log=dense_drilldown_log, data=_drilldown_data)
    if section == "dense_prefilled":
        return run_dense_prefilled(z["prefilled"], z["prefilled_k"], max_s)
    raise ValueError(section)


def _figures(d: dict[str, Any]) -> dict[str, Any]:
    """The headline figures of one run (missing sections: None)."""

    def get(*path: str) -> Any:
        x: Any = d
        for k in path:
            if not isinstance(x, dict) or k not in x:
                return None
            x = x[k]
        return x

    return {
        "1,000 queries: p50 ms": get("sequential", "all", "p50_ms"),
        "1,000 queries: p99 ms": get("sequential", "all", "p99_ms"),
        "1,000 queries: 501-1000 p50 ms": get("sequential", "windows", "501-1000", "p50_ms"),
        "1,000 queries: CPU p50 ms": get("sequential", "cpu", "p50_ms"),
        "1,000 queries: CPU p99 ms": get("sequential", "cpu", "p99_ms"),
        "1,000 queries: worst upper/lower": get("sequential", "worst_upper_over_lower"),
        "1,000 queries: share exact": get("sequential", "exact_share"),
        "10,000 registered: p50 ms": get("prefilled", "admission", "p50_ms"),
        "10,000 registered: p99 ms": get("prefilled", "admission", "p99_ms"),
        "10,000 registered: worst upper/lower": get("prefilled", "worst_upper_over_lower"),
        "10,000 registered: peak RSS MB": get("prefilled", "peak_rss_mb"),
        "3M rows: p50 ms": get("rows3m", "query", "p50_ms"),
        "3M rows: scan p50 ms": get("rows3m", "scan_only", "p50_ms"),
        "3M rows: scan share of p50": get("rows3m", "scan_share_p50"),
        "CLI 2,000 census: s (no .pyc)": get("cli", "cli_s", "median"),
        "CLI 2,000 census: CPU s (no .pyc)": get("cli", "cli_cpu_s", "median"),
        "CLI 2,000 census: s (.pyc)": get("cli", "cli_pyc_s", "median"),
        "import dpmagic: s": get("cli", "import_s", "median"),
        "load average after the sequential section": get("sequential", "loadavg_after"),
        "date": get("machine", "date"),
    }


def _fmt(x: Any) -> str:
    if x is None:
        return "—"
    if isinstance(x, float):
        return f"{x:.4g}"
    if isinstance(x, list):
        return ", ".join(f"{v:.1f}" for v in x)
    return str(x)


def _markdown(mode: str, data: dict[str, Any]) -> str:
    md = [f"# Session benchmark ({mode})", "", f"Machine: {data['machine']}", ""]
    if "previous" in data:
        now, before = _figures(data), _figures(data["previous"])
        md += [
            "## Headline figures next to the previous run of this file",
            "",
            "Wall-clock figures depend on the machine's load (2 cores shared with other jobs; see the load "
            "averages): CPU time is the steadier column.",
            "",
            md_table(["figure", "previous run", "this run"], [[k, _fmt(before[k]), _fmt(now[k])] for k in now]),
            "",
        ]
    if "sequential" in data:
        d = data["sequential"]
        md += [
            f"## {d['answered']} mixed analyst statements through Session.query (Adult)"
            + (" — capped by --max-seconds" if d["capped"] else ""),
            "",
            md_table(
                ["registered before", "n", "p50 ms", "p95 ms", "p99 ms", "max ms"],
                [[w, s["n"], s["p50_ms"], s["p95_ms"], s["p99_ms"], s["max_ms"]] for w, s in d["windows"].items()]
                + [
                    [
                        "all",
                        d["all"]["n"],
                        d["all"]["p50_ms"],
                        d["all"]["p95_ms"],
                        d["all"]["p99_ms"],
                        d["all"]["max_ms"],
                    ]
                ],
            ),
            "",
            f"Charged bound exact after {100 * d['exact_share']:.1f}% of the queries; worst upper/lower "
            f"{d['worst_upper_over_lower']}; total {d['total_s']:.1f} s; peak RSS {d['peak_rss_mb']:.0f} MB.",
            "",
            f"CPU time per query (process): p50 {d['cpu']['p50_ms']:.1f} ms, p99 {d['cpu']['p99_ms']:.1f} ms; "
            f"load average after the section {d.get('loadavg_after')} (2 cores, shared).",
            "",
        ]
    if "prefilled" in data:
        d = data["prefilled"]
        a = d["admission"]
        md += [
            f"## {d['answered']} more queries with {d['registered']:,} registered"
            + (" — capped" if d["capped"] else ""),
            "",
            f"Prefill (bulk load + all bounds): {d['prefill_s']:.1f} s. Per query: p50 {a.get('p50_ms', 0):.1f} ms, "
            f"p99 {a.get('p99_ms', 0):.1f} ms, max {a.get('max_ms', 0):.1f} ms; worst upper/lower "
            f"{d['worst_upper_over_lower']}; RSS after prefill {d['rss_after_prefill_mb']:.0f} MB, peak "
            f"{d['peak_rss_mb']:.0f} MB; load average after {d.get('loadavg_after')}.",
            "",
            "What is exact here: ``lower`` is the exact load of a witness row; ``upper`` is the smallest proven bound "
            "(at 10,000 queries the colouring χ: the from-scratch γ search does not close the gap within its 10 s "
            "limit, and each admission's region search is capped at the engine's hard_time_limit).",
            "",
        ]
    if "rows3m" in data:
        d = data["rows3m"]
        md += [
            f"## {d['rows']:,} rows (Adult replicated), {d['answered']} queries",
            "",
            f"Load {d['load_s']:.1f} s, bind {d['bind_s']:.1f} s. Per query p50 {d['query']['p50_ms']:.0f} ms, "
            f"p99 {d['query']['p99_ms']:.0f} ms; the exact scan alone p50 {d['scan_only']['p50_ms']:.0f} ms "
            f"({100 * d['scan_share_p50']:.0f}% of the query's p50); everything else (accounting, parsing, noise, "
            f"result) p50 {d.get('accounting_and_rest', {}).get('p50_ms', float('nan')):.0f} ms; peak RSS "
            f"{d['peak_rss_mb']:.0f} MB; load average after {d.get('loadavg_after')}.",
            "",
        ]
    if "cli" in data:
        d = data["cli"]
        md += [
            "## CLI and import",
            "",
            f"`dpmagic overlap --json` on {d['statements']:,} census statements, end to end: "
            f"{d['cli_s']['median']:.2f} s without bytecode caches (min {d['cli_s']['min']:.2f} s, CPU "
            f"{d['cli_cpu_s']['median']:.2f} s; PYTHONDONTWRITEBYTECODE=1 as in this sandbox: every module is "
            f"compiled at each start, as the earlier runs measured it); with .pyc caches (an installed package) "
            f"{d.get('cli_pyc_s', {}).get('median', float('nan')):.2f} s (CPU "
            f"{d.get('cli_pyc_cpu_s', {}).get('median', float('nan')):.2f} s); the overlap analysis itself "
            f"{d['cli_reported_seconds']:.3f} s; γ = {d['cli_gamma']}. `python -c 'import dpmagic'`: "
            f"{d['import_s']['median']:.2f} s ({d.get('import_pyc_s', {}).get('median', float('nan')):.2f} s with "
            f".pyc; bare interpreter {d['python_startup_s']['median']:.2f} s); load average after "
            f"{d.get('loadavg_after')}.",
            "",
        ]
    for sec in ("dense", "heldout", "heldout2"):
        if sec not in data:
            continue
        runs = {k: v for k, v in data[sec].items() if isinstance(v, dict)}
        md += [
            f"## Dense analyst sessions through Session.query ({sec}; issue 28)",
            "",
            "Frontier: the first query (0-based) not answered exactly within 50 ms (end to end); engine: the same "
            "with the accountant's share of the time (the engine's admit + commit); sustained: the first such "
            "query followed by more than 5 others among the next 50.  Load average after each run (2 cores, "
            "shared).",
            "",
            md_table(
                [
                    "variant",
                    "answered",
                    "frontier",
                    "engine",
                    "sustained",
                    "first inexact",
                    "p50 ms",
                    "p99 ms",
                    "max ms",
                    "CPU p50 / p99 / max ms",
                    "engine p50 / p99 / max ms",
                    ">50 ms",
                    ">100 ms",
                    ">1 s",
                    "worst upper/lower",
                    "load avg",
                ],
                [
                    [
                        k,
                        v["answered"],
                        v["frontier"],
                        v.get("frontier_engine", "—"),
                        v.get("frontier_sustained", "—"),
                        _fmt(v["first_inexact"]),
                        v["all"]["p50_ms"],
                        v["all"]["p99_ms"],
                        v["all"]["max_ms"],
                        _triple(v.get("cpu")),
                        _triple(v.get("engine")),
                        v["over_50ms"],
                        v["over_100ms"],
                        v["over_1s"],
                        v["worst_upper_over_lower"],
                        _fmt(v["loadavg_after"]),
                    ]
                    for k, v in runs.items()
                ],
            ),
            "",
            f"Peak RSS {data[sec].get('peak_rss_mb', 0):.0f} MB.",
            "",
        ]
    if "dense_prefilled" in data:
        d = data["dense_prefilled"]
        a = d["admission"]
        md += [
            f"## Dense: {d['answered']} more queries with {d['registered']:,} registered"
            + (" — capped" if d["capped"] else ""),
            "",
            f"Prefill {d['prefill_s']:.1f} s. Per query: p50 {a.get('p50_ms', 0):.1f} ms, p99 "
            f"{a.get('p99_ms', 0):.1f} ms, max {a.get('max_ms', 0):.1f} ms; worst upper/lower "
            f"{d['worst_upper_over_lower']}; RSS after prefill {d['rss_after_prefill_mb']:.0f} MB, peak "
            f"{d['peak_rss_mb']:.0f} MB; load average after {d.get('loadavg_after')}.",
            "",
        ]
    if "uniform" in data:
        rows = data["uniform"]["instances"]
        md += [
            "## Uniform category sets, exact γ from scratch (10 s limit)",
            "",
            md_table(
                ["columns", "t", "seed", "lower", "upper", "exact", "method", "s"],
                [
                    [r["columns"], r["t"], r["seed"], r["lower"], r["upper"], r["exact"], r["method"], r["seconds"]]
                    for r in rows
                ],
            ),
            "",
        ]
    return "\n".join(md)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=("quick", "full"), default="quick")
    ap.add_argument("--sections", default=",".join(SECTIONS))
    ap.add_argument("--max-seconds", type=float, default=1800.0, help="wall-time cap per section")
    ap.add_argument("--name", default=None, help="results file stem (default bench_session_MODE)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(_child(args.child, args.mode, args.max_seconds)))
        return 0
    data: dict[str, Any] = {"mode": args.mode, "machine": machine_info()}
    for section in args.sections.split(","):
        t0 = pc()
        proc = subprocess.run(
            [sys.executable, __file__, "--mode", args.mode, "--max-seconds", str(args.max_seconds), "--child", section],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            print(proc.stderr, file=sys.stderr)
            raise SystemExit(f"section {section} failed")
        data[section] = json.loads(proc.stdout.strip().splitlines()[-1])
        print(f"{section}: done in {pc() - t0:.1f} s", file=sys.stderr)
    name = args.name or f"bench_session_{args.mode}"
    prev_path = Path(__file__).resolve().parent / "results" / f"{name}.json"
    if prev_path.exists():  # the run this one replaces: its figures are shown next to the new ones
        data["previous"] = json.loads(prev_path.read_text(encoding="utf-8"))
        data["previous"].pop("previous", None)
    md = _markdown(args.mode, data)
    write_results(name, data, md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
