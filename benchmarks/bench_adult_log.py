"""Smith et al. 2022 Table 1-style analysis of analyst query logs on the Adult data.

Usage::

    python benchmarks/bench_adult_log.py               # quick: 10 noise repetitions
    python benchmarks/bench_adult_log.py --mode full   # 50 noise repetitions

For several generated analyst logs (:func:`workloads.adult_query_log`, different seeds and sizes)
and their concatenation ("combined", as in Smith et al. 2022 Table 1) it reports:

* t (queries), γ (exact maximum overlap, each query weight 1), ω and χ̃ (dpmagic's engine), the networkx
  DSatur bound and Smith et al. 2022's Algorithm 1 overlap variant (10 s limit) for comparison, and the utility
  gain 1 − γ/t (Smith et al. 2022 §3.3, Eq. 6);
* the average L1 error of the COUNT queries of the log answered with OpenDP's discrete Gaussian at the same
  total budget μ = 1 (GDP): sequential composition gives every query μ' = 1/√t, overlap accounting
  μ' = 1/√γ (the loss of every row is √(load · μ'²) ≤ 1).  A COUNT (or GROUP BY COUNT: disjoint cells,
  sensitivity 1) is released with σ = 1/μ' per cell; the error is |noisy − exact| averaged over cells,
  queries and repetitions, on the real Adult rows (exact answers by dpmagic's pandas backend).  Queries that
  release more than one value (AVG = SUM + COUNT) split their μ' among their releases; they are charged but
  not measured.

Writes ``benchmarks/results/bench_adult_log_<mode>.json`` / ``.md`` and the combined log as
``benchmarks/results/adult_log.sql`` (for ``dpmagic overlap``).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from baselines import algorithm1_overlap, dsatur_bound  # noqa: E402
from common import RESULTS, machine_info, md_table, write_results  # noqa: E402
from workloads import adult_query_log  # noqa: E402

import dpmagic  # noqa: E402
from dpmagic.backends.pandas import PandasBackend  # noqa: E402
from dpmagic.noise.calibration import noise_for, release_integer  # noqa: E402
from dpmagic.overlap import OverlapEngine  # noqa: E402
from dpmagic.query.sql import parse_query  # noqa: E402

#: (log name, number of queries, seed) — sizes in the range of Smith et al. 2022 Table 1 (t = 2 … 284)
LOGS: list[tuple[str, int, int]] = [
    ("A", 12, 1),
    ("B", 40, 2),
    ("C", 60, 3),
    ("D", 120, 4),
    ("E", 200, 5),
    ("F", 300, 6),
]


def analyse(name: str, sqls: list[str], schema: Any, backend: PandasBackend, reps: int) -> dict[str, Any]:
    queries = [parse_query(s, schema) for s in sqls]
    boxes = [q.coverage for q in queries]
    t = len(queries)
    t0 = time.perf_counter()
    eng = OverlapEngine(schema, time_limit=10.0)
    eng.extend(boxes, np.ones(t))
    bd = eng.bounds()
    secs = time.perf_counter() - t0
    gamma = bd.overlap.upper
    ds = dsatur_bound(boxes, time_limit=60.0)
    a1 = algorithm1_overlap(boxes, time_limit=10.0)
    # error at the same total budget μ = 1 (GDP)
    counts = [q for q in queries if all(a.func == "count" for a in q.aggregates) and len(q.aggregates) == 1]
    exact = [backend.evaluate(q).counts for q in counts]
    cells = int(sum(len(e) for e in exact))
    errs: dict[str, float] = {}
    sigmas: dict[str, float] = {}
    for mode, units in (("sequential", float(t)), ("overlap", float(gamma))):
        mu_q = 1.0 / math.sqrt(units)
        noise = noise_for("gdp", mu_q, 1.0, integer=True)
        sigmas[mode] = noise.scale
        flat = np.concatenate(exact) if exact else np.zeros(0, dtype=np.int64)
        total = 0.0
        for _ in range(reps):
            noisy = release_integer(flat, noise)
            total += float(np.abs(noisy - flat).sum())
        errs[mode] = total / max(1, reps * len(flat))
    return {
        "log": name,
        "t": t,
        "distinct": len(set(sqls)),
        "gamma": gamma,
        "gamma_exact": bd.overlap.exact,
        "gamma_method": bd.overlap.method,
        "clique": bd.clique,
        "clique_exact": bd.clique_exact,
        "chromatic": bd.chromatic,
        "dpmagic_seconds": secs,
        "dsatur_nx": ds.value,
        "dsatur_nx_seconds": ds.seconds,
        "alg1_overlap": a1.value,
        "alg1_overlap_timed_out": a1.timed_out,
        "alg1_overlap_seconds": a1.seconds,
        "utility_gain": 1.0 - gamma / t,
        "count_queries": len(counts),
        "count_cells": cells,
        "sigma_sequential": sigmas["sequential"],
        "sigma_overlap": sigmas["overlap"],
        "l1_sequential": errs["sequential"],
        "l1_overlap": errs["overlap"],
        "l1_reduction": 1.0 - errs["overlap"] / errs["sequential"] if errs["sequential"] else None,
        "expected_reduction": 1.0 - math.sqrt(gamma / t),
        "reps": reps,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Smith et al. 2022 Table 1-style analysis of Adult analyst logs")
    ap.add_argument("--mode", choices=["quick", "full"], default="quick")
    args = ap.parse_args(argv)
    reps = 10 if args.mode == "quick" else 50
    df, schema = dpmagic.load_adult()
    backend = PandasBackend(schema.validate(df), schema)
    logs = {name: adult_query_log(n, seed) for name, n, seed in LOGS}
    combined = [s for v in logs.values() for s in v]
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "adult_log.sql").write_text("".join(s + ";\n" for s in combined), encoding="utf-8")
    rows = []
    t_all = time.perf_counter()
    for name, sqls in [*logs.items(), ("combined", combined)]:
        r = analyse(name, sqls, schema, backend, reps)
        rows.append(r)
        print(
            f"{name}: t={r['t']} γ={r['gamma']} ω={r['clique']} χ={r['chromatic']} gain={100 * r['utility_gain']:.1f}% "
            f"L1 seq {r['l1_sequential']:.2f} overlap {r['l1_overlap']:.2f} ({r['dpmagic_seconds']:.3f}s; "
            f"Alg1 {r['alg1_overlap']}{' TIMEOUT' if r['alg1_overlap_timed_out'] else ''} {r['alg1_overlap_seconds']:.2f}s)",
            flush=True,
        )
    info = machine_info()
    headers = [
        "log",
        "t",
        "γ",
        "ω",
        "χ̃ (dpmagic)",
        "χ̃ (nx DSatur)",
        "utility gain",
        "COUNT queries (cells)",
        "σ seq → overlap",
        "avg L1 sequential",
        "avg L1 overlap",
        "L1 reduction (expected)",
        "dpmagic s",
        "Alg. 1 overlap s",
    ]
    table = [
        [
            r["log"],
            r["t"],
            f"{r['gamma']:g}{'' if r['gamma_exact'] else ' (ub)'}",
            f"{r['clique']:g}{'' if r['clique_exact'] else ' (ub)'}",
            r["chromatic"],
            r["dsatur_nx"],
            f"{100 * r['utility_gain']:.1f}%",
            f"{r['count_queries']} ({r['count_cells']})",
            f"{r['sigma_sequential']:.2f} → {r['sigma_overlap']:.2f}",
            r["l1_sequential"],
            r["l1_overlap"],
            f"{100 * r['l1_reduction']:.1f}% ({100 * r['expected_reduction']:.1f}%)",
            r["dpmagic_seconds"],
            f"{r['alg1_overlap_seconds']:.2f}{' (timeout)' if r['alg1_overlap_timed_out'] else ''}",
        ]
        for r in rows
    ]
    md = "\n".join(
        [
            f"## Adult analyst logs: Smith et al. 2022 Table 1-style analysis ({args.mode} mode)",
            "",
            f"Machine: {info['nproc']} CPUs ({info['cpu']}), Python {info['python']}; {info['date']}. "
            f"Total budget μ = 1 (GDP); discrete Gaussian (OpenDP); {reps} noise repetitions per log.",
            "",
            md_table(headers, table),
            "",
            "Each query counts 1 (Smith et al. 2022 Table 1). Errors are measured on the log's COUNT queries (GROUP BY "
            "counts contribute one error per declared cell). Expected reduction = 1 − √(γ/t).",
        ]
    )
    data = {"mode": args.mode, "machine": info, "logs": rows, "seconds": time.perf_counter() - t_all}
    jp, mp = write_results(f"bench_adult_log_{args.mode}", data, md)
    print(f"wrote {jp} and {mp}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
