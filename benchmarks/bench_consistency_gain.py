"""The expected RMSE gain of ``Session.consistent()`` on workload A of ``bench_peers.py``, computed analytically.

The consistent estimate ŷ = A y has covariance A D (``dpmagic.releases.consistency``), which depends on the noise
scales and the regions only: one run of the 40 queries gives the exact variance of every statistic before and after
(COUNT, SUM: linear outputs, exact; AVG = c + S/n: first order in the noise, Var ≈ (Var S − 2 μ_c Cov(S, n) + μ_c²
Var n) / N², with the true centred mean μ_c and count N of the group — benchmark data, used for scoring only).
Prints the per-statistic ratio of standard deviations and their geometric means per aggregate and overall.

    python benchmarks/bench_consistency_gain.py
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_peers import ADULT_CSV, ADULT_SCHEMA, SESSION, exact, expand, to_sql  # noqa: E402


def main() -> dict[str, float]:
    import json

    from dpmagic import Session
    from dpmagic.releases.consistency import Consistent, measurements_of

    df = pd.read_csv(ADULT_CSV)
    schema = json.loads(Path(ADULT_SCHEMA).read_text())
    seq = expand(SESSION, schema)
    s = Session(df, ADULT_SCHEMA, "epsilon=1.0")
    eps = 1.0 / 13.0  # γ = 13 (exact): bench_peers_s10
    got = []
    for x in seq:
        r = s.query(to_sql(x), epsilon=eps)
        got.append((x, r))
    ms, index = [], {}
    for _x, r in got:
        m, _ = measurements_of(r.number, r.query, s.schema, r.drawn)
        for mm in m:
            index[(r.number, mm.name, mm.cell)] = len(ms)
            ms.append(mm)
    est = Consistent(ms, s.schema)
    d = np.array([m.variance for m in ms])
    cov = est.covariance
    print(f"{len(ms)} measurements, {est.dependencies} independent linear identities")
    ratios: dict[str, list[float]] = {"COUNT": [], "SUM": [], "AVG": []}
    rows = []
    for x, r in got:
        q = r.query
        agg = q.aggregates[0]
        labels = [k for k in x["group"]["keys"]] if x["group"] else [None]
        ids = x["group"]["stat_ids"] if x["group"] else [x["stat_id"]]
        for cell, (lab, sid) in enumerate(zip(labels, ids, strict=True)):
            if x["group"]:
                cell = [g for g in q.groups][0].labels.index(lab)
            n_i = index.get((r.number, "count", cell))
            if agg.func == "count":
                w = {n_i: 1.0}
            elif agg.func == "sum":
                w = {index[(r.number, f"sum({agg.sum_key})", cell)]: 1.0}
            else:
                s_i = index[(r.number, f"s({agg.sum_key})", cell)]
                p = r.drawn.centred[agg.sum_key][2]
                xs = x["where"] + ([["eq", x["group"]["col"], lab]] if x["group"] else [])
                n_true = exact(df, "COUNT", None, xs)
                mu_c = exact(df, "AVG", str(agg.column), xs) - float(p.c)
                w = {s_i: 1.0 / n_true, n_i: -mu_c / n_true}
            raw = sum(wi * wi * d[i] for i, wi in w.items())
            ref = sum(wi * wj * cov[i, j] for i, wi in w.items() for j, wj in w.items())
            ratio = math.sqrt(ref / raw)
            ratios[agg.func.upper()].append(ratio)
            rows.append((sid, agg.func.upper(), math.sqrt(raw), math.sqrt(ref), ratio))
    for sid, kind, a, b, rr in rows:
        print(f"{kind:5s} {sid:60s} raw sd {a:12.4g}  consistent sd {b:12.4g}  ratio {rr:.3f}")
    out = {}
    for k, v in ratios.items():
        out[k] = math.exp(float(np.mean(np.log(v))))
        print(f"{k}: geometric mean of sd ratios {out[k]:.3f} over {len(v)} statistics")
    allr = [r for v in ratios.values() for r in v]
    out["all"] = math.exp(float(np.mean(np.log(allr))))
    print(f"whole session: geometric mean {out['all']:.3f} over {len(allr)} statistics")
    return out


if __name__ == "__main__":
    main()
