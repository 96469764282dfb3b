"""Time limits are kept: wall time of ``max_overlap`` with a small time limit on hard instances.

The promise (issue 10, item 11): a call with ``time_limit=L`` returns within ``1.1·L + 0.3 s`` with the best
*proven* upper bound found.  Hard instances: every query constrains every categorical column to a random
~60% subset (dense query graph, atom product too large for the load tensor), t = 1,000-5,000.  The wall time
includes encoding the boxes.

    python benchmarks/bench_time_limits.py            # quick: limits 0.5 s and 2 s
    python benchmarks/bench_time_limits.py --mode full  # also 5 s and 10 s

Writes ``benchmarks/results/time_limits.md`` (and ``.json``).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import machine_info, md_table, write_results  # noqa: E402
from workloads import dense_categorical  # noqa: E402

from dpmagic.overlap import max_overlap  # noqa: E402

#: (t, columns, values per column)
INSTANCES = [(1000, 30, 3), (2000, 8, 5), (3000, 12, 4), (5000, 8, 5)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=["quick", "full"], default="quick")
    args = ap.parse_args()
    limits = [0.5, 2.0] if args.mode == "quick" else [0.5, 2.0, 5.0, 10.0]
    rows: list[list[Any]] = []
    data: dict[str, Any] = {"mode": args.mode, "machine": machine_info(), "runs": []}
    worst = 0.0
    for t, m, k in INSTANCES:
        sch, bx, w = dense_categorical(t, m, k)
        for limit in limits:
            t0 = time.perf_counter()
            r = max_overlap(bx, w, sch, time_limit=limit)
            elapsed = time.perf_counter() - t0
            allowed = 1.1 * limit + 0.3
            worst = max(worst, elapsed / allowed)
            run = {
                "t": t,
                "m": m,
                "k": k,
                "limit": limit,
                "elapsed": elapsed,
                "allowed": allowed,
                "ok": elapsed <= allowed,
                "lower": r.lower,
                "upper": r.upper,
                "exact": r.exact,
                "method": r.method,
            }
            data["runs"].append(run)
            rows.append([t, m, k, limit, round(elapsed, 3), round(allowed, 2), "yes" if run["ok"] else "NO"])
            rows[-1] += [f"[{r.lower:.2f}, {r.upper:.2f}]", r.exact, r.method]
            print(f"t={t} m={m} k={k} limit={limit}: {elapsed:.3f}s (allowed {allowed:.2f}) {r.method}", flush=True)
    info = data["machine"]
    md = [
        f"## Time limits of max_overlap ({args.mode} mode)",
        "",
        f"Machine: {info['nproc']} CPUs ({info['cpu']}), Python {info['python']}, numpy {info['numpy']}, "
        f"scipy {info['scipy']}; {info['date']}.  Command: `python benchmarks/bench_time_limits.py"
        + (" --mode full`." if args.mode == "full" else "`."),
        "",
        "Dense categorical workloads (every query constrains every column to a random ~60% subset); wall time of "
        "`max_overlap(boxes, weights, schema, time_limit=L)` including the encoding; allowed = 1.1·L + 0.3 s.",
        "",
        md_table(
            ["t", "columns", "values", "limit s", "wall s", "allowed s", "kept", "[lower, upper]", "exact", "steps"],
            rows,
        ),
        "",
        f"Worst wall / allowed: {worst:.2f}.",
    ]
    data["worst_ratio"] = worst
    write_results("time_limits", data, "\n".join(md))
    print(f"worst wall/allowed {worst:.2f}; wrote benchmarks/results/time_limits.md")


if __name__ == "__main__":
    main()
