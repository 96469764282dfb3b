"""People, not rows (issue 26): person-level vs row-level latency, a 200-query session's charge, truncation's bias.

The table is the claims table of :mod:`claims` (patients with a skewed number of claims, invariant demographics
``sex``, ``birth_year``, ``region``; varying ``day``, ``month``, ``diagnosis``, ``setting``, ``amount``), bound
twice: under the person-level schema (``privacy_unit`` = ``{"id": "patient_id", "max_rows": K, "invariant":
[...]}``) and under the same schema at row level (``"one row"``).

(a) **Latency.** Each (backend, rows, unit) runs in a fresh process: bind (for the person level this includes the
    one-time stable truncation and the check of the invariant columns, reported as the bind difference), then
    :data:`ROUNDS` rounds of the :data:`TEMPLATES` (charged, noised filtered GROUP BY, SUM, AVG and
    COUNT(DISTINCT patient_id) queries).  Target: person-level p50 ≤ 2× row-level on DuckDB at 10M rows.
(b) **Charge.** A session of :func:`claims.session_queries` (200 mixed queries, most predicates on the invariant
    columns) on the person-level table, every query at the same cost w: the charged bound (the session's
    accountant), sequential composition Σw, the row-level maximum overlap γ (:class:`dpmagic.overlap.OverlapEngine`
    on the full boxes), K′·γ and γ of the boxes projected on the invariant columns (docs/people.md §3).
    Target: charged ≤ half of sequential.
(c) **Bias and error.** From the *custodian's* side (the backends' exact ``evaluate``, never the analyst API, never
    shown to an analyst): each query's exact row count in its WHERE box before truncation (the row-level binding)
    and after (the person-level binding) — the bias truncation introduces — and, for every released COUNT cell,
    whether its interval holds the exact count of the truncated table: the noise is what the declared bounds say
    (the half-widths at person and row level are listed; the person-level ones are wider by the sensitivity).

    python benchmarks/bench_people.py                      # DuckDB 1M + 10M, Spark 1M, pandas 1M; session on 1M
    python benchmarks/bench_people.py --quick              # 20k rows, 30 queries, nothing written (seconds)
    python benchmarks/bench_people.py --latency duckdb:1000000 --session-rows 100000 --out bench_people_small
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from claims import INVARIANT, claims, claims_schema, session_queries, write_parquet  # noqa: E402
from common import RESULTS, machine_info, md_table, percentile, write_results  # noqa: E402

WORK = Path(os.environ.get("DPMAGIC_BENCH_DIR", "/tmp/dpmagic_bench"))
#: the person-level bound of every run (a patient keeps at most K claims)
K = 40
#: the five latency shapes; round r asks each with other constants (no query is answered from the re-run cache)
TEMPLATES = [
    "SELECT region, COUNT(*) AS n FROM claims WHERE birth_year BETWEEN {a} AND {b} GROUP BY region",
    "SELECT diagnosis, SUM(amount) AS s FROM claims WHERE sex = '{sex}' AND month BETWEEN {m} AND {m2} "
    "GROUP BY diagnosis",
    "SELECT setting, AVG(amount) AS a FROM claims WHERE region IN ({regions}) GROUP BY setting",
    "SELECT COUNT(DISTINCT patient_id) AS patients FROM claims WHERE diagnosis = '{diag}' AND birth_year < {young}",
    "SELECT month, COUNT(*) AS n FROM claims WHERE day > {d} GROUP BY month",
]
_REGIONS = ["'North', 'East'", "'South', 'West', 'Central'", "'North-East'", "'South-East', 'South-West'"]
_DIAG = ["circulatory", "respiratory", "injury", "mental"]
ROUNDS = 4
#: the cost of every query (pure ε-DP) and the session budget (large: the figures are charges, not refusals)
EPSILON = 0.05
BUDGET = 1000.0


def latency_queries(rounds: int = ROUNDS) -> list[str]:
    out = []
    for r in range(rounds):
        p = {
            "a": 1950 + r,
            "b": 1979 + r,
            "sex": "F" if r % 2 == 0 else "M",
            "m": 1 + r,
            "m2": 6 + r,
            "regions": _REGIONS[r % len(_REGIONS)],
            "diag": _DIAG[r % len(_DIAG)],
            "young": 1990 - r,
            "d": 30 + 10 * r,
        }
        out += [t.format(**p) for t in TEMPLATES]
    return out


def _spark() -> Any:
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.memory", "4g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _data(engine: str, n: int, out: dict[str, Any]) -> Any:
    """The claims table for ``engine`` (the load is not part of the bind time)."""
    if engine == "pandas":
        t0 = time.perf_counter()
        frame = claims(n)
        out["load_s"] = time.perf_counter() - t0
        return frame
    path = write_parquet(n, folder=WORK)
    if engine == "duckdb":
        return str(path)
    t0 = time.perf_counter()
    spark = _spark()
    out["session_start_s"] = time.perf_counter() - t0
    return spark.read.parquet(str(path))


def worker(engine: str, n: int, unit: str, rounds: int = ROUNDS) -> dict[str, Any]:
    """(a) one (backend, rows, unit) in this (fresh) process: bind, then ``rounds`` rounds of the templates."""
    import dpmagic

    out: dict[str, Any] = {"engine": engine, "rows": n, "unit": unit}
    data = _data(engine, n, out)
    schema = claims_schema(K if unit == "person" else None)
    t0 = time.perf_counter()
    s = dpmagic.Session(data, schema, f"epsilon={BUDGET}", ledger=None)
    out["bind_s"] = time.perf_counter() - t0
    out["unit_label"] = s.schema.unit_label
    lat = []
    for sql in latency_queries(rounds):
        t = time.perf_counter()
        s.query(sql, epsilon=1.0)
        lat.append(time.perf_counter() - t)
    first = lat[: len(TEMPLATES)]
    out["latency_s"] = lat
    out["p50_s"] = statistics.median(first)
    out["session_p50_s"] = statistics.median(lat)
    out["warm_p50_s"] = statistics.median(lat[len(TEMPLATES) :]) if len(lat) > len(TEMPLATES) else None
    out["p90_s"] = percentile(lat, 90)
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    return out


def run(engine: str, n: int, unit: str, rounds: int = ROUNDS) -> dict[str, Any]:
    """:func:`worker` in a fresh process (the data generated beforehand, outside it)."""
    if engine != "pandas":
        write_parquet(n, folder=WORK)
    here = Path(__file__).resolve()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(here.parents[1]), str(here.parent)]))
    p = subprocess.run(
        [sys.executable, str(here), "--worker", engine, str(n), unit, str(rounds)],
        capture_output=True,
        text=True,
        env=env,
        timeout=3600,
    )
    if p.returncode != 0:
        return {"engine": engine, "rows": n, "unit": unit, "error": p.stderr.strip().splitlines()[-1:] or ["failed"]}
    return json.loads(p.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------------------------------
# (b) and (c): the session


def _bounds(schema: Any, boxes: list[Any], weight: float) -> tuple[float, bool]:
    import numpy as np

    from dpmagic.overlap import OverlapEngine

    eng = OverlapEngine(schema, time_limit=30)
    eng.extend(boxes, np.full(len(boxes), weight))
    b = eng.bounds()
    return float(b.overlap.upper), bool(b.overlap.exact)


def session_figures(engine: str, n: int, t: int, seed: int = 0) -> dict[str, Any]:
    """(b) the charge of a ``t``-query session on the person-level table, (c) truncation's bias and the intervals."""
    import dpmagic
    from dpmagic.domain.sets import Box

    out: dict[str, Any] = {"engine": engine, "rows": n, "queries": t, "epsilon_each": EPSILON, "K": K}
    data = _data(engine, n, out) if engine != "pandas" else claims(n)
    person = dpmagic.Session(data, claims_schema(K), f"epsilon={BUDGET}", ledger=None)
    rows = dpmagic.Session(data, claims_schema(None), f"epsilon={BUDGET}", ledger=None)
    unit = person.schema.person_unit
    assert unit is not None
    qs = session_queries(t, seed)
    per_query: list[dict[str, Any]] = []
    covered = cells = 0
    t0 = time.perf_counter()
    for q in qs:
        res = person.query(q["sql"], epsilon=EPSILON)
        query = res.query
        # the custodian's view (never the analyst's): exact rows in the WHERE box before and after truncation
        w = f" WHERE {q['where']}" if q["where"] else ""
        count_sql = f"SELECT COUNT(*) AS n FROM claims{w}"
        before = int(rows.backend.evaluate(rows.parse(count_sql)).counts.sum())
        after = int(person.backend.evaluate(person.parse(count_sql)).counts.sum())
        row_noise = rows._mechanism(rows.parse(q["sql"]), EPSILON).noise  # planned only: no data, no charge
        rec: dict[str, Any] = {
            "sql": q["sql"],
            "kind": q["kind"],
            "rows_before": before,
            "rows_after": after,
            "bias": before - after,
            "halfwidth_person": {k: v.ci_halfwidth(0.95) for k, v in res.noise.items()},
            "halfwidth_row": {k: v.ci_halfwidth(0.95) for k, v in row_noise.items()},
        }
        if q["kind"] in ("count", "group by"):
            exact = person.backend.evaluate(query).counts
            df = res.df
            inside = (df["n_ci_low"].to_numpy() <= exact) & (exact <= df["n_ci_high"].to_numpy())
            rec["cells"], rec["covered"] = int(len(exact)), int(inside.sum())
            cells += len(exact)
            covered += int(inside.sum())
        per_query.append(rec)
    out["session_s"] = time.perf_counter() - t0
    b = person.bounds()
    out["charged"] = float(b.charged)
    out["sequential"] = float(b.sequential)
    pb = getattr(person.accountant, "person_bounds", None)  # the accountant's own three bounds (docs/people.md §3)
    if pb is not None:
        out["accountant"] = {
            "projected": pb.projected,
            "projected_as": pb.projected_as,
            "rows": pb.rows,
            "rows_as": pb.rows_as,
            "sequential": pb.sequential,
            "which": pb.which,
        }
    out["bounds"] = b.to_dict()
    boxes = [person.parse(q["sql"]).coverage for q in qs]
    sep = set(unit.separating)  # the id and the invariant columns: constant within a person
    projected = [Box({c: s for c, s in box.constraints.items() if c in sep}) for box in boxes]
    out["gamma_rows"], out["gamma_rows_exact"] = _bounds(person.schema, boxes, EPSILON)
    out["gamma_invariant"], out["gamma_invariant_exact"] = _bounds(person.schema, projected, EPSILON)
    out["K_prime"] = unit.kept_rows
    out["K_gamma"] = unit.kept_rows * out["gamma_rows"]
    out["sequential_check"] = EPSILON * t
    out["predicates_invariant"] = sum(q["invariant"] for q in qs)
    out["predicates_varying"] = sum(q["varying"] for q in qs)
    out["count_cells"], out["count_cells_covered"] = cells, covered
    out["per_query"] = per_query
    out["unit_label"] = person.schema.unit_label
    full = rows.backend.evaluate(rows.parse("SELECT COUNT(*) AS n FROM claims")).counts.sum()
    kept = person.backend.evaluate(person.parse("SELECT COUNT(*) AS n FROM claims")).counts.sum()
    out["table_rows_before"], out["table_rows_after"] = int(full), int(kept)
    return out


