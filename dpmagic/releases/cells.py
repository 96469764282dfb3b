"""The exact aggregates a backend returns for one query: the value passed from the data layer to a mechanism.

Neutral ground between :mod:`dpmagic.backends` (which produce it) and :mod:`dpmagic.releases.plan` /
:mod:`dpmagic.releases` (which noise it): neither imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["Cells"]


@dataclass
class Cells:
    """Exact aggregates for each GROUP BY cell, in declared-key order."""

    keys: list[tuple[object, ...]]
    counts: np.ndarray  # int64, one per cell
    sums: dict[str, list[int]]  # exact integer sums per cell, in the column's units (1, or a float quantum)
    extra: dict[str, Any] = field(default_factory=dict)  # exact inputs of the dpmagic.aggregates units
