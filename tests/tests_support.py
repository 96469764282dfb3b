"""Helpers shared by tests (not a test module)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dpmagic import Session
from dpmagic.domain.schema import CategoricalColumn, Schema
from dpmagic.domain.sets import Box, CategorySet

DATA = Path(__file__).resolve().parents[1] / "dpmagic" / "data"


def pums_session(budget: str, **kwargs) -> Session:
    df = pd.read_csv(DATA / "pums.csv")
    return Session(df, Schema.from_json(DATA / "pums.schema.json"), budget, **kwargs)


def uniform_boxes(t: int, m: int = 10, kmin: int = 2, kmax: int = 4, seed: int = 0) -> tuple[Schema, list[Box]]:
    """Seed 000 §7.1 style instances (m categorical columns with kmin..kmax values, random subsets)."""
    rng = np.random.default_rng(seed)
    cols = {f"a{j}": CategoricalColumn(f"a{j}", tuple(range(int(rng.integers(kmin, kmax + 1))))) for j in range(m)}
    sch = Schema(cols)
    names = list(cols)
    out = []
    for _ in range(t):
        cons = {}
        for name in rng.choice(names, int(rng.integers(1, m + 1)), replace=False):
            col = cols[str(name)]
            vals = rng.choice(col.size, int(rng.integers(1, col.size + 1)), replace=False)
            cons[str(name)] = CategorySet.of_indices(col, vals)
        out.append(Box(cons))
    return sch, out


def run_cell(ip: Any, code: str) -> tuple[Any, Any]:
    """Run ``code`` in a real IPython shell, capturing what it prints: (ExecutionResult, captured output)."""
    from IPython.utils.capture import capture_output

    with capture_output() as cap:
        result = ip.run_cell(code, store_history=False)
    return result, cap