# --------------------------------------------------------------------------------------------------
# report


def _latency_md(results: list[dict[str, Any]]) -> list[str]:
    rows = [
        [
            r["engine"],
            f"{r['rows']:,}",
            r["unit"],
            r.get("session_start_s"),
            r.get("bind_s"),
            r.get("p50_s"),
            r.get("session_p50_s"),
            r.get("warm_p50_s"),
            r.get("p90_s"),
            r.get("peak_rss_mb"),
            r.get("date"),
            " / ".join(f"{x:.2f}" for x in r.get("load_1min") or [] if x is not None),
            "; ".join(r.get("error", [])),
        ]
        for r in results
    ]
    lines = [
        md_table(
            [
                "backend",
                "rows",
                "unit",
                "session start s",
                "bind s",
                "first 5 p50 s",
                f"session ({ROUNDS * len(TEMPLATES)} queries) p50 s",
                "rounds 2+ p50 s",
                "p90 s",
                "peak RSS MB",
                "measured",
                "load 1 min before / after",
                "error",
            ],
            rows,
        ),
        "",
    ]
    by = {(r["engine"], r["rows"], r["unit"]): r for r in results if "error" not in r}
    for (engine, n, unit), r in by.items():
        if unit != "person" or (engine, n, "row") not in by:
            continue
        rr = by[(engine, n, "row")]
        ratio = r["session_p50_s"] / rr["session_p50_s"]
        target = " (target ≤ 2×)" if (engine, n) == ("duckdb", 10_000_000) else ""
        lines.append(
            f"- {engine} {n:,} rows: person-level / row-level session p50 {ratio:.2f}×{target}; one-time cost at "
            f"bind (truncation and invariant check): {r['bind_s'] - rr['bind_s']:+.2f} s "
            f"({r['bind_s']:.2f} s vs {rr['bind_s']:.2f} s)"
        )
    return lines


