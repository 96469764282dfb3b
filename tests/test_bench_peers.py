"""The peers benchmark (issue 32): its workload, its exact values and metrics against brute force, and the dpmagic
side of a tiny run.  The peers' virtual environments do not exist in CI: the adapter test runs only where they do
(``DPMAGIC_PEERS`` or ``~/.cache/dpmagic-peers``; ``bash benchmarks/peers/setup.sh DIR`` creates them)."""

from __future__ import annotations

import itertools
import json
import math
import os
import sqlite3
from pathlib import Path

import bench_peers as bp
import numpy as np
import pandas as pd
import pytest

SCHEMA = json.loads(bp.ADULT_SCHEMA.read_text())


@pytest.fixture(scope="module")
def adult() -> pd.DataFrame:
    for col in ("sex", "education", "race", "class", "marital-status", "relationship", "age_band"):
        bp.GROUP_PREDS[col] = bp.group_keys(SCHEMA, col)
    return pd.read_csv(bp.ADULT_CSV)


def test_workload_a_shape(adult: pd.DataFrame) -> None:
    seq, grp = bp.expand(bp.SESSION, SCHEMA), bp.expand(bp.GROUPED, SCHEMA)
    stats = bp.stats_of(seq)
    assert len(bp.SESSION) == 40 and len(bp.GROUPED) == 13 and len(stats) == 47
    ids = [s[0] for s in stats]
    assert len(set(ids)) == len(ids)  # every statistic is asked once as written
    assert set(ids) <= {s[0] for s in bp.stats_of(grp)}  # and released by the hand-grouped session
    assert {s[1] for s in stats} == {"COUNT", "SUM", "AVG"}


def test_exact_values_match_sqlite(adult: pd.DataFrame) -> None:
    """Every statistic's exact value (pandas) against SQLite running dpmagic's SQL of the as-written session."""
    con = sqlite3.connect(":memory:")
    adult.to_sql("adult", con, index=False)
    seq = bp.expand(bp.SESSION, SCHEMA)
    for x in seq:
        rows = con.execute(bp.to_sql(x)).fetchall()
        if x["group"]:
            by = dict(rows)
            want = {sid: by[k] for k, sid in zip(x["group"]["keys"], x["group"]["stat_ids"])}
        else:
            want = {x["stat_id"]: rows[0][0]}
        for sid, agg, col, where in bp.stats_of([x]):
            assert bp.exact(adult, agg, col, where) == pytest.approx(want[sid], rel=1e-12)


def test_gamma_is_the_maximum_overlap(adult: pd.DataFrame) -> None:
    """dpmagic's γ of the as-written session: exact, every data row touched by at most γ queries, the witness by γ
    (a brute-force count of the queries covering it), and equal to the hand-grouped session's size."""
    g = bp.dpmagic_gamma(adult, bp.SESSION)
    assert g["exact"] and g["gamma"] == g["lower"] == 13 == len(bp.GROUPED)

    def covers(x: dict, row: dict) -> bool:  # a query covers a domain row: its WHERE holds (GROUP BY: all keys)
        for p in x["where"]:
            v = row.get(p[1])
            if v is None:
                continue  # the witness leaves this column free: some value satisfies the predicate
            if (p[0] == "eq" and v != p[2]) or (p[0] == "between" and not p[2] <= v <= p[3]):
                return False
            if p[0] == "ge" and v < p[2]:
                return False
        return True

    assert sum(covers(x, g["witness"]) for x in bp.SESSION) == 13
    loads = sum(bp.mask(adult, x["where"]).astype(int) for x in bp.SESSION)
    assert int(loads.max()) <= 13


def test_range_rmse_matches_enumeration() -> None:
    rng = np.random.default_rng(0)
    err = rng.normal(size=(3, 9))
    pre, allr = bp.range_rmse(err)
    sq = []
    for e in err:
        for i, j in itertools.combinations_with_replacement(range(9), 2):
            sq.append((e[j] - (e[i - 1] if i else 0.0)) ** 2)
    assert pre == pytest.approx(math.sqrt(np.mean(err**2)))
    assert allr == pytest.approx(math.sqrt(np.mean(sq)))


