"""COUNT(DISTINCT col): the number of distinct values of a column in each cell.

Sensitivity (per cell, the same as COUNT's):

* add/remove one row: the row's value is either new to the cell (+1) or already present (0): Δ = 1;
* replace one row x → y in the same cell: removing x lowers the count by at most 1, adding y raises it by at
  most 1, and the two cannot both happen in the same direction: |Δ| ≤ 1;
* replace one row with GROUP BY across cells: one cell −1 or 0, the other +1 or 0: L1 ≤ 2, L2 ≤ √2
  (the ``spread`` of :mod:`dpmagic.aggregates.common`).

The release is integer noise (discrete Laplace / discrete Gaussian) on the exact distinct count, clipped at 0
(post-processing).  Its 95% interval is the noise's (before the clip).  Cost: one release.
"""

from __future__ import annotations

import numpy as np

from dpmagic.aggregates.common import CellCalibration
from dpmagic.mechanisms import Noise, noise_for, release_integer

__all__ = ["plan", "exact", "release"]


def plan(cal: CellCalibration) -> Noise:
    return noise_for(cal.definition, cal.cell_cost, cal.spread * 1.0, integer=True)


def exact(values: np.ndarray, cell: np.ndarray, n_cells: int) -> np.ndarray:
    """Distinct values per cell (exact; ``cell`` is each selected row's cell index)."""
    out = np.zeros(n_cells, dtype=np.int64)
    if len(values) == 0:
        return out
    import pandas as pd

    frame = pd.DataFrame({"c": cell, "v": values})
    counts = frame.drop_duplicates().groupby("c").size()
    out[counts.index.to_numpy(dtype=np.int64)] = counts.to_numpy(dtype=np.int64)
    return out


def release(counts: np.ndarray, noise: Noise, level: float = 0.95) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    noisy = release_integer(counts, noise).astype(float)
    h = noise.ci_halfwidth(level)
    return np.maximum(noisy, 0.0), noisy - h, noisy + h