def _session_md(s: dict[str, Any]) -> list[str]:
    t = s["queries"]
    lines = [
        f"{t} queries on {s['rows']:,} claims ({s['engine']}), each at ε = {EPSILON:g} (pure DP); unit: "
        f"{s['unit_label']}; K′ = {s['K_prime']}. Predicates: {s['predicates_invariant']} on invariant columns "
        f"({', '.join(INVARIANT)}), {s['predicates_varying']} on varying ones.",
        "",
        md_table(
            ["figure", "ε", "÷ sequential"],
            [
                ["sequential composition Σw", s["sequential"], s["sequential"] / s["sequential_check"]],
                ["**charged (the session's accountant)**", s["charged"], s["charged"] / s["sequential"]],
                ["γ of the boxes projected on the invariant columns", s["gamma_invariant"], None],
                ["K′·γ (row-level γ of the full boxes × K′)", s["K_gamma"], None],
                ["row-level γ (one row's worst case, not a person's)", s["gamma_rows"], None],
            ],
        ),
        "",
    ]
    acc = s.get("accountant")
    if acc:
        lines += [
            f"The accountant's own three bounds: projected on the id and invariant columns {acc['projected']:.4g} "
            f"({acc['projected_as']}), K′ × γ {acc['rows']:.4g} ({acc['rows_as']}), Σw {acc['sequential']:.4g}; "
            f"charged: the {acc['which']} bound.",
            "",
        ]
    seq = s["sequential"]
    for key in ("gamma_invariant", "K_gamma"):
        s[key + "_ratio"] = s[key] / seq if seq else None
    ok = s["charged"] <= seq / 2
    lines.append(
        f"- charged / sequential = {s['charged'] / seq:.3f} (target ≤ 0.5: {'met' if ok else 'NOT met'}); "
        f"projected γ / sequential = {s['gamma_invariant'] / seq:.3f}; exact: row γ {s['gamma_rows_exact']}, "
        f"projected γ {s['gamma_invariant_exact']}"
    )
    if s["charged"] > min(seq, s["gamma_invariant"], s["K_gamma"]) + 1e-9:
        lines.append(
            "- the charged bound is above the smallest person-level bound listed: the accountant charges the "
            "row-level γ or sequential composition (person-level accounting not on this branch yet?)"
        )
    before, after = s["table_rows_before"], s["table_rows_after"]
    lines += [
        "",
        "### (c) Truncation's bias (the custodian's view, never shown to an analyst) and the intervals",
        "",
        f"The table has {before:,} claims; truncation to K = {s['K']} per patient keeps {after:,} "
        f"({1 - after / before:.1%} dropped). Per query: the exact number of rows in its WHERE box before and after "
        "truncation (the backends' exact `evaluate`, not the analyst's API), and the 95% interval half-width of its "
        "first release at row level and at person level (from the declared bounds only).",
        "",
    ]
    pq = s["per_query"]
    rel = sorted(q["bias"] / q["rows_before"] for q in pq if q["rows_before"])
    lines.append(
        f"- relative bias of the row count (rows dropped / rows in the box) over the {len(pq)} queries: median "
        f"{statistics.median(rel):.1%}, max {max(rel):.1%}, min {min(rel):.1%}"
        if rel
        else "- no query's box holds a row"
    )
    if s["count_cells"]:
        lines.append(
            f"- released COUNT cells whose 95% interval holds the truncated table's exact count: "
            f"{s['count_cells_covered']} of {s['count_cells']} ({s['count_cells_covered'] / s['count_cells']:.1%}); "
            "every answer's error is the truncation bias (above, data-dependent, never released) plus noise "
            "calibrated to the declared bounds"
        )
    lines.append("")
    show = sorted(pq, key=lambda q: -q["bias"] / max(1, q["rows_before"]))[:12]
    lines.append(
        md_table(
            [
                "query (the 12 largest relative biases)",
                "rows before",
                "rows after",
                "bias",
                "relative",
                "half-width row",
                "half-width person",
            ],
            [
                [
                    q["sql"].replace("|", "\\|"),
                    q["rows_before"],
                    q["rows_after"],
                    q["bias"],
                    f"{q['bias'] / max(1, q['rows_before']):.1%}",
                    next(iter(q["halfwidth_row"].values()), None),
                    next(iter(q["halfwidth_person"].values()), None),
                ]
                for q in show
            ],
        )
    )
    lines += [
        "",
        "Half-widths are those of the query's first release (COUNT(DISTINCT patient_id): —; its noise is 1/ε at both "
        "levels). The bias is largest where heavy claimants concentrate (older patients claim more).",
    ]
    return lines


