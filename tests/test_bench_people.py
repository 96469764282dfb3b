"""The people benchmark script runs (tiny, marked slow; the real run writes benchmarks/results/bench_people.*)."""

from __future__ import annotations

import bench_people
import pytest


@pytest.mark.slow
def test_bench_people_tiny(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(bench_people, "WORK", tmp_path)
    for engine in ("duckdb", "pandas"):
        for unit in ("row", "person"):
            r = bench_people.worker(engine, 3_000, unit, rounds=1)
            assert r["rows"] == 3_000 and len(r["latency_s"]) == len(bench_people.TEMPLATES)
            assert r["bind_s"] > 0 and r["p50_s"] > 0 and r["peak_rss_mb"] > 0
            assert ("patient_id" in r["unit_label"]) == (unit == "person")
    s = bench_people.session_figures("pandas", 3_000, 12)
    assert len(s["per_query"]) == 12
    assert s["charged"] == pytest.approx(min(s["gamma_invariant"], s["K_gamma"], s["sequential"]))
    assert s["accountant"]["which"] in ("projection", "rows", "sequential")
    assert s["sequential"] == pytest.approx(12 * bench_people.EPSILON)
    assert s["gamma_rows"] <= s["gamma_invariant"] + 1e-9 <= s["sequential"] + 2e-9
    assert all(q["rows_after"] <= q["rows_before"] for q in s["per_query"])
    assert s["table_rows_after"] <= s["table_rows_before"] == 3_000
    assert not list(tmp_path.glob("*.tmp"))
    text = "\n".join(bench_people._session_md(s))
    assert "charged" in text and "sequential" in text
