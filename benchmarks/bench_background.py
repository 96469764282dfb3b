"""The overlap engine's second core at an analyst's pace (issue 28; :mod:`dpmagic.overlap.background`).

``bench_session.py`` asks its dense sessions back to back: nothing is idle between cells, so a term the worker
process closes arrives many queries later.  An analyst reads each answer before asking the next.  This benchmark
runs the drill-down sessions (:func:`workloads.dense_drilldown_log`, the ones whose γ stays inexact back to back)
through :meth:`Session.query` with a pause of ``--pause`` seconds after every ``--every`` queries — the analyst
reading a block of answers — and reports, per session, the charged bound's upper/lower at the last answer before
each pause and at the first answer after it, and the latency and CPU of every query (pauses excluded).

    python benchmarks/bench_background.py                    # worker on (the default where there are 2 cores)
    python benchmarks/bench_background.py --worker off --name bench_background_off
    python benchmarks/bench_background.py --n 600 --every 10000 --think-from 400 --think 2   # human pace from 400

Results: ``benchmarks/results/<name>.{md,json}``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_session import _drilldown_data, _exactness, _session, _stats  # noqa: E402
from common import machine_info, md_table, write_results  # noqa: E402
from workloads import dense_drilldown_log  # noqa: E402

RUNS = (("drilldown", 11), ("drilldown-wide", 12))


def run(
    variant: str, seed: int, n: int, every: int, pause: float, think_from: int = -1, think: float = 0.0
) -> dict[str, Any]:
    df, schema = _drilldown_data(variant)
    warm = _session(df, schema)
    for sql, eps in dense_drilldown_log(5, seed=999, schema=schema, variant=variant):
        warm.query(sql, epsilon=eps, fresh=True)
    s = _session(df, schema)
    lat: list[float] = []
    cpu: list[float] = []
    ratios: list[float] = []
    pauses: list[dict[str, Any]] = []
    for i, (sql, eps) in enumerate(dense_drilldown_log(n, seed=seed, schema=schema, variant=variant)):
        t0, c0 = time.perf_counter(), time.process_time()
        r = s.query(sql, epsilon=eps, fresh=True)
        lat.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        ratios.append(_exactness(r))
        if 0 <= think_from <= i:
            time.sleep(think)  # the analyst reads this answer before asking the next
        if pauses and "after" not in pauses[-1]:
            pauses[-1]["after"] = ratios[-1]  # what the first answer after the pause was charged with
        if (i + 1) % every == 0 and i + 1 < n:
            pauses.append({"after_query": i + 1, "before": ratios[-1]})
            time.sleep(pause)
    inexact_before = [p for p in pauses if p["before"] != 1.0]
    paced = ratios[think_from:] if 0 <= think_from < len(ratios) else []
    return {
        "answered": len(lat),
        "all": _stats(lat),
        "cpu": _stats(cpu),
        "worst_upper_over_lower": max(ratios),
        "exact_share": sum(1 for x in ratios if x == 1.0) / len(ratios),
        "final": ratios[-1],
        "pauses": pauses,
        "pauses_inexact_before": len(inexact_before),
        "pauses_exact_after": sum(1 for p in inexact_before if p["after"] == 1.0),
        "worst_after_pause": max((p["after"] for p in pauses), default=1.0),
        "paced_from": think_from,
        "paced_exact_share": (sum(1 for x in paced if x == 1.0) / len(paced)) if paced else None,
        "paced_worst": max(paced, default=None),
        "loadavg_after": list(os.getloadavg()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--every", type=int, default=50, help="queries between pauses")
    ap.add_argument("--pause", type=float, default=10.0, help="seconds of each pause")
    ap.add_argument("--worker", choices=("on", "off"), default="on")
    ap.add_argument("--think-from", type=int, default=-1, help="from this query on, wait --think s after each answer")
    ap.add_argument("--think", type=float, default=0.0)
    ap.add_argument("--name", default="bench_background")
    a = ap.parse_args()
    os.environ["DPMAGIC_OVERLAP_WORKER"] = "1" if a.worker == "on" else "0"
    res: dict[str, Any] = {"machine": machine_info(), "args": vars(a), "runs": {}}
    rows = []
    for variant, seed in RUNS:
        r = run(variant, seed, a.n, a.every, a.pause, a.think_from, a.think)
        res["runs"][f"{variant}/seed{seed}"] = r
        rows.append(
            [
                f"{variant}/seed{seed}",
                r["answered"],
                f"{r['all']['p50_ms']:.1f} / {r['all']['p99_ms']:.0f} / {r['all']['max_ms']:.0f}",
                f"{r['cpu']['p50_ms']:.1f} / {r['cpu']['p99_ms']:.0f}",
                f"{r['exact_share']:.3f}",
                f"{r['worst_upper_over_lower']:.4f}",
                f"{r['pauses_exact_after']} of {r['pauses_inexact_before']}",
                f"{r['worst_after_pause']:.4f}",
                f"{r['final']:.4f}",
                "—" if r["paced_exact_share"] is None else f"{r['paced_exact_share']:.3f} / {r['paced_worst']:.4f}",
                ", ".join(f"{x:.1f}" for x in r["loadavg_after"]),
            ]
        )
        print(rows[-1], flush=True)
    md = [
        "# The overlap engine's second core at an analyst's pace (issue 28)",
        "",
        f"Machine: {res['machine']}",
        "",
        f"Worker: **{a.worker}**.  {a.n} drill-down queries per session through `Session.query`, a pause of "
        f"{a.pause} s after every {a.every}"
        + (f", and from query {a.think_from} on {a.think} s after each answer" if a.think_from >= 0 else "")
        + " (latency and CPU exclude the pauses).  'Pauses' counts the pauses whose last answer "
        "before was charged an inexact bound and whose first answer after an exact one.",
        "",
        md_table(
            [
                "session",
                "answered",
                "p50 / p99 / max ms",
                "CPU p50 / p99 ms",
                "exact share",
                "worst upper/lower",
                "pauses: exact after / inexact before",
                "worst upper/lower after a pause",
                "final",
                "load avg",
            ],  # fmt: skip
            rows,
        ),
    ]
    write_results(a.name, res, "\n".join(md))


if __name__ == "__main__":
    main()
