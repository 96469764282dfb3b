"""A realistic claims table: many rows per patient, invariant demographics, varying dates, amounts, diagnoses.

Issue 26 (docs/people.md): the privacy unit of such a table is the patient, not the claim.  One row is one claim:

* ``patient_id`` (int) — the person; patients have a skewed number of claims: ``1 + Poisson(λ)`` with
  ``λ = 5 · exp(0.02 · (age − 50) + 0.9 Z)``, ``Z ~ N(0, 1)`` (a log-normal rate, older patients claim more),
  capped at :data:`MAX_CLAIMS` — mean about 11, median 7, about 3% of patients above 40 claims (holding 7% of the
  claims beyond their 40th), a tail of hundreds;
* invariant demographics (constant within a patient): ``sex`` (F / M), ``birth_year`` (int, 1925..2010) and
  ``region`` (8 regions, unequal sizes);
* varying columns: ``day`` (int day of the year 1..365), ``month`` (int 1..12, the month of ``day``),
  ``diagnosis`` (12 ICD-10-like chapters, their mix depending on age), ``setting`` (outpatient / pharmacy /
  emergency / inpatient) and ``amount`` (float, log-normal by setting, declared [0, 20000]).

The generator is vectorised numpy, seeded, and made of fixed blocks of :data:`BLOCK_PATIENTS` patients, each block
drawn from its own generator ``default_rng([seed, block])``: the same seed gives the same patients whatever the
size asked (``claims(n)`` holds the patients of ``claims(N)``'s first blocks, the last one possibly cut), and 10M
rows take a few seconds.  It makes
*data*, not noise (noise always comes from OpenDP's samplers).  :func:`claims_schema` is the custodian's declaration
(a person-level ``privacy_unit`` object, or ``"one row"`` for the row-level comparison); :func:`write_parquet`
writes a cached Parquet file (DuckDB's ``COPY``) for the engine backends.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

__all__ = [
    "BLOCK_PATIENTS",
    "DIAGNOSES",
    "INVARIANT",
    "MAX_CLAIMS",
    "REGIONS",
    "SETTINGS",
    "claims",
    "claims_schema",
    "session_queries",
    "KINDS",
    "rows_per_patient",
    "write_parquet",
]

#: patients per generator block (fixed: the output does not depend on the requested size but through the cut)
BLOCK_PATIENTS = 50_000
#: the most claims one patient has in the generated data (the tail beyond any sensible ``max_rows``)
MAX_CLAIMS = 400
#: the declared upper end of ``patient_id`` (public: a range of possible ids, not the ids present)
MAX_PATIENT_ID = 100_000_000
REGIONS: tuple[str, ...] = ("North", "North-East", "East", "South-East", "South", "South-West", "West", "Central")
_REGION_P = np.array([0.08, 0.10, 0.14, 0.18, 0.12, 0.09, 0.11, 0.18])
DIAGNOSES: tuple[str, ...] = (
    "circulatory",
    "respiratory",
    "musculoskeletal",
    "endocrine",
    "mental",
    "digestive",
    "injury",
    "neoplasm",
    "genitourinary",
    "skin",
    "infectious",
    "other",
)
#: diagnosis mix for a young (age 0) and an old (age 100) patient; a patient's mix is interpolated by age
_DIAG_YOUNG = np.array([0.02, 0.20, 0.10, 0.04, 0.12, 0.08, 0.18, 0.01, 0.05, 0.08, 0.08, 0.04])
_DIAG_OLD = np.array([0.30, 0.12, 0.14, 0.12, 0.04, 0.07, 0.03, 0.10, 0.06, 0.02, 0.02, 0.02])
SETTINGS: tuple[str, ...] = ("outpatient", "pharmacy", "emergency", "inpatient")
_SETTING_P = np.array([0.55, 0.30, 0.10, 0.05])
#: log-normal (median, σ) of the amount per setting
_AMOUNT = np.array([[120.0, 0.8], [45.0, 0.9], [600.0, 0.7], [4000.0, 0.6]])
AMOUNT_MAX = 20_000.0
BIRTH_YEARS = (1925, 2010)
YEAR = 2025
#: the columns constant within a patient
INVARIANT: tuple[str, ...] = ("sex", "birth_year", "region")
_MONTH_START = np.cumsum([0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30])  # day-of-year before month m+1


def _block(seed: int, block: int, first_id: int) -> pd.DataFrame:
    """One block of BLOCK_PATIENTS patients (all of their claims), rows shuffled within the block."""
    rng = np.random.default_rng([seed, block])
    p = BLOCK_PATIENTS
    birth = rng.integers(BIRTH_YEARS[0], BIRTH_YEARS[1] + 1, p)
    age = YEAR - birth
    sex = (rng.random(p) < 0.52).astype(np.int8)  # 0 = F, 1 = M
    region = rng.choice(len(REGIONS), p, p=_REGION_P).astype(np.int8)
    lam = 5.0 * np.exp(0.02 * (age - 50) + 0.9 * rng.standard_normal(p))
    n = np.minimum(1 + rng.poisson(lam), MAX_CLAIMS)
    who = np.repeat(np.arange(p), n)
    rows = len(who)
    # diagnosis: inverse-CDF sampling from the patient's age-interpolated mix (vectorised over rows)
    t = (age[who] / 100.0)[:, None]
    cdf = np.cumsum((1 - t) * _DIAG_YOUNG + t * _DIAG_OLD, axis=1)
    u = rng.random(rows)[:, None] * cdf[:, -1:]
    diagnosis = (u > cdf).sum(axis=1).astype(np.int8)
    setting = rng.choice(len(SETTINGS), rows, p=_SETTING_P).astype(np.int8)
    med, sig = _AMOUNT[setting, 0], _AMOUNT[setting, 1]
    amount = np.round(np.clip(med * np.exp(sig * rng.standard_normal(rows)), 0.0, AMOUNT_MAX), 2)
    # claim days: each patient has a season (peak day) and their claims cluster loosely around it
    peak = rng.integers(0, 365, p)
    day = 1 + (peak[who] + np.round(rng.normal(0.0, 60.0, rows)).astype(np.int64)) % 365
    month = np.searchsorted(_MONTH_START, day - 1, side="right")
    order = rng.permutation(rows)
    who, day, month = who[order], day[order], month[order]
    diagnosis, setting, amount = diagnosis[order], setting[order], amount[order]
    return pd.DataFrame(
        {
            "patient_id": (first_id + who).astype(np.int64),
            "sex": pd.Categorical.from_codes(sex[who], categories=["F", "M"]),
            "birth_year": birth[who].astype(np.int64),
            "region": pd.Categorical.from_codes(region[who], categories=list(REGIONS)),
            "day": day.astype(np.int64),
            "month": month.astype(np.int64),
            "diagnosis": pd.Categorical.from_codes(diagnosis, categories=list(DIAGNOSES)),
            "setting": pd.Categorical.from_codes(setting, categories=list(SETTINGS)),
            "amount": amount,
        }
    )


def claims(rows: int, seed: int = 26) -> pd.DataFrame:
    """The first ``rows`` claims of the seeded claims table (module docstring), as a pandas DataFrame.

    Blocks of patients are generated until there are enough rows; the last patient kept may lose claims at the
    cut.  Rows of one block are shuffled (a patient's claims are not contiguous), blocks follow each other.
    """
    if isinstance(rows, bool) or not isinstance(rows, int) or rows < 1:
        raise ValueError(f"rows must be a positive integer, got {rows!r}")
    parts: list[pd.DataFrame] = []
    have = 0
    block = 0
    while have < rows:
        part = _block(seed, block, 1 + block * BLOCK_PATIENTS)
        if have + len(part) > rows:
            # cut inside this block: keep whole patients in id order, then the needed claims of the next one
            part = part.sort_values("patient_id", kind="stable").head(rows - have)
            part = part.sample(frac=1.0, random_state=np.random.default_rng([seed, block, 1]))
        parts.append(part)
        have += len(part)
        block += 1
    out = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0].reset_index(drop=True)
    return out


def claims_schema(
    max_rows: int | None = 40,
    *,
    invariant: tuple[str, ...] | list[str] = INVARIANT,
    per_group: dict[str, dict[str, int]] | None = None,
    dataset: str | None = "claims-bench",
    table: str = "claims",
) -> dict[str, Any]:
    """The custodian's schema of the claims table (a JSON-able dict, docs/schema.md).

    ``max_rows`` K gives the person-level unit ``{"id": "patient_id", "max_rows": K, "invariant": [...]}`` (plus
    ``per_group`` if given); ``max_rows=None`` gives the same table at row level (``"privacy_unit": "one row"``),
    the comparison every figure of bench_people.py makes.  The row-level schema gets its own data-set id (a
    declaration with another unit is another binding).
    """
    unit: Any
    if max_rows is None:
        unit = "one row"
    else:
        unit = {"id": "patient_id", "max_rows": max_rows, "invariant": list(invariant)}
        if per_group:
            unit["per_group"] = {c: dict(b) for c, b in per_group.items()}
    out: dict[str, Any] = {} if dataset is None else {"dataset": dataset + ("-rows" if max_rows is None else "")}
    out.update(
        {
            "table": table,
            "privacy_unit": unit,
            "columns": {
                "patient_id": {"type": "int", "lower": 1, "upper": MAX_PATIENT_ID},
                "sex": {"type": "categorical", "values": ["F", "M"]},
                "birth_year": {"type": "int", "lower": BIRTH_YEARS[0], "upper": BIRTH_YEARS[1]},
                "region": {"type": "categorical", "values": list(REGIONS)},
                "day": {"type": "int", "lower": 1, "upper": 365},
                "month": {"type": "int", "lower": 1, "upper": 12},
                "diagnosis": {"type": "categorical", "values": list(DIAGNOSES)},
                "setting": {"type": "categorical", "values": list(SETTINGS)},
                "amount": {"type": "float", "lower": 0.0, "upper": AMOUNT_MAX},
            },
        }
    )
    return out


def rows_per_patient(df: pd.DataFrame) -> pd.Series:
    """The number of claims of each patient (the custodian's view of the skew; never an analyst's)."""
    return df.groupby("patient_id", sort=False).size()


def write_parquet(rows: int, seed: int = 26, folder: Path | str | None = None) -> Path:
    """The claims table of ``rows`` rows as a Parquet file (written once by DuckDB, then cached by name).

    ``folder`` defaults to ``$DPMAGIC_BENCH_DIR`` or ``/tmp/dpmagic_bench`` (never the repository).
    """
    import duckdb

    where = Path(folder or os.environ.get("DPMAGIC_BENCH_DIR", "/tmp/dpmagic_bench"))
    where.mkdir(parents=True, exist_ok=True)
    path = where / f"claims_{rows}_s{seed}.parquet"
    if path.exists():
        return path
    frame = claims(rows, seed)
    tmp = path.with_suffix(".tmp")
    con = duckdb.connect(config={"memory_limit": "2GB"})
    con.register("frame", frame)
    con.execute(f"COPY (SELECT * FROM frame) TO '{tmp}' (FORMAT parquet, ROW_GROUP_SIZE 1000000)")
    con.close()
    tmp.rename(path)
    return path


# --------------------------------------------------------------------------------------------------
# an analyst's session on the claims table (bench_people.py (b), the notebook)

#: the aggregate shapes of :func:`session_queries` and how often each is drawn
KINDS: tuple[str, ...] = ("count", "sum", "avg", "group by", "count distinct")
_KIND_P = np.array([0.3, 0.15, 0.15, 0.25, 0.15])
_GROUPABLE = ("diagnosis", "setting", "month", "sex", "region")


def _invariant_predicate(rng: np.random.Generator, taken: set[str]) -> tuple[str, str] | None:
    free = [c for c in INVARIANT if c not in taken]
    if not free:
        return None
    c = str(rng.choice(free))
    if c == "sex":
        return c, f"sex = '{rng.choice(['F', 'M'])}'"
    if c == "region":
        if rng.random() < 0.75:
            return c, f"region = '{rng.choice(REGIONS)}'"
        a, b = rng.choice(len(REGIONS), 2, replace=False)
        return c, f"region IN ('{REGIONS[a]}', '{REGIONS[b]}')"
    lo = int(rng.integers(1925, 2001)) // 10 * 10
    return c, f"birth_year BETWEEN {lo} AND {lo + 9}"


def _varying_predicate(rng: np.random.Generator, taken: set[str]) -> tuple[str, str] | None:
    free = [c for c in ("month", "diagnosis", "setting", "amount") if c not in taken]
    if not free:
        return None
    c = str(rng.choice(free))
    if c == "month":
        m = int(rng.integers(1, 11))
        return c, f"month BETWEEN {m} AND {m + 2}"
    if c == "diagnosis":
        return c, f"diagnosis = '{rng.choice(DIAGNOSES)}'"
    if c == "setting":
        return c, f"setting = '{rng.choice(SETTINGS)}'"
    return c, f"amount > {int(rng.choice([100, 500, 1000, 5000]))}"


def session_queries(t: int = 200, seed: int = 0, table: str = "claims") -> list[dict[str, Any]]:
    """``t`` mixed analyst queries on the claims table: COUNT, SUM, AVG, GROUP BY and COUNT(DISTINCT patient_id).

    Each query has one to three predicates; a query constrains the invariant demographics (``sex``, ``birth_year``,
    ``region``: one or two of them) with probability 0.85, and a varying column (``month``, ``diagnosis``,
    ``setting``, ``amount``) with probability 0.5 — so well over half of all predicates are on invariant columns.
    The statements are distinct (a repeat is drawn again).  Returns one dict per query: ``sql``, ``kind``, ``where`` (the WHERE text, "" for none), ``group_by`` (a
    column or None), ``invariant`` and ``varying`` (the predicate counts).  Seeded; no global random state.
    """
    rng = np.random.default_rng([seed, 26])
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    while len(out) < t:
        kind = str(rng.choice(KINDS, p=_KIND_P))
        taken: set[str] = set()
        preds: list[str] = []
        inv = var = 0
        if rng.random() < 0.85:
            for _ in range(1 if rng.random() < 0.6 else 2):
                got = _invariant_predicate(rng, taken)
                if got:
                    taken.add(got[0])
                    preds.append(got[1])
                    inv += 1
        if rng.random() < 0.5 or not preds:
            got = _varying_predicate(rng, taken)
            if got:
                taken.add(got[0])
                preds.append(got[1])
                var += 1
        where = " AND ".join(preds)
        w = f" WHERE {where}" if where else ""
        group = None
        if kind == "count":
            sql = f"SELECT COUNT(*) AS n FROM {table}{w}"
        elif kind == "sum":
            sql = f"SELECT SUM(amount) AS total FROM {table}{w}"
        elif kind == "avg":
            sql = f"SELECT AVG(amount) AS mean FROM {table}{w}"
        elif kind == "count distinct":
            sql = f"SELECT COUNT(DISTINCT patient_id) AS patients FROM {table}{w}"
        else:
            group = str(rng.choice([c for c in _GROUPABLE if c not in taken]))
            sql = f"SELECT {group}, COUNT(*) AS n FROM {table}{w} GROUP BY {group}"
        if sql in seen:  # a repeated statement would be answered from the session's cache, uncharged
            continue
        seen.add(sql)
        out.append({"sql": sql, "kind": kind, "where": where, "group_by": group, "invariant": inv, "varying": var})
    return out
