"""Load test of ``dpmagic serve`` (issue 31): 20 concurrent analysts, 2,000 queries, loopback only.

A real server (uvicorn subprocess, PUMS on pandas, response floor 0 so that latency is the work itself) is asked
2,000 fresh queries by 20 analyst threads (100 each, mixed COUNT / SUM / AVG with GROUP BY, on random age ranges;
ε = 0.1 each, quotas ε = 1, global ε = 6): many are refused by a quota or the global budget, which is the point.
Reported: throughput, p50 / p99 latency under that load, the single-client round trip against a local
``Session.query`` of the same queries (with a durable ledger file, as the magics bind one; the in-memory figure too) (the target: the HTTP round trip adds ≤ 20 ms at p50), and the spend
check (global spent ≤ global budget; each analyst's quota spent ≤ quota; ledger entries = admitted answers).

    python benchmarks/bench_server.py            # writes benchmarks/results/bench_server.{md,json}
"""

from __future__ import annotations

import random
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from common import machine_info, md_table, percentile, write_results  # noqa: E402
from server_support import DATA, Server, hash_token  # noqa: E402

ANALYSTS, PER_ANALYST, COST, QUOTA, GLOBAL = 20, 100, 0.1, 1.0, 6.0
TEMPLATES = [
    "SELECT COUNT(*) FROM pums WHERE age BETWEEN {a} AND {b}",
    "SELECT sex, COUNT(*) AS n FROM pums WHERE age BETWEEN {a} AND {b} GROUP BY sex",
    "SELECT SUM(income) FROM pums WHERE age BETWEEN {a} AND {b}",
    "SELECT educ, AVG(income) AS m FROM pums WHERE age BETWEEN {a} AND {b} GROUP BY educ",
]