def test_ratios_geometric_mean() -> None:
    truth = {"a": 0.0, "b": 0.0, "c": 0.0}
    kinds = {"a": "COUNT", "b": "COUNT", "c": "SUM"}
    answers = {
        "dpmagic": {"as_written": {"a": [1.0, -1.0], "b": [2.0, 2.0], "c": [3.0, 3.0]}},
        "peer": {"sequential": {"a": [4.0, 4.0], "b": [2.0, -2.0], "c": [1.0, 1.0]}},
    }
    r = bp.summarise(answers, truth, kinds, ["a", "b", "c"], {})["ratios"]["peer:sequential"]
    assert r["COUNT"] == pytest.approx(math.sqrt(0.25 * 1.0))
    assert r["SUM"] == pytest.approx(3.0) and r["AVG"] is None
    assert r["all"] == pytest.approx((0.25 * 1.0 * 3.0) ** (1 / 3))


def test_dpmagic_side_tiny(adult: pd.DataFrame) -> None:
    """The dpmagic side of a tiny workload: three disjoint AVG/COUNT slices and a total (γ = 2), two repetitions;
    every statistic answered each time and the budget ε = 1 spent exactly."""
    tiny = [bp.q("COUNT", None)] + [bp.q("AVG", "age", [["eq", "sex", v]]) for v in ("Male", "Female")]
    g = bp.dpmagic_gamma(adult, tiny)
    assert g["exact"] and g["gamma"] == 2
    got, info = bp.run_dpmagic(adult, bp.expand(tiny, SCHEMA), 1.0 / g["gamma"], 2)
    assert set(got) == {"COUNT(*)", "AVG(age) WHERE sex = Male", "AVG(age) WHERE sex = Female"}
    assert all(len(v) == 2 and all(math.isfinite(x) for x in v) for v in got.values())
    assert info["spent_max"] == pytest.approx(1.0, abs=1e-9) and info["spent_max"] <= 1.0 + 1e-9


def test_batch_path_is_session_batch() -> None:
    """The benchmark's batch path (plan once, then Session.run) plans and charges as ``Session.batch`` does."""
    from dpmagic import Session

    rng = np.random.default_rng(1)
    df = pd.DataFrame({"x": rng.integers(0, 16, size=500)})
    pre, info = bp.run_dpmagic_batch(df, 2, col="x", n=16)
    assert pre.shape == (2, 16) and info["charged"] == pytest.approx(1.0)
    s = Session(df, {"table": "adult", "columns": {"x": {"type": "int", "lower": 0, "upper": 15}}}, "epsilon=1.0")
    dry = s.batch("prefix(x)", epsilon=1.0, dry_run=True)
    assert dry.strategy == info["strategy"]
    assert dry.rmse[dry.strategy] == pytest.approx(info["expected_rmse"])


def _peers_dir() -> Path:
    return Path(os.environ.get("DPMAGIC_PEERS", str(Path.home() / ".cache/dpmagic-peers")))


@pytest.mark.skipif(not (_peers_dir() / "opendp" / "bin" / "python").exists(), reason="no OpenDP peer venv")
def test_opendp_adapter_tiny(adult: pd.DataFrame, tmp_path: Path) -> None:
    """Only where the peer venvs exist: the OpenDP adapter answers a tiny job in its own interpreter."""
    _, _, csv = bp.prepare(tmp_path)
    tiny = bp.expand([bp.q("COUNT", None, group="sex"), bp.q("AVG", "age", [["eq", "sex", "Male"]])], SCHEMA)
    job = {
        "data": str(csv),
        "bounds": {"age": [17, 90], bp.HIST_COL: [0, bp.HIST_N - 1]},
        "categories": {"sex": ["Female", "Male"]},
        "reps": 1,
        "seed": 0,
        "sessions": {"sequential": bp._peerify(tiny, 0.5)},
        "histogram": {"col": bp.HIST_COL, "n": bp.HIST_N, "epsilon": 1.0, "reps": 1},
    }
    out, status = bp.run_peer("opendp", _peers_dir() / "opendp", job, tmp_path, 300)
    assert status == "ok" and out is not None
    assert set(out["answers"]["sequential"]) == {
        "COUNT(*) WHERE sex = Female",
        "COUNT(*) WHERE sex = Male",
        "AVG(age) WHERE sex = Male",
    }
    assert len(out["histogram"]) == 1 and len(out["histogram"][0]) == bp.HIST_N
    assert "opendp" in out["versions"]
