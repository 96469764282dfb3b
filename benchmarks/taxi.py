"""A generator of a taxi-like trips table (NYC yellow-taxi shape): date × pickup zone, ≥ 1M rows.

Columns: ``date`` (15 days), ``zone`` (34 zones), ``cell`` (= date|zone, the GROUP BY key: 510 groups),
``fare`` (float, declared [0, 200]), ``total`` (float, [0, 250]), ``passengers`` (int, [1, 6]),
``payment`` (card / cash / other), ``store_fwd`` (Y / N). Zone popularity is log-normal and days have a
weekly pattern, so per-cell counts spread over two orders of magnitude, with a few hot cells (anomalies
for mean + 3·std thresholds). The generator uses numpy's seeded generator: it makes *data*, not noise.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

DAYS = [f"2020-01-{d:02d}" for d in range(1, 16)]
ZONES = [f"Z{z:02d}" for z in range(34)]
CELLS = [f"{d}|{z}" for d in DAYS for z in ZONES]
BOUNDS = {"fare": (0.0, 200.0), "total": (0.0, 250.0), "passengers": (1, 6)}
INTEGER_COLUMNS = {"passengers"}


def generate(rows: int = 1_200_000, seed: int = 3) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    zone_w = rng.lognormal(0.0, 1.0, len(ZONES))
    day_w = 1.0 + 0.3 * np.sin(np.arange(len(DAYS)) * 2 * np.pi / 7)
    cell_w = np.outer(day_w, zone_w).ravel()
    hot = rng.choice(len(CELLS), 8, replace=False)  # a few anomalous cells (events)
    cell_w[hot] *= 4.0
    cell_w /= cell_w.sum()
    idx = rng.choice(len(CELLS), size=rows, p=cell_w)
    zone_fare = rng.uniform(8, 30, len(ZONES))
    fare = np.clip(rng.gamma(2.0, zone_fare[idx % len(ZONES)] / 2.0), 0, 200)
    total = np.clip(fare * rng.uniform(1.0, 1.3, rows) + rng.uniform(0, 5, rows), 0, 250)
    df = pd.DataFrame(
        {
            "cell": pd.Categorical.from_codes(idx, categories=CELLS),
            "fare": fare,
            "total": total,
            "passengers": rng.choice([1, 2, 3, 4, 5, 6], size=rows, p=[0.7, 0.15, 0.05, 0.04, 0.04, 0.02]),
            "payment": rng.choice(["card", "cash", "other"], size=rows, p=[0.68, 0.3, 0.02]),
            "store_fwd": rng.choice(["N", "Y"], size=rows, p=[0.99, 0.01]),
        }
    )
    return df
