"""``%load_ext dpmagic``: the first cell of every dpmagic notebook (issue 30, friction 9: it took 1.7–2.2 s because
scipy, pandas, OpenDP and sqlglot were imported to register the magics).

Each run is a fresh ``python`` process that starts an IPython shell (IPython itself already imported, as in a
kernel), then times ``%load_ext dpmagic`` alone, and lists the heavy libraries it imported.  The target is ≤ 0.3 s;
heavy libraries load when a feature needs them (``%dpsession`` imports pandas, the session, OpenDP).

    python benchmarks/bench_load_ext.py [--runs 9]   # → benchmarks/results/bench_load_ext.{md,json}
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from common import machine_info, md_table, median, write_results

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("numpy", "pandas", "scipy", "sqlglot", "opendp", "networkx", "sympy", "matplotlib", "duckdb", "ipywidgets")
TARGET = 0.3  # s

CHILD = (
    f"HEAVY = {HEAVY!r}\n"
    + """
import json, sys, time
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
before = set(sys.modules)
t0 = time.perf_counter()
shell.run_line_magic("load_ext", "dpmagic")
t1 = time.perf_counter()
print(json.dumps({"seconds": t1 - t0, "heavy": [m for m in HEAVY if m in sys.modules and m not in before]}))
"""
)


def one_run() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["IPYTHONDIR"] = str(REPO / "build" / "bench-ipython")  # no user start-up files
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=9)
    args = ap.parse_args()
    load_before = os.getloadavg()
    runs = [one_run() for _ in range(args.runs)]
    load_after = os.getloadavg()
    secs = [r["seconds"] for r in runs]
    heavy = sorted({m for r in runs for m in r["heavy"]})
    med = median(secs)
    info = machine_info()
    data = {
        "machine": info,
        "load_average_1min": [load_before[0], load_after[0]],
        "runs": runs,
        "median_s": med,
        "max_s": max(secs),
        "target_s": TARGET,
        "heavy_imported": heavy,
    }
    md = (
        "# `%load_ext dpmagic` (benchmarks/bench_load_ext.py)\n\n"
        f"Machine: {info['nproc']} cores, {info['cpu']}, Python {info['python']}, {info['date']}; load average "
        f"(1 min) {load_before[0]:.2f} before, {load_after[0]:.2f} after (the machine is shared).\n\n"
        f"Each run: a fresh Python process with IPython already imported; only `%load_ext dpmagic` is timed.\n\n"
        + md_table(
            ["runs", "median (s)", "min (s)", "max (s)", "target (s)", "heavy libraries imported"],
            [[len(secs), f"{med:.3f}", f"{min(secs):.3f}", f"{max(secs):.3f}", TARGET, ", ".join(heavy) or "none"]],
        )
        + "\n\nBefore issue 30 (friction 9): 1.7–2.2 s, importing scipy, pandas, numpy, sqlglot and OpenDP.\n"
    )
    write_results("bench_load_ext", data, md)
    print(md)
    if med > TARGET:
        sys.exit(f"median {med:.3f} s is above the {TARGET} s target")


if __name__ == "__main__":
    main()