def render(data: dict[str, Any]) -> str:
    """The results file's markdown from its JSON data (``--render`` rewrites it without measuring)."""
    info, results, session = data["machine"], data["latency"], data["session"]
    load_before, load_after = data["load_before"], data["load_after"]
    rounds = data.get("rounds", ROUNDS)
    md = [
        "# People, not rows: person-level vs row-level (benchmarks/bench_people.py, issue 26)",
        "",
        f"Machine: {info['nproc']} cores ({info['cpu']}), Python {info['python']}, {info['date']}; 1-minute load "
        f"average {load_before[0]:.2f} before, {load_after[0]:.2f} after (the cores are shared with other work: "
        "each row's load is in its column). The claims table: benchmarks/claims.py (patients with a skewed number "
        "of claims, median 7, mean 11, about 3% above 40, invariant sex / birth_year / region).",
        "",
    ]
    if results:
        md += [
            "## (a) Latency: the same queries at person level (K = 40) and at row level",
            "",
            "Each row is a fresh process: bind (person level: the one-time stable truncation and the invariant "
            f"check included), then {rounds} rounds of {len(TEMPLATES)} charged queries (filtered GROUP BY "
            "COUNT, SUM, AVG and COUNT(DISTINCT patient_id)), each round with other constants; latency = "
            "`Session.query` (admission, noise included). DuckDB and Spark read the Parquet file; pandas gets the "
            "frame (its generation not counted).",
            "",
            *_latency_md(results),
            "",
        ]
    if session:
        md += [
            f"## (b) A {session['queries']}-query session: the charged bound vs sequential composition",
            "",
            *_session_md(session),
        ]
    return "\n".join(md)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", nargs=4, metavar=("ENGINE", "ROWS", "UNIT", "ROUNDS"), help=argparse.SUPPRESS)
    ap.add_argument("--quick", action="store_true", help="20k rows, 30 queries, DuckDB and pandas (not written)")
    ap.add_argument(
        "--latency",
        action="append",
        metavar="ENGINE:ROWS",
        help="measure these (backend, size) pairs at both units (repeatable; default: duckdb 1M and 10M, spark 1M, "
        "pandas 1M); --latency none skips (a)",
    )
    ap.add_argument("--rounds", type=int, default=ROUNDS, help=f"rounds of the five shapes (default {ROUNDS})")
    ap.add_argument("--session-rows", type=int, default=1_000_000, help="rows of the session's table; 0 skips")
    ap.add_argument("--session-engine", default="duckdb", choices=["duckdb", "pandas", "spark"])
    ap.add_argument("--queries", type=int, default=200, help="queries of the session (default 200)")
    ap.add_argument("--out", default="bench_people", help="results file name (benchmarks/results/<out>.md|json)")
    ap.add_argument("--render", action="store_true", help="rewrite results/<out>.md from its .json (no measuring)")
    args = ap.parse_args(argv)
    if args.render:
        jp = RESULTS / f"{args.out}.json"
        data = json.loads(jp.read_text(encoding="utf-8"))
        write_results(args.out, data, render(data))
        print(f"rewrote {jp.with_suffix('.md')}")
        return 0
    if args.worker:
        e, n, u, r = args.worker
        print(json.dumps(worker(e, int(n), u, int(r))))
        return 0
    if args.quick:
        plan = [("duckdb", 20_000), ("pandas", 20_000)]
        args.session_rows, args.queries = 20_000, 30
    else:
        plan = [("duckdb", 1_000_000), ("duckdb", 10_000_000), ("spark", 1_000_000), ("pandas", 1_000_000)]
    if args.latency:
        plan = (
            []
            if args.latency == ["none"]
            else [(e, int(n.replace("_", ""))) for e, n in (o.split(":") for o in args.latency)]
        )
    load_before = os.getloadavg()
    results = []
    for engine, n in plan:
        for unit in ("row", "person"):
            lb = os.getloadavg()[0]
            r = run(engine, n, unit, args.rounds)
            r["load_1min"] = [lb, os.getloadavg()[0]]
            r["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
            print(json.dumps({k: v for k, v in r.items() if k != "latency_s"}), flush=True)
            results.append(r)
    session = None
    if args.session_rows:
        lb = os.getloadavg()[0]
        session = session_figures(args.session_engine, args.session_rows, args.queries)
        session["load_1min"] = [lb, os.getloadavg()[0]]
    load_after = os.getloadavg()
    data = {
        "machine": machine_info(),
        "load_before": load_before,
        "load_after": load_after,
        "rounds": args.rounds,
        "latency_queries": latency_queries(args.rounds),
        "latency": results,
        "session": session,
    }
    text = render(data)
    if args.quick:
        print(text)
        return 0
    jp, mp = write_results(args.out, data, text)
    print(text)
    print(f"wrote {jp} and {mp}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