def queries(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        a = rng.randrange(0, 95)
        out.append(rng.choice(TEMPLATES).format(a=a, b=min(100, a + rng.randrange(1, 15))))
    return out


def config(where: Path, tokens: dict[str, str]) -> Path:
    import shutil

    shutil.copy(DATA / "pums.csv", where / "pums.csv")
    shutil.copy(DATA / "pums.schema.json", where / "pums.schema.json")
    analysts = "".join(f'\n[[analysts]]\nid = "{a}"\ntoken_hash = "{hash_token(t)}"\n' for a, t in tokens.items())
    cfg = where / "server.toml"
    cfg.write_text(
        f"""[server]
state_dir = "state"
admin_token_hash = "{hash_token("admin-token-for-tests")}"
response_floor_seconds = 0
rate_limit_per_minute = 1000000

[[datasets]]
id = "pums"
data = "pums.csv"
schema = "pums.schema.json"
budget = "epsilon={GLOBAL}"
analyst_quota = {QUOTA}
{analysts}"""
    )
    return cfg


def load_average() -> str:
    """The 1, 5 and 15 minute load averages (``uptime``): the machine's cores are shared."""
    import os

    return " / ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> None:
    import httpx
    import pandas as pd

    import dpmagic
    from dpmagic.errors import BudgetExceededError
    from dpmagic.presentation.remote import RemoteSession

    load_before = load_average()
    tokens = {f"analyst{i:02d}": f"token-{i:02d}-" + "x" * 20 for i in range(ANALYSTS)}
    with tempfile.TemporaryDirectory() as tmp:
        srv = Server(config(Path(tmp), tokens))
        try:
            # 1. the round trip alone: one client, sequential, against a local session (a durable ledger file, as
            #    the magics bind one) on the same queries; both through the client the magics use
            warm = queries(999, 100)
            local = dpmagic.Session(
                pd.read_csv(DATA / "pums.csv"), DATA / "pums.schema.json", "epsilon=1e6", ledger=Path(tmp) / "l.sqlite"
            )
            memory = dpmagic.Session(pd.read_csv(DATA / "pums.csv"), DATA / "pums.schema.json", "epsilon=1e6")
            with httpx.Client(base_url=srv.url, headers={"Authorization": "Bearer admin-token-for-tests"}) as adm:
                made = adm.post("/v1/admin/analysts", json={"id": "seq", "quotas": {"pums": 1e6}}).json()
                adm.post("/v1/admin/datasets/pums/budget", json={"total": 1e6})  # the sequential run must not refuse
            remote = RemoteSession(srv.url, "pums", made["token"])
            # interleaved query by query, so that the machine's load (shared cores) weighs on both alike
            t_local, t_memory, t_remote = [], [], []
            for sql in warm:
                for ask, times in (
                    (lambda q: local.query(q, epsilon=COST, fresh=True), t_local),
                    (lambda q: memory.query(q, epsilon=COST, fresh=True), t_memory),
                    (lambda q: remote.query(q, epsilon=COST, fresh=True), t_remote),
                ):
                    t0 = time.perf_counter()
                    ask(sql)
                    times.append(time.perf_counter() - t0)
            remote.close()
            with httpx.Client(base_url=srv.url, headers={"Authorization": "Bearer admin-token-for-tests"}) as adm:
                spent = adm.get("/v1/admin/datasets/pums/audit").json()["spent"]
                adm.post("/v1/admin/datasets/pums/budget", json={"total": spent + GLOBAL})  # GLOBAL left for the load
                before = adm.get("/v1/admin/datasets/pums/audit").json()
            # 2. the load: 20 analysts in parallel, 100 queries each
            lat: list[float] = []
            codes: dict[str, int] = {}
            lock = threading.Lock()

            def analyst(i: int, name: str) -> None:
                mine = RemoteSession(srv.url, "pums", tokens[name])
                for sql in queries(i, PER_ANALYST):
                    t0 = time.perf_counter()
                    try:
                        mine.query(sql, epsilon=COST, fresh=True)
                        code = "answered"
                    except BudgetExceededError:
                        code = "refused (budget)"
                    dt = time.perf_counter() - t0
                    with lock:
                        lat.append(dt)
                        codes[code] = codes.get(code, 0) + 1
                mine.close()

            threads = [threading.Thread(target=analyst, args=(i, n)) for i, n in enumerate(tokens)]
            t0 = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            wall = time.perf_counter() - t0
            with httpx.Client(base_url=srv.url, headers={"Authorization": "Bearer admin-token-for-tests"}) as adm:
                audit = adm.get("/v1/admin/datasets/pums/audit").json()
                verified = adm.get("/v1/admin/ledger/verify").json()["ok"]
            quotas = []
            for tok in tokens.values():
                with httpx.Client(base_url=srv.url, headers={"Authorization": f"Bearer {tok}"}) as c:
                    quotas.append(c.get("/v1/datasets/pums/budget").json()["quota"])
        finally:
            srv.stop()
    admitted = codes.get("answered", 0)
    new_entries = len(audit["entries"]) - len(before["entries"])
    data: dict[str, Any] = {
        "machine": machine_info(),
        "load_average_before_after": [load_before, load_average()],
        "analysts": ANALYSTS,
        "queries": ANALYSTS * PER_ANALYST,
        "cost_each": COST,
        "quota": QUOTA,
        "global_budget_during_load": audit["budget"],
        "status_codes": {str(k): v for k, v in sorted(codes.items())},
        "wall_seconds": wall,
        "throughput_per_second": ANALYSTS * PER_ANALYST / wall,
        "latency_p50_ms": 1000 * percentile(lat, 50),
        "latency_p99_ms": 1000 * percentile(lat, 99),
        "sequential_local_p50_ms": 1000 * percentile(t_local, 50),
        "sequential_local_in_memory_ledger_p50_ms": 1000 * percentile(t_memory, 50),
        "sequential_remote_p50_ms": 1000 * percentile(t_remote, 50),
        "round_trip_overhead_p50_ms": 1000 * (percentile(t_remote, 50) - percentile(t_local, 50)),
        "global_spent": audit["spent"],
        "max_quota_spent": max(q["spent"] for q in quotas),
        "admitted": admitted,
        "ledger_entries_added": new_entries,
        "no_overspend": audit["spent"] <= audit["budget"] + 1e-9
        and all(q["spent"] <= q["budget"] + 1e-9 for q in quotas)
        and admitted == new_entries,
        "ledger_verified": verified,
    }
    md = "\n".join(
        [
            "# dpmagic serve: load test (issue 31)",
            "",
            f"{ANALYSTS} analyst threads × {PER_ANALYST} fresh queries (ε={COST} each; quota ε={QUOTA}; global "
            f"ε={audit['budget']:g}) against `dpmagic serve` on 127.0.0.1 (PUMS, pandas; response floor 0). "
            "`python benchmarks/bench_server.py`.",
            "",
            md_table(
                ["measure", "value"],
                [
                    ["queries / wall seconds", f"{ANALYSTS * PER_ANALYST} / {wall:.1f} s"],
                    ["throughput", f"{data['throughput_per_second']:.0f} queries/s"],
                    ["latency under load p50 / p99", f"{data['latency_p50_ms']:.1f} / {data['latency_p99_ms']:.1f} ms"],
                    ["status codes", ", ".join(f"{k}: {v}" for k, v in data["status_codes"].items())],
                    ["one client: local Session.query p50 (ledger file)", f"{data['sequential_local_p50_ms']:.1f} ms"],
                    [
                        "one client: local Session.query p50 (in-memory ledger)",
                        f"{data['sequential_local_in_memory_ledger_p50_ms']:.1f} ms",
                    ],
                    ["one client: over HTTP p50", f"{data['sequential_remote_p50_ms']:.1f} ms"],
                    [
                        "added by the server at p50 vs the ledger file (target ≤ 20 ms)",
                        f"{data['round_trip_overhead_p50_ms']:.1f} ms",
                    ],
                    ["global spent / budget", f"{audit['spent']:.4g} / {audit['budget']:g}"],
                    ["largest quota spent / quota", f"{data['max_quota_spent']:.4g} / {QUOTA:g}"],
                    ["answers 200 = ledger entries added", f"{admitted} = {new_entries}"],
                    ["no over-spend; ledger verifies", f"{data['no_overspend']}; {verified}"],
                ],
            ),
            "",
            f"Machine: {data['machine']['nproc']} cores, {data['machine']['cpu']}, Python {data['machine']['python']}, "
            f"{data['machine']['date']}; load average (1 / 5 / 15 min, `uptime`) before {load_before}, after "
            f"{data['load_average_before_after'][1]} (shared cores: the latencies include waiting for a core). "
            "The single-client figures are interleaved query by query (local file, in-memory, HTTP).",
        ]
    )
    write_results("bench_server", data, md)
    print(md)


if __name__ == "__main__":
    main()
