"""The engines benchmark script runs (tiny, marked slow; the real run writes benchmarks/results/bench_engines.*)."""

from __future__ import annotations

import bench_engines
import pytest


@pytest.mark.slow
def test_bench_engines_worker_tiny(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(bench_engines, "WORK", tmp_path)
    for engine in ("duckdb", "pandas"):
        r = bench_engines.worker(engine, 2_000)
        assert r["rows"] == 2_000 and len(r["latency_s"]) == bench_engines.ROUNDS * len(bench_engines.TEMPLATES)
        assert r["session_p50_s"] > 0 and r["warm_p50_s"] > 0
        assert r["peak_rss_mb"] > 0
    assert not list(tmp_path.glob("*.tmp"))
