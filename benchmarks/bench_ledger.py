"""Cost of one ledger commit under the durability options of audit issue 10, item 10.

Usage::

    python benchmarks/bench_ledger.py            # 200 commits per option
    python benchmarks/bench_ledger.py --n 1000

Each option appends ``n`` charge-sized events (one ``BEGIN IMMEDIATE`` … ``COMMIT`` each, as the accountant
does) to a fresh ledger file and reports the median and 95th-percentile wall time per commit:

* ``wal`` — WAL mode, ``synchronous=FULL``, no checkpoint (before the fix: charges can sit only in the
  ``-wal`` file, so a plain copy of ``ledger.sqlite`` misses them);
* ``wal+checkpoint`` — the shipped default: WAL, ``synchronous=FULL`` and a checkpoint into the main file after
  every commit that wrote;
* ``delete`` — sqlite's rollback journal (``journal_mode=DELETE``, ``synchronous=FULL``), the alternative.

Also times one keyed (HMAC-chained) append against an unkeyed one.  The numbers are dominated by the disk's
fsync latency.  Writes ``benchmarks/results/bench_ledger.json`` / ``.md``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine_info, md_table, median, percentile, write_results  # noqa: E402

from dpmagic.accountant.ledger import Ledger  # noqa: E402

OPTIONS = {"wal": ("WAL", False), "wal+checkpoint": ("WAL", True), "delete": ("DELETE", False)}
BODY = {
    "sql": "SELECT sex, COUNT(*) FROM adult WHERE age BETWEEN 20 AND 30 GROUP BY sex",
    "canonical": "x" * 120,
    "coverage": {"age": {"intervals": [[20, 30, True, True]]}},
    "cost": 0.1,
    "weight": 0.1,
    "bound": "exact",
    "charged_after": 0.3,
    "details": {"share_cost": 0.1, "releases_per_cell": 1},
}


def time_option(directory: Path, name: str, n: int, key: bytes | None = None) -> list[float]:
    mode, checkpoint = OPTIONS[name]
    old = Ledger.journal_mode, Ledger.checkpoint_every_commit
    Ledger.journal_mode, Ledger.checkpoint_every_commit = mode, checkpoint
    try:
        ledger = Ledger(directory / f"{name}{'-keyed' if key else ''}.sqlite", key=key, create=True)
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            with ledger.transaction():
                ledger.append("k", "charge", BODY)
            times.append(time.perf_counter() - t0)
        ledger.close()
        return times
    finally:
        Ledger.journal_mode, Ledger.checkpoint_every_commit = old


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200)
    args = ap.parse_args()
    rows, data = [], {"machine": machine_info(), "n": args.n, "options": {}}
    with tempfile.TemporaryDirectory(dir=Path(__file__).resolve().parent) as tmp:
        d = Path(tmp)
        runs = [(name, None) for name in OPTIONS] + [("wal+checkpoint", b"k" * 32)]
        for name, key in runs:
            ts = time_option(d, name, args.n, key)
            label = name + (" (keyed)" if key else "")
            ms = [1e3 * t for t in ts]
            data["options"][label] = {"median_ms": median(ms), "p95_ms": percentile(ms, 95)}
            rows.append([label, median(ms), percentile(ms, 95)])
            print(f"{label:28} median {median(ms):7.2f} ms  p95 {percentile(ms, 95):7.2f} ms", flush=True)
    md = (
        "# Ledger commit cost (audit issue 10, item 10)\n\n"
        f"{args.n} charge-sized commits per option on {data['machine']['cpu']} ({data['machine']['date']}); "
        "`python benchmarks/bench_ledger.py`.\n\n" + md_table(["option", "median ms", "p95 ms"], rows)
    )
    write_results("bench_ledger", data, md)


if __name__ == "__main__":
    main()
